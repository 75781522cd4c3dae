"""`pubsub-gateway topics|subscriptions|snapshots|publish|pull|seek`: administer a running gateway.

A client of the gateway's gRPC API (its own generated stubs), for what gcloud would do against
Google: create, list, describe and delete resources, publish, peek at or drain a subscription,
seek. The gateway is `--address` or PUBSUB_EMULATOR_HOST; short names take their project from
`--project` or PUBSUB_PROJECT_ID. Output is for people by default and JSON with `--format json`
(the REST API's field names: camelCase, data in base64). A refused call prints its gRPC status and
message on stderr and exits with EXIT_RPC_FAILED.

Only argparse is imported at first: `pubsub-gateway serve` registers these commands without
paying for grpc or rich.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc

    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
    from gateway.admin_output import Output

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
# The resources that hold IAM policies, and the collection of their names.
IAM_COLLECTIONS = {
    "topics": "topics",
    "subscriptions": "subscriptions",
    "snapshots": "snapshots",
    "schemas": "schemas",
}
# What one PublishRequest may hold (Pub/Sub's limits: 1,000 messages, 10 MB a request).
PUBLISH_BATCH_MESSAGES = 1000
PUBLISH_BATCH_BYTES = 9 * 1024 * 1024
PULL_BATCH = 1000
_MAX_RECEIVE = 64 * 1024 * 1024  # a single message may exceed the 4 MiB pull response budget


class UsageError(Exception):
    """The command line names something it cannot: said on stderr, exit EXIT_USAGE."""


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


def _push_config(a: argparse.Namespace, endpoint: str) -> Any:
    """The PushConfig of --push-endpoint and the push flags given with it."""
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    config = pb.PushConfig(push_endpoint=endpoint)
    extra = a.push_no_wrapper or a.push_auth_service_account or a.push_auth_token_audience
    if not endpoint:
        if extra:
            raise UsageError("--push-no-wrapper and --push-auth-* need a --push-endpoint")
        return config
    if a.push_no_wrapper:
        config.no_wrapper.SetInParent()
    if a.push_auth_token_audience and not a.push_auth_service_account:
        raise UsageError("--push-auth-token-audience needs --push-auth-service-account")
    if a.push_auth_service_account:
        config.oidc_token.service_account_email = a.push_auth_service_account
        config.oidc_token.audience = a.push_auth_token_audience or ""
    return config


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


class OutputFailed(Exception):
    """stdout could not be written: said on stderr, exit EXIT_OUTPUT_FAILED."""


def run(args: argparse.Namespace) -> int:
    """Carry out an admin command; the exit status."""
    import grpc

    from gateway.admin_output import Output

    out = Output(args.format, args.progress)
    try:
        with _channel(args) as channel:
            iam = getattr(args, "action", "") in _IAM_ACTIONS
            return (_iam if iam else _HANDLERS[args.command])(_Context(args, channel, out))
    except UsageError as exc:
        print(f"pubsub-gateway {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OutputFailed as exc:
        print(f"pubsub-gateway {args.command}: {exc}", file=sys.stderr)
        _quiet_stdout()
        return EXIT_OUTPUT_FAILED
    except grpc.RpcError as exc:
        out.error(exc)
        return EXIT_RPC_FAILED
    except KeyboardInterrupt:  # what was done is said (publish); no traceback for a Ctrl-C
        return EXIT_INTERRUPTED


# --------------------------------------------------------------------------- the calls


class _Context:
    def __init__(self, args: argparse.Namespace, channel: grpc.Channel, out: Output) -> None:
        from google.iam.v1 import iam_policy_pb2_grpc

        from gateway._pb.google.pubsub.v1 import pubsub_pb2_grpc, schema_pb2_grpc

        self.args = args
        self.out = out
        self.publisher = pubsub_pb2_grpc.PublisherStub(channel)
        self.subscriber = pubsub_pb2_grpc.SubscriberStub(channel)
        self.schemas = schema_pb2_grpc.SchemaServiceStub(channel)
        self.iam = iam_policy_pb2_grpc.IAMPolicyStub(channel)  # type: ignore[no-untyped-call]
        token = _read(args.token_file).strip() if args.token_file else None
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None

    def call(self, method: Callable[..., Any], request: object) -> Any:
        return method(request, timeout=self.args.timeout, metadata=self._metadata)

    def name(self, value: str, collection: str, project: str | None = None) -> str:
        """`value` in full: as given when it is, else in `project` (default --project)."""
        if value.startswith("projects/"):
            return value
        return f"projects/{project or self.project()}/{collection}/{value}"

    def project(self) -> str:
        project = self.args.project or os.environ.get("PUBSUB_PROJECT_ID")
        if not project:
            raise UsageError("give --project (or set PUBSUB_PROJECT_ID), or full resource names")
        return project

    def pages(self, method: Callable[..., Any], request: Any, field: str) -> Iterator[Any]:
        while True:
            response = self.call(method, request)
            yield from getattr(response, field)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token


def _channel(args: argparse.Namespace) -> grpc.Channel:
    import grpc

    address = args.address or os.environ.get("PUBSUB_EMULATOR_HOST")
    if not address:
        raise UsageError("no gateway: give --address HOST:PORT or set PUBSUB_EMULATOR_HOST")
    options = [("grpc.max_receive_message_length", _MAX_RECEIVE)]
    if args.tls_ca_file:
        creds = grpc.ssl_channel_credentials(_read(args.tls_ca_file).encode())
        return grpc.secure_channel(address, creds, options=options)
    return grpc.insecure_channel(address, options=options)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def _pairs(values: list[str], flag: str, commas: bool = False) -> dict[str, str]:
    """KEY=VALUE entries (with `commas`, each entry may hold several, comma-separated, as
    gcloud's --labels and --attribute do)."""
    entries = [e for v in values for e in v.split(",") if e] if commas else values
    pairs = {}
    for value in entries:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, not {value!r}")
        pairs[key] = val
    return pairs


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(value: str, flag: str) -> int:
    """A duration as gcloud writes them (`600s`, `10m`, `1h30m`, `7d`; a bare number is
    seconds), in whole seconds."""
    import re

    text = value.strip().lower()
    if re.fullmatch(r"\d+", text):
        return int(text)
    parts = re.findall(r"(\d+)([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise UsageError(f"{flag} takes a duration such as 600s, 10m, 1h or 7d, not {value!r}")
    return sum(int(n) * _DURATION_UNITS[u] for n, u in parts)


def _topics(ctx: _Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
    from gateway._pb.google.pubsub.v1 import schema_pb2

    a = ctx.args
    if a.action == "list":
        request = pb.ListTopicsRequest(project=f"projects/{ctx.project()}")
        ctx.out.resources(list(ctx.pages(ctx.publisher.ListTopics, request, "topics")))
    elif a.action == "describe":
        ctx.out.resource(
            ctx.call(ctx.publisher.GetTopic, pb.GetTopicRequest(topic=ctx.name(a.name, "topics")))
        )
    elif a.action == "delete":
        name = ctx.name(a.name, "topics")
        ctx.call(ctx.publisher.DeleteTopic, pb.DeleteTopicRequest(topic=name))
        ctx.out.deleted(name)
    elif a.action == "update":
        current = ctx.call(ctx.publisher.GetTopic, pb.GetTopicRequest(topic=ctx.name(a.name, "topics")))
        topic = pb.Topic(name=current.name)
        paths = _labels_updated(a, current.labels, topic.labels)
        if a.message_retention_duration:
            topic.message_retention_duration.seconds = _seconds(
                a.message_retention_duration, "--message-retention-duration"
            )
        if a.message_retention_duration or a.clear_message_retention_duration:
            paths.append("message_retention_duration")
        if not paths:
            raise UsageError("nothing to update: give at least one setting")
        change = pb.UpdateTopicRequest(topic=topic, update_mask={"paths": paths})
        ctx.out.resource(ctx.call(ctx.publisher.UpdateTopic, change))
    elif a.action == "list-subscriptions":
        of_topic = pb.ListTopicSubscriptionsRequest(topic=ctx.name(a.name, "topics"))
        found = list(ctx.pages(ctx.publisher.ListTopicSubscriptions, of_topic, "subscriptions"))
        ctx.out.done("\n".join(found), found)
    elif a.action == "detach-subscription":
        name = ctx.name(a.subscription, "subscriptions")
        ctx.call(ctx.publisher.DetachSubscription, pb.DetachSubscriptionRequest(subscription=name))
        ctx.out.done(f"detached {name}", {"subscription": name, "detached": True})
    elif a.action == "publish":
        return _publish_one(ctx)
    else:
        labels = _pairs(a.label, "--labels", commas=True)
        if a.partitions is not None:
            labels["kafka-partitions"] = str(a.partitions)
        if a.kafka_topic:
            labels["kafka-topic"] = a.kafka_topic
        topic = pb.Topic(name=ctx.name(a.name, "topics"), labels=labels)
        if a.message_retention_duration:
            topic.message_retention_duration.seconds = _seconds(
                a.message_retention_duration, "--message-retention-duration"
            )
        if a.schema:
            settings = topic.schema_settings
            settings.schema = ctx.name(a.schema, "schemas")
            binary = a.message_encoding == "binary"
            settings.encoding = schema_pb2.Encoding.BINARY if binary else schema_pb2.Encoding.JSON
            settings.first_revision_id = a.first_revision_id or ""
            settings.last_revision_id = a.last_revision_id or ""
        elif a.message_encoding or a.first_revision_id or a.last_revision_id:
            raise UsageError("--message-encoding and the revision ids need --schema")
        if a.message_storage_policy_allowed_regions:
            topic.message_storage_policy.allowed_persistence_regions.extend(
                a.message_storage_policy_allowed_regions
            )
        if a.topic_encryption_key:
            topic.kms_key_name = a.topic_encryption_key
        ctx.out.resource(ctx.call(ctx.publisher.CreateTopic, topic), created=True)
    return 0


def _subscriptions(ctx: _Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    if a.action == "list":
        project = ctx.project() if not a.topic else ctx.name(a.topic, "topics").split("/")[1]
        request = pb.ListSubscriptionsRequest(project=f"projects/{project}")
        found = list(ctx.pages(ctx.subscriber.ListSubscriptions, request, "subscriptions"))
        if a.topic:  # ListTopicSubscriptions gives names only: the same list, filtered
            found = [s for s in found if s.topic == ctx.name(a.topic, "topics")]
        ctx.out.resources(found)
    elif a.action == "describe":
        name = ctx.name(a.name, "subscriptions")
        ctx.out.resource(
            ctx.call(ctx.subscriber.GetSubscription, pb.GetSubscriptionRequest(subscription=name))
        )
    elif a.action == "delete":
        name = ctx.name(a.name, "subscriptions")
        ctx.call(ctx.subscriber.DeleteSubscription, pb.DeleteSubscriptionRequest(subscription=name))
        ctx.out.deleted(name)
    elif a.action == "update":
        _update_subscription(ctx)
    elif a.action == "pull":
        return _pull(ctx)
    elif a.action == "seek":
        return _seek(ctx)
    elif a.action in ("ack", "modify-message-ack-deadline"):
        name = ctx.name(a.subscription, "subscriptions")
        if a.action == "ack":
            ctx.call(ctx.subscriber.Acknowledge, pb.AcknowledgeRequest(subscription=name, ack_ids=a.ack_ids))
            ctx.out.done(
                f"acknowledged {len(a.ack_ids)} messages", {"subscription": name, "ackIds": a.ack_ids}
            )
        else:
            modack = pb.ModifyAckDeadlineRequest(
                subscription=name, ack_ids=a.ack_ids, ack_deadline_seconds=a.ack_deadline
            )
            ctx.call(ctx.subscriber.ModifyAckDeadline, modack)
            doc = {"subscription": name, "ackIds": a.ack_ids, "ackDeadlineSeconds": a.ack_deadline}
            ctx.out.done(f"set the ack deadline of {len(a.ack_ids)} messages to {a.ack_deadline} s", doc)
    elif a.action == "modify-push-config":
        name = ctx.name(a.subscription, "subscriptions")
        config = _push_config(a, a.push_endpoint)
        ctx.call(
            ctx.subscriber.ModifyPushConfig, pb.ModifyPushConfigRequest(subscription=name, push_config=config)
        )
        text = f"{name} pushes to {a.push_endpoint}" if a.push_endpoint else f"{name} is a pull subscription"
        ctx.out.done(text, {"subscription": name, "pushEndpoint": a.push_endpoint})
    else:
        sub = pb.Subscription(
            name=ctx.name(a.name, "subscriptions"),
            topic=ctx.name(a.topic, "topics", a.topic_project),
            labels=_pairs(a.label, "--labels", commas=True),
            enable_message_ordering=a.ordering,
            enable_exactly_once_delivery=a.exactly_once,
            filter=a.filter or "",
            retain_acked_messages=a.retain_acked_messages,
        )
        if a.ack_deadline is not None:
            sub.ack_deadline_seconds = a.ack_deadline
        config = _push_config(a, a.push_endpoint or "")
        if a.push_endpoint:
            sub.push_config.CopyFrom(config)
        if a.bigquery_table:  # the gateway refuses these with its reason (docs/fields.md)
            sub.bigquery_config.table = a.bigquery_table
        if a.cloud_storage_bucket:
            sub.cloud_storage_config.bucket = a.cloud_storage_bucket
        if a.message_retention_duration:
            sub.message_retention_duration.seconds = _seconds(
                a.message_retention_duration, "--message-retention-duration"
            )
        if a.expiration_period:
            if a.expiration_period.strip().lower() == "never":
                sub.expiration_policy.SetInParent()  # no ttl: never expires
            else:
                sub.expiration_policy.ttl.seconds = _seconds(a.expiration_period, "--expiration-period")
        if a.min_retry_delay or a.max_retry_delay:
            if a.min_retry_delay:
                sub.retry_policy.minimum_backoff.seconds = _seconds(a.min_retry_delay, "--min-retry-delay")
            if a.max_retry_delay:
                sub.retry_policy.maximum_backoff.seconds = _seconds(a.max_retry_delay, "--max-retry-delay")
        if a.dead_letter_topic:
            dead = ctx.name(a.dead_letter_topic, "topics", a.dead_letter_topic_project)
            sub.dead_letter_policy.dead_letter_topic = dead
            if a.max_delivery_attempts is not None:
                sub.dead_letter_policy.max_delivery_attempts = a.max_delivery_attempts
        elif a.max_delivery_attempts is not None:
            raise UsageError("--max-delivery-attempts needs --dead-letter-topic")
        ctx.out.resource(ctx.call(ctx.subscriber.CreateSubscription, sub), created=True)
    return 0


def _labels_updated(a: argparse.Namespace, current: Any, out: Any) -> list[str]:
    """The labels --update-labels, --remove-labels and --clear-labels make of `current`, into
    `out`; ["labels"] when they change anything asked, else []."""
    if not (a.update_labels or a.remove_labels or a.clear_labels):
        return []
    labels = {} if a.clear_labels else dict(current)
    labels.update(_pairs(a.update_labels, "--update-labels", commas=True))
    for key in (k for v in a.remove_labels for k in v.split(",") if k):
        labels.pop(key, None)
    out.update(labels)
    return ["labels"]


def _update_subscription(ctx: _Context) -> None:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    name = ctx.name(a.name, "subscriptions")
    current = ctx.call(ctx.subscriber.GetSubscription, pb.GetSubscriptionRequest(subscription=name))
    sub = pb.Subscription(name=name, topic=current.topic)
    paths = _labels_updated(a, current.labels, sub.labels)
    if a.ack_deadline is not None:
        sub.ack_deadline_seconds = a.ack_deadline
        paths.append("ack_deadline_seconds")
    if a.push_endpoint is not None:
        sub.push_config.CopyFrom(_push_config(a, a.push_endpoint))
        paths.append("push_config")
    elif a.push_no_wrapper or a.push_auth_service_account or a.push_auth_token_audience:
        raise UsageError("--push-no-wrapper and --push-auth-* need a --push-endpoint")
    if a.message_retention_duration:
        sub.message_retention_duration.seconds = _seconds(
            a.message_retention_duration, "--message-retention-duration"
        )
        paths.append("message_retention_duration")
    if a.retain_acked_messages is not None:
        sub.retain_acked_messages = a.retain_acked_messages
        paths.append("retain_acked_messages")
    if a.enable_exactly_once_delivery is not None:
        sub.enable_exactly_once_delivery = a.enable_exactly_once_delivery
        paths.append("enable_exactly_once_delivery")
    if a.expiration_period:
        if a.expiration_period.strip().lower() == "never":
            sub.expiration_policy.SetInParent()
        else:
            sub.expiration_policy.ttl.seconds = _seconds(a.expiration_period, "--expiration-period")
        paths.append("expiration_policy")
    if a.dead_letter_topic or a.max_delivery_attempts is not None:
        if a.clear_dead_letter_policy:
            raise UsageError("--max-delivery-attempts and --clear-dead-letter-policy contradict each other")
        sub.dead_letter_policy.CopyFrom(current.dead_letter_policy)
        if a.dead_letter_topic:
            sub.dead_letter_policy.dead_letter_topic = ctx.name(a.dead_letter_topic, "topics")
        if a.max_delivery_attempts is not None:
            sub.dead_letter_policy.max_delivery_attempts = a.max_delivery_attempts
        paths.append("dead_letter_policy")
    elif a.clear_dead_letter_policy:
        paths.append("dead_letter_policy")
    if a.min_retry_delay or a.max_retry_delay:
        if a.clear_retry_policy:
            raise UsageError("--max-retry-delay and --clear-retry-policy contradict each other")
        sub.retry_policy.CopyFrom(current.retry_policy)
        if a.min_retry_delay:
            sub.retry_policy.minimum_backoff.seconds = _seconds(a.min_retry_delay, "--min-retry-delay")
        if a.max_retry_delay:
            sub.retry_policy.maximum_backoff.seconds = _seconds(a.max_retry_delay, "--max-retry-delay")
        paths.append("retry_policy")
    elif a.clear_retry_policy:
        paths.append("retry_policy")
    if not paths:
        raise UsageError("nothing to update: give at least one setting")
    request = pb.UpdateSubscriptionRequest(subscription=sub, update_mask={"paths": paths})
    ctx.out.resource(ctx.call(ctx.subscriber.UpdateSubscription, request))


def _snapshots(ctx: _Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    if a.action == "list":
        request = pb.ListSnapshotsRequest(project=f"projects/{ctx.project()}")
        ctx.out.resources(list(ctx.pages(ctx.subscriber.ListSnapshots, request, "snapshots")))
    elif a.action == "describe":
        name = ctx.name(a.name, "snapshots")
        ctx.out.resource(ctx.call(ctx.subscriber.GetSnapshot, pb.GetSnapshotRequest(snapshot=name)))
    elif a.action == "delete":
        name = ctx.name(a.name, "snapshots")
        ctx.call(ctx.subscriber.DeleteSnapshot, pb.DeleteSnapshotRequest(snapshot=name))
        ctx.out.deleted(name)
    else:
        create = pb.CreateSnapshotRequest(
            name=ctx.name(a.name, "snapshots"),
            subscription=ctx.name(a.subscription, "subscriptions"),
            labels=_pairs(a.label, "--labels", commas=True),
        )
        ctx.out.resource(ctx.call(ctx.subscriber.CreateSnapshot, create), created=True)
    return 0


def _publish(ctx: _Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    topic = ctx.name(a.topic, "topics")
    attributes = _pairs(a.attribute, "--attribute")
    from_stdin = not a.messages
    data: Iterator[bytes] = (
        (line for line in (raw.rstrip(b"\n") for raw in sys.stdin.buffer) if line)  # blank lines skipped
        if from_stdin
        else (m.encode() for m in a.messages)
    )
    ids: list[str] = []
    with ctx.out.progress(f"publishing to {topic}", long=from_stdin) as advance:
        try:
            for batch in _batches(data):
                messages = [
                    pb.PubsubMessage(data=d, attributes=attributes, ordering_key=a.ordering_key or "")
                    for d in batch
                ]
                response = ctx.call(ctx.publisher.Publish, pb.PublishRequest(topic=topic, messages=messages))
                ids.extend(response.message_ids)
                advance(len(batch))
        except BaseException:
            if ids:
                print(
                    f"pubsub-gateway publish: {len(ids)} messages were published before this", file=sys.stderr
                )
            raise
    ctx.out.published(topic, ids)
    return 0


def _publish_one(ctx: _Context) -> int:
    """`topics publish`: one message, its data from --message, --message-file (- for stdin, all
    of it) or --message-base64."""
    import base64
    import binascii

    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    topic = ctx.name(a.topic, "topics")
    if a.message is not None:
        data = a.message.encode()
    elif a.message_file == "-":
        data = sys.stdin.buffer.read()
    elif a.message_file is not None:
        try:
            with open(a.message_file, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {a.message_file}: {exc.strerror}") from None
    elif a.message_base64 is not None:
        try:
            data = base64.b64decode(a.message_base64, validate=True)
        except binascii.Error:
            raise UsageError("--message-base64 is not base64") from None
    else:
        data = b""
    attributes = _pairs(a.attribute, "--attribute", commas=True)
    if not data and not attributes:
        raise UsageError(
            "a message needs data (--message, --message-file, --message-base64) or an --attribute"
        )
    message = pb.PubsubMessage(data=data, attributes=attributes, ordering_key=a.ordering_key or "")
    response = ctx.call(ctx.publisher.Publish, pb.PublishRequest(topic=topic, messages=[message]))
    ctx.out.published(topic, list(response.message_ids))
    return 0


def _batches(data: Iterator[bytes]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    size = 0
    for item in data:
        if batch and (len(batch) == PUBLISH_BATCH_MESSAGES or size + len(item) > PUBLISH_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += len(item)
    if batch:
        yield batch


def _pull(ctx: _Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    subscription = ctx.name(a.subscription, "subscriptions")
    limit = a.max if a.max is not None else (None if a.all else getattr(a, "default_limit", 10))
    if limit is not None and limit < 1:
        raise UsageError("--max must be at least 1")
    got: list[pb.ReceivedMessage] = []
    seen: set[str] = set()
    with ctx.out.progress(f"pulling from {subscription}", long=a.all) as advance:
        while limit is None or len(got) < limit:
            batch = PULL_BATCH if limit is None else min(PULL_BATCH, limit - len(got))
            request = pb.PullRequest(subscription=subscription, max_messages=batch)
            received = list(ctx.call(ctx.subscriber.Pull, request).received_messages)
            # Without --ack, what was printed may come back (nacked, or its deadline passed):
            # --all ends there rather than print it again.
            new = [m for m in received if m.message.message_id not in seen]
            seen.update(m.message.message_id for m in new)
            try:  # written, flushed and synced first: only then acknowledged
                ctx.out.messages(new)
            except OSError as exc:
                _release(ctx, subscription, received)
                raise OutputFailed(
                    f"cannot write the messages ({exc.strerror or exc}); the {len(received)} "
                    "pulled last were not acknowledged and are delivered again"
                ) from None
            _settle(ctx, subscription, received)
            got.extend(new)
            advance(len(new))
            if not a.all or not received or len(new) < len(received):
                break
    ctx.out.pulled(subscription, got)
    return 0


def _release(ctx: _Context, subscription: str, received: list[pb.ReceivedMessage]) -> None:
    """Hand back messages that could not be written, for redelivery now (best effort: their
    ack deadline brings them back otherwise)."""
    import grpc

    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    ids = [m.ack_id for m in received]
    if ids and ctx.args.ack:
        request = pb.ModifyAckDeadlineRequest(subscription=subscription, ack_ids=ids, ack_deadline_seconds=0)
        with contextlib.suppress(grpc.RpcError):
            ctx.call(ctx.subscriber.ModifyAckDeadline, request)


def _quiet_stdout() -> None:
    """stdout is closed or full: point it at /dev/null, so that the interpreter's own flush at
    exit does not fail again (Python's advice for a closed pipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _settle(ctx: _Context, subscription: str, received: list[pb.ReceivedMessage]) -> None:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    ids = [m.ack_id for m in received]
    if not ids:
        return
    if ctx.args.ack:
        ctx.call(ctx.subscriber.Acknowledge, pb.AcknowledgeRequest(subscription=subscription, ack_ids=ids))
    elif ctx.args.nack:
        request = pb.ModifyAckDeadlineRequest(subscription=subscription, ack_ids=ids, ack_deadline_seconds=0)
        ctx.call(ctx.subscriber.ModifyAckDeadline, request)


def _seek(ctx: _Context) -> int:
    import datetime

    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    request = pb.SeekRequest(subscription=ctx.name(a.subscription, "subscriptions"))
    if a.snapshot:
        request.snapshot = ctx.name(a.snapshot, "snapshots")
        target = request.snapshot
    else:
        try:
            when = datetime.datetime.fromisoformat(a.time)
        except ValueError:
            raise UsageError(f"--time takes an ISO 8601 time, not {a.time!r}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        request.time.FromDatetime(when)
        target = when.isoformat()
    ctx.call(ctx.subscriber.Seek, request)
    ctx.out.sought(request.subscription, target)
    return 0


_IAM_ACTIONS = ("get-iam-policy", "set-iam-policy", "add-iam-policy-binding", "remove-iam-policy-binding")
_SCHEMA_TYPES = {"avro": "AVRO", "protocol-buffer": "PROTOCOL_BUFFER"}


def _definition(a: argparse.Namespace) -> str:
    return _read(a.definition_file) if a.definition_file else str(a.definition)


def _schemas(ctx: _Context) -> int:
    from gateway._pb.google.pubsub.v1 import schema_pb2 as spb

    a = ctx.args
    if a.action == "list":
        listing = spb.ListSchemasRequest(parent=f"projects/{ctx.project()}")
        ctx.out.resources(list(ctx.pages(ctx.schemas.ListSchemas, listing, "schemas")))
    elif a.action == "describe":
        ctx.out.resource(
            ctx.call(ctx.schemas.GetSchema, spb.GetSchemaRequest(name=ctx.name(a.name, "schemas")))
        )
    elif a.action == "delete":
        name = ctx.name(a.name, "schemas")
        ctx.call(ctx.schemas.DeleteSchema, spb.DeleteSchemaRequest(name=name))
        ctx.out.deleted(name)
    elif a.action in ("create", "commit"):
        name = ctx.name(a.name, "schemas")
        schema = spb.Schema(name=name, type=_SCHEMA_TYPES[a.type], definition=_definition(a))
        if a.action == "create":
            parent = "/".join(name.split("/")[:2])
            create = spb.CreateSchemaRequest(parent=parent, schema_id=name.rsplit("/", 1)[1], schema=schema)
            ctx.out.resource(ctx.call(ctx.schemas.CreateSchema, create), created=True)
        else:
            ctx.out.resource(
                ctx.call(ctx.schemas.CommitSchema, spb.CommitSchemaRequest(name=name, schema=schema))
            )
    elif a.action == "list-revisions":
        revisions = spb.ListSchemaRevisionsRequest(name=ctx.name(a.name, "schemas"))
        found = list(ctx.pages(ctx.schemas.ListSchemaRevisions, revisions, "schemas"))
        if ctx.out.json:
            ctx.out.resources(found)
        else:
            for s in found:
                print(f"{s.revision_id}  {s.revision_create_time.ToJsonString()}")
    elif a.action == "rollback":
        rollback = spb.RollbackSchemaRequest(name=ctx.name(a.name, "schemas"), revision_id=a.revision_id)
        ctx.out.resource(ctx.call(ctx.schemas.RollbackSchema, rollback))
    elif a.action == "delete-revision":
        name, sep, revision = a.name.rpartition("@")
        if not sep or not name or not revision:
            raise UsageError(f"delete-revision takes NAME@REVISION, not {a.name!r}")
        gone = spb.DeleteSchemaRevisionRequest(name=f"{ctx.name(name, 'schemas')}@{revision}")
        ctx.out.resource(ctx.call(ctx.schemas.DeleteSchemaRevision, gone))
    elif a.action == "validate-schema":
        schema = spb.Schema(type=_SCHEMA_TYPES[a.type], definition=_definition(a))
        check = spb.ValidateSchemaRequest(parent=f"projects/{ctx.project()}", schema=schema)
        ctx.call(ctx.schemas.ValidateSchema, check)
        ctx.out.done("the schema is valid", {"valid": True})
    else:
        return _validate_message(ctx)
    return 0


def _validate_message(ctx: _Context) -> int:
    from gateway._pb.google.pubsub.v1 import schema_pb2 as spb

    a = ctx.args
    if a.message is not None:
        message = a.message.encode()
    elif a.message_file == "-":
        message = sys.stdin.buffer.read()
    else:
        try:
            with open(a.message_file, "rb") as f:
                message = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {a.message_file}: {exc.strerror}") from None
    encoding = spb.Encoding.JSON if a.message_encoding == "json" else spb.Encoding.BINARY
    request = spb.ValidateMessageRequest(
        parent=f"projects/{ctx.project()}", message=message, encoding=encoding
    )
    if a.schema_name:
        request.name = ctx.name(a.schema_name, "schemas")
    elif a.type is None:
        raise UsageError("--definition and --definition-file need --type")
    else:
        request.schema.CopyFrom(spb.Schema(type=_SCHEMA_TYPES[a.type], definition=_definition(a)))
    ctx.call(ctx.schemas.ValidateMessage, request)
    ctx.out.done("the message is valid", {"valid": True})
    return 0


def _iam(ctx: _Context) -> int:
    """get-iam-policy, set-iam-policy, add-iam-policy-binding, remove-iam-policy-binding of
    any resource that holds a policy."""
    from google.iam.v1 import iam_policy_pb2, policy_pb2
    from google.protobuf import json_format

    a = ctx.args
    resource = ctx.name(a.name, IAM_COLLECTIONS[a.command])
    get = iam_policy_pb2.GetIamPolicyRequest(resource=resource)
    if a.action == "get-iam-policy":
        ctx.out.resource(ctx.call(ctx.iam.GetIamPolicy, get))
        return 0
    if a.action == "set-iam-policy":
        try:
            policy = json_format.Parse(_read(a.policy_file), policy_pb2.Policy())
        except json_format.ParseError as exc:
            raise UsageError(f"{a.policy_file} is no IAM policy: {exc}") from None
    else:
        policy = ctx.call(ctx.iam.GetIamPolicy, get)  # its etag makes the set below fail on a race
        binding = next((b for b in policy.bindings if b.role == a.role and not b.HasField("condition")), None)
        if a.action == "add-iam-policy-binding":
            if binding is None:
                binding = policy.bindings.add(role=a.role)
            if a.member not in binding.members:
                binding.members.append(a.member)
        else:
            if binding is None or a.member not in binding.members:
                raise UsageError(f"{resource} has no binding of {a.member} to {a.role}")
            binding.members.remove(a.member)
            if not binding.members:
                policy.bindings.remove(binding)
    request = iam_policy_pb2.SetIamPolicyRequest(resource=resource, policy=policy)
    ctx.out.resource(ctx.call(ctx.iam.SetIamPolicy, request))
    return 0


_HANDLERS: dict[str, Callable[[_Context], int]] = {
    "topics": _topics,
    "subscriptions": _subscriptions,
    "snapshots": _snapshots,
    "schemas": _schemas,
    "publish": _publish,
    "pull": _pull,
    "seek": _seek,
}
