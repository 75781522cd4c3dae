"""`pubsub-gateway topics|subscriptions|snapshots|schemas|publish|pull|seek`: administer a gateway.

A client of the gateway's gRPC API (its own generated stubs), for what gcloud would do against
Google, with gcloud's commands and flags (docs/cli.md, rendered from this parser by
gateway/clidoc.py): this module is the command tree; admin_resources.py the commands on topics,
subscriptions, snapshots, schemas and IAM policies; admin_messages.py publish, pull and seek;
admin_context.py what they share; admin_output.py what they print. The gateway is `--address`
or PUBSUB_EMULATOR_HOST; short names take their project from `--project` or PUBSUB_PROJECT_ID.
Output is for people by default and JSON with `--format json` (the REST API's field names:
camelCase, data in base64). A refused call prints its gRPC status and message on stderr and
exits with EXIT_RPC_FAILED.

Only argparse is imported at first: `pubsub-gateway serve` registers these commands without
paying for grpc or rich.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator

from gateway.admin_context import IAM_COLLECTIONS, Context, OutputFailed, UsageError, channel

EXIT_RPC_FAILED = 1  # the gateway refused a call, or could not be reached: stderr says which
EXIT_USAGE = 2  # as argparse exits for a bad command line
EXIT_OUTPUT_FAILED = 3  # stdout could not be written (closed, the disk full): nothing unwritten acked
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
EXIT_STATUSES = (
    "exit status: 0 done; 1 the gateway refused a call or could not be reached (stderr says "
    "which); 2 a bad command line; 3 stdout could not be written (a closed pipe, a full disk); "
    "130 interrupted (Ctrl-C). pull acknowledges (--ack) only what it has written and flushed "
    "(and synced, when stdout is a file): a message cut off by any of these is delivered again, "
    "never lost."
)
COMMANDS = ("topics", "subscriptions", "snapshots", "schemas", "publish", "pull", "seek")
IAM_ACTIONS = ("get-iam-policy", "set-iam-policy", "add-iam-policy-binding", "remove-iam-policy-binding")


# --------------------------------------------------------------------------- the command line


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the admin commands on `pubsub-gateway`'s subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument("--address", help="the gateway's gRPC HOST:PORT (default: $PUBSUB_EMULATOR_HOST)")
    group.add_argument("--project", help="the project of short names (default: $PUBSUB_PROJECT_ID)")
    group.add_argument("--format", choices=("human", "json"), default="human", help="output (default human)")
    group.add_argument("--timeout", type=float, default=30.0, help="seconds per call (default 30)")
    group.add_argument("--tls-ca-file", metavar="FILE", help="connect with TLS, trusting this CA (PEM)")
    group.add_argument("--token-file", metavar="FILE", help="send the bearer token this file holds")
    group.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr for long work (default: when stderr is a terminal)",
    )

    def crud(
        parser: argparse.ArgumentParser, kind: str
    ) -> argparse._SubParsersAction[argparse.ArgumentParser]:
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("list", parents=[common], help=f"list the project's {kind}s")
        for verb in ("describe", "delete"):
            actions.add_parser(verb, parents=[common], help=f"{verb} a {kind}").add_argument("name")
        return actions

    topics = crud(commands.add_parser("topics", help="create, list, describe, delete topics"), "topic")
    create = topics.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name")
    create.add_argument(
        "--partitions", type=int, help="partitions of its Kafka topic (label kafka-partitions)"
    )
    create.add_argument("--kafka-topic", help="adopt this existing Kafka topic (label kafka-topic)")
    create.add_argument("--message-retention-duration", metavar="DURATION", help="e.g. 10m, 1h, 7d")
    create.add_argument("--schema", help="validate published messages against this schema")
    create.add_argument("--message-encoding", choices=("json", "binary"), help="with --schema")
    create.add_argument("--first-revision-id", help="with --schema: the oldest revision allowed")
    create.add_argument(
        "--message-storage-policy-allowed-regions",
        metavar="REGION,...",
        type=_comma_list,
        help="stored; no effect: the data stays in your Kafka cluster",
    )
    create.add_argument(
        "--topic-encryption-key", metavar="KEY", help="stored; no effect: Kafka encrypts at rest"
    )
    create.add_argument("--last-revision-id", help="with --schema: the newest revision allowed")
    _labels(create)
    update = topics.add_parser("update", parents=[common], help="change a topic's labels or retention")
    update.add_argument("name")
    _label_updates(update)
    retention = update.add_mutually_exclusive_group()
    retention.add_argument("--message-retention-duration", metavar="DURATION", help="e.g. 10m, 1h, 7d")
    retention.add_argument("--clear-message-retention-duration", action="store_true")
    listed = topics.add_parser("list-subscriptions", parents=[common], help="the subscriptions of a topic")
    listed.add_argument("name")
    detach = topics.add_parser(
        "detach-subscription", parents=[common], help="detach a subscription from its topic"
    )
    detach.add_argument("subscription")
    publish = topics.add_parser(
        "publish",
        parents=[common],
        help="publish one message (gcloud's form of `publish`)",
        description="Publish one message: its data from --message, --message-file (- for all of "
        "stdin) or --message-base64, with attributes and an ordering key.",
    )
    publish.add_argument("topic")
    data = publish.add_mutually_exclusive_group()
    data.add_argument("--message", help="the data, as text (UTF-8)")
    data.add_argument("--message-file", metavar="FILE", help="the data: the whole file, bytes as they are")
    data.add_argument("--message-base64", metavar="BASE64", help="the data, in base64")
    publish.add_argument(
        "--attribute",
        action="append",
        default=[],
        metavar="KEY=VALUE,...",
        help="attributes, comma-separated",
    )
    publish.add_argument("--ordering-key", help="the message's ordering key")

    subs = crud(
        commands.add_parser("subscriptions", help="create, list, describe, delete subscriptions"),
        "subscription",
    )
    subs.choices["list"].add_argument("--topic", help="only the subscriptions of this topic")
    create = subs.add_parser("create", parents=[common], help="create a subscription")
    create.add_argument("name")
    create.add_argument("--topic", required=True)
    create.add_argument("--topic-project", help="the project of a short --topic (default: --project)")
    create.add_argument("--dead-letter-topic-project", help="the project of a short --dead-letter-topic")
    create.add_argument(
        "--bigquery-table", metavar="PROJECT:DATASET.TABLE", help="refused: no BigQuery export"
    )
    create.add_argument("--cloud-storage-bucket", metavar="BUCKET", help="refused: no Cloud Storage export")
    create.add_argument("--ack-deadline", type=int, metavar="SECONDS")
    create.add_argument("--message-filter", "--filter", dest="filter", help="a Pub/Sub filter on attributes")
    create.add_argument(
        "--enable-message-ordering", "--ordering", dest="ordering", action="store_true", help="ordering keys"
    )
    create.add_argument(
        "--enable-exactly-once-delivery",
        "--exactly-once",
        dest="exactly_once",
        action="store_true",
        help="exactly-once delivery",
    )
    create.add_argument("--push-endpoint", metavar="URL")
    create.add_argument(
        "--push-no-wrapper",
        action="store_true",
        help="push the message data alone, without the JSON envelope",
    )
    _push_auth(create)
    create.add_argument("--dead-letter-topic")
    create.add_argument("--max-delivery-attempts", type=int)
    create.add_argument("--message-retention-duration", metavar="DURATION", help="e.g. 10m, 1h, 7d")
    create.add_argument("--retain-acked-messages", action="store_true", help="keep acknowledged messages")
    create.add_argument("--expiration-period", metavar="DURATION", help="idle time before deletion, or never")
    create.add_argument("--min-retry-delay", metavar="DURATION", help="retry policy: the first backoff")
    create.add_argument("--max-retry-delay", metavar="DURATION", help="retry policy: the longest backoff")
    _labels(create)

    update = subs.add_parser("update", parents=[common], help="change a subscription's settings")
    update.add_argument("name")
    _label_updates(update)
    update.add_argument("--ack-deadline", type=int, metavar="SECONDS")
    update.add_argument("--push-endpoint", metavar="URL", help='"" makes it a pull subscription')
    update.add_argument("--push-no-wrapper", action="store_true", help="with --push-endpoint: no envelope")
    _push_auth(update)
    update.add_argument("--message-retention-duration", metavar="DURATION")
    update.add_argument("--retain-acked-messages", action=argparse.BooleanOptionalAction, default=None)
    update.add_argument("--enable-exactly-once-delivery", action=argparse.BooleanOptionalAction, default=None)
    update.add_argument("--expiration-period", metavar="DURATION", help="a duration, or never")
    dead = update.add_mutually_exclusive_group()
    dead.add_argument("--dead-letter-topic")
    dead.add_argument("--clear-dead-letter-policy", action="store_true")
    update.add_argument("--max-delivery-attempts", type=int)
    retry = update.add_mutually_exclusive_group()
    retry.add_argument("--min-retry-delay", metavar="DURATION")
    retry.add_argument("--clear-retry-policy", action="store_true")
    update.add_argument("--max-retry-delay", metavar="DURATION")
    pull = subs.add_parser("pull", parents=[common], help="pull messages (gcloud's form of `pull`)")
    pull.add_argument("subscription")
    pull.add_argument("--limit", dest="max", type=int, help="at most this many messages (default 1)")
    pull.add_argument("--auto-ack", dest="ack", action="store_true", help="acknowledge what was written")
    pull.add_argument("--all", action="store_true", help="pull until a pull returns nothing")
    pull.set_defaults(nack=False, default_limit=1)
    ack = subs.add_parser("ack", parents=[common], help="acknowledge messages by their ack ids")
    ack.add_argument("subscription")
    ack.add_argument("--ack-ids", required=True, type=_comma_list, metavar="ACK_ID,...")
    modack = subs.add_parser(
        "modify-message-ack-deadline", parents=[common], help="change the ack deadline of messages"
    )
    modack.add_argument("subscription")
    modack.add_argument("--ack-ids", required=True, type=_comma_list, metavar="ACK_ID,...")
    modack.add_argument("--ack-deadline", required=True, type=int, metavar="SECONDS", help="0 releases them")
    push = subs.add_parser("modify-push-config", parents=[common], help="set or clear the push endpoint")
    push.add_argument("subscription")
    push.add_argument("--push-endpoint", required=True, metavar="URL", help='"" makes it a pull subscription')
    push.add_argument("--push-no-wrapper", action="store_true", help="the message data alone, no envelope")
    _push_auth(push)
    _seek_parser(subs.add_parser("seek", parents=[common], help="seek to a time or a snapshot"))

    snaps = crud(
        commands.add_parser("snapshots", help="create, list, describe, delete snapshots"), "snapshot"
    )
    create = snaps.add_parser("create", parents=[common], help="snapshot a subscription's ack state")
    create.add_argument("name")
    create.add_argument("--subscription", required=True)
    _labels(create)

    publish = commands.add_parser(
        "publish",
        parents=[common],
        help="publish messages: the arguments, or stdin one message per line",
        description="Publish each MESSAGE; without any, each line of stdin (its newline removed; "
        "empty lines are skipped), in batches of up to 1,000.",
    )
    publish.add_argument("topic")
    publish.add_argument("messages", nargs="*", metavar="MESSAGE")
    publish.add_argument(
        "-a",
        "--attribute",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an attribute of every message",
    )
    publish.add_argument("--ordering-key", help="the ordering key of every message")

    pull = commands.add_parser(
        "pull",
        parents=[common],
        help="pull messages and print them; --ack acknowledges them",
        description="Pull up to --max messages, printing each batch as it comes (--format json: "
        "one JSON object per message and line). Unless acknowledged (--ack) or released (--nack), "
        "they stay leased until their ack deadline passes, as with gcloud. A batch is acknowledged "
        "only once it is written.",
    )
    pull.add_argument("subscription")
    pull.add_argument("--max", type=int, help="at most this many messages (default 10; with --all, no limit)")
    pull.add_argument(
        "--all", action="store_true", help="pull until a pull returns nothing (a drain with --ack)"
    )
    release = pull.add_mutually_exclusive_group()
    release.add_argument(
        "--ack", action="store_true", help="acknowledge what was printed, once it is written and flushed"
    )
    release.add_argument("--nack", action="store_true", help="release what was printed for redelivery now")

    _seek_parser(
        commands.add_parser("seek", parents=[common], help="seek a subscription to a time or a snapshot")
    )

    schemas = crud(
        commands.add_parser("schemas", help="create, commit, validate, list, describe, delete schemas"),
        "schema",
    )
    for verb, what in (
        ("create", "create a schema"),
        ("commit", "commit a new revision"),
        ("validate-schema", "check a definition without storing it"),
    ):
        parser = schemas.add_parser(verb, parents=[common], help=what)
        if verb != "validate-schema":
            parser.add_argument("name")
        parser.add_argument("--type", required=True, choices=("avro", "protocol-buffer"))
        definition = parser.add_mutually_exclusive_group(required=True)
        definition.add_argument("--definition")
        definition.add_argument("--definition-file", metavar="FILE")
    revisions = schemas.add_parser(
        "list-revisions", parents=[common], help="a schema's revisions, newest first"
    )
    revisions.add_argument("name")
    rollback = schemas.add_parser("rollback", parents=[common], help="commit an earlier revision again")
    rollback.add_argument("name")
    rollback.add_argument("--revision-id", required=True)
    deleted = schemas.add_parser(
        "delete-revision", parents=[common], help="delete one revision: NAME@REVISION"
    )
    deleted.add_argument("name", metavar="NAME@REVISION")
    check = schemas.add_parser("validate-message", parents=[common], help="check a message against a schema")
    check.add_argument("--message-encoding", required=True, choices=("json", "binary"))
    body = check.add_mutually_exclusive_group(required=True)
    body.add_argument("--message")
    body.add_argument("--message-file", metavar="FILE", help="the message, bytes as they are (- for stdin)")
    spec = check.add_mutually_exclusive_group(required=True)
    spec.add_argument("--schema-name")
    spec.add_argument("--definition")
    spec.add_argument("--definition-file", metavar="FILE")
    check.add_argument("--type", choices=("avro", "protocol-buffer"), help="with --definition[-file]")

    for command in IAM_COLLECTIONS:  # gcloud's IAM commands, on every resource that has a policy
        actions = _actions_of(commands.choices[command])
        actions.add_parser("get-iam-policy", parents=[common], help="the IAM policy").add_argument("name")
        setter = actions.add_parser("set-iam-policy", parents=[common], help="replace the IAM policy")
        setter.add_argument("name")
        setter.add_argument(
            "policy_file", metavar="POLICY_FILE", help="a JSON policy, as get-iam-policy prints it"
        )
        for verb in ("add-iam-policy-binding", "remove-iam-policy-binding"):
            binding = actions.add_parser(
                verb, parents=[common], help=verb.replace("-", " ").replace("iam ", "IAM ")
            )
            binding.add_argument("name")
            binding.add_argument("--member", required=True, help="e.g. user:ana@example.com, allUsers")
            binding.add_argument("--role", required=True, help="e.g. roles/pubsub.subscriber")
    for command in COMMANDS:  # every admin command's help ends with what its exit status means
        for parser in _with_actions(commands.choices[command]):
            parser.epilog = EXIT_STATUSES


def _push_auth(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--push-auth-service-account",
        metavar="EMAIL",
        help="sign each push with an OIDC token for this account",
    )
    parser.add_argument("--push-auth-token-audience", metavar="AUDIENCE", help="the token's audience")


def _label_updates(parser: argparse.ArgumentParser) -> None:
    labels = parser.add_mutually_exclusive_group()
    labels.add_argument("--update-labels", action="append", default=[], metavar="KEY=VALUE,...")
    labels.add_argument("--clear-labels", action="store_true")
    parser.add_argument("--remove-labels", action="append", default=[], metavar="KEY,...")


def _seek_parser(seek: argparse.ArgumentParser) -> None:
    seek.add_argument("subscription")
    target = seek.add_mutually_exclusive_group(required=True)
    target.add_argument("--time", help="ISO 8601, e.g. 2026-11-25T16:00:00Z (no zone: UTC)")
    target.add_argument("--snapshot")


def _comma_list(value: str) -> list[str]:
    return [v for v in value.split(",") if v]


def _actions_of(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise LookupError(parser.prog)


def _with_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and the parsers of its subcommands."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.values()


def _labels(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--labels",
        "--label",
        dest="label",
        action="append",
        default=[],
        metavar="KEY=VALUE,...",
        help="labels, comma-separated or the flag repeated",
    )


def run(args: argparse.Namespace) -> int:
    """Carry out an admin command; the exit status."""
    import grpc

    from gateway import admin_messages, admin_resources
    from gateway.admin_output import Output

    handlers: dict[str, Callable[[Context], int]] = {
        "topics": admin_resources.topics,
        "subscriptions": admin_resources.subscriptions,
        "snapshots": admin_resources.snapshots,
        "schemas": admin_resources.schemas,
        "publish": admin_messages.publish,
        "pull": admin_messages.pull,
        "seek": admin_messages.seek,
    }
    iam = getattr(args, "action", "") in IAM_ACTIONS
    handler = admin_resources.iam if iam else handlers[args.command]
    out = Output(args.format, args.progress)
    try:
        with channel(args) as connected:
            return handler(Context(args, connected, out))
    except UsageError as exc:
        print(f"pubsub-gateway {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OutputFailed as exc:
        print(f"pubsub-gateway {args.command}: {exc}", file=sys.stderr)
        admin_messages.quiet_stdout()
        return EXIT_OUTPUT_FAILED
    except grpc.RpcError as exc:
        out.error(exc)
        return EXIT_RPC_FAILED
    except KeyboardInterrupt:  # what was done is said (publish); no traceback for a Ctrl-C
        return EXIT_INTERRUPTED
