"""The ACLs the gateway needs on a cluster with an authorizer, and naming the one that is missing.

What the gateway's principal needs (docs/kafka.md, "Secured clusters"), for an internal prefix
P (``--internal-prefix``) and each project whose topics it serves:

| resource | pattern | operations | for |
|---|---|---|---|
| topic ``P_g`` | prefixed | Create, Read, Write, Delete, DescribeConfigs | its own topics |
| group ``P.`` | prefixed | Read, Delete | subscriptions' groups, the janitor's |
| transactional id ``P.`` | prefixed | Write | dead-lettering transactions |
| topic ``<project>.`` | prefixed | Create, Read, Write, Delete, AlterConfigs | Pub/Sub topics |

Describe is implied by Read, Write and Delete, DescribeConfigs by AlterConfigs. Nothing on the
cluster: since Kafka 3.0 (KIP-679) an idempotent producer needs Write on some topic instead of
IdempotentWrite on the cluster. ``python -m gateway.kafka.acls`` prints the ``kafka-acls.sh``
commands granting this set to a principal, or applies it (``--apply``).

When Kafka refuses the gateway something, `denial` turns the error into a PermissionDenied that
names the operation and the resource, so an operator knows which ACL to add.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from collections.abc import Iterable, Sequence

from confluent_kafka import KafkaError
from confluent_kafka.admin import AclBinding as AclBinding  # type: ignore[attr-defined]
from confluent_kafka.admin import AclBindingFilter as AclBindingFilter  # type: ignore[attr-defined]
from confluent_kafka.admin import AclOperation as AclOperation  # type: ignore[attr-defined]
from confluent_kafka.admin import AclPermissionType as AclPermissionType  # type: ignore[attr-defined]
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import ResourcePatternType as ResourcePatternType  # type: ignore[attr-defined]
from confluent_kafka.admin import ResourceType as ResourceType  # type: ignore[attr-defined]

from gateway.errors import PermissionDenied
from gateway.kafka import Config
from gateway.translate import names

TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER = "topic", "group", "transactional-id", "cluster"

INTERNAL_TOPIC_OPERATIONS = ("CREATE", "READ", "WRITE", "DELETE", "DESCRIBE_CONFIGS")
GROUP_OPERATIONS = ("READ", "DELETE")
TRANSACTIONAL_OPERATIONS = ("WRITE",)
PROJECT_TOPIC_OPERATIONS = ("CREATE", "READ", "WRITE", "DELETE", "ALTER_CONFIGS")
ADOPTED_TOPIC_OPERATIONS = ("READ", "WRITE", "ALTER_CONFIGS")
DOCS = 'docs/kafka.md, "Secured clusters"'


@dataclasses.dataclass(frozen=True, slots=True)
class Grant:
    """ACLs allowing `operations` (AclOperation names) on a resource name or name prefix."""

    resource: str  # TOPIC, GROUP, TRANSACTIONAL_ID or CLUSTER
    name: str
    prefixed: bool
    operations: tuple[str, ...]
    purpose: str


@dataclasses.dataclass(frozen=True, slots=True)
class Need:
    """One operation on one resource that a Kafka call needs."""

    operation: str  # an AclOperation name: READ, WRITE, ...
    resource: str
    name: str

    def __str__(self) -> str:
        return f"{self.operation} on {self.resource} {self.name}"


def internal_topic_prefix(internal_prefix: str) -> str:
    """What every gateway-internal topic name starts with (translate/names.internal_topic)."""
    return str(names.internal_topic(internal_prefix, ""))


def group_prefix(internal_prefix: str) -> str:
    """What every consumer group of the gateway starts with: `<P>.<subscription>.<uid>` and
    `<P>.janitor`."""
    return f"{internal_prefix}."


def transactional_prefix(internal_prefix: str) -> str:
    """What every transactional id starts with: `<P>.<lease log>.<partition>`."""
    return f"{internal_prefix}."


def project_topic_prefix(project: str) -> str:
    """What the Kafka topics of a project's Pub/Sub topics start with: `<escaped project>.`."""
    kafka = names.kafka_topic_for(names.topic(f"projects/{project}/topics/any"))
    return kafka.split(".", 1)[0] + "."


def gateway_grants(
    internal_prefix: str, projects: Iterable[str] = (), adopted_topics: Iterable[str] = ()
) -> list[Grant]:
    """The minimal ACL set of a gateway principal (see the module's table)."""
    grants = [
        Grant(
            TOPIC,
            internal_topic_prefix(internal_prefix),
            True,
            INTERNAL_TOPIC_OPERATIONS,
            "the gateway's own topics: resources, push keys, lease/ack logs",
        ),
        Grant(
            GROUP,
            group_prefix(internal_prefix),
            True,
            GROUP_OPERATIONS,
            "subscriptions' consumer groups and the expiration janitor's",
        ),
        Grant(
            TRANSACTIONAL_ID,
            transactional_prefix(internal_prefix),
            True,
            TRANSACTIONAL_OPERATIONS,
            "dead-lettering: message and ack in one transaction",
        ),
    ]
    grants += [
        Grant(
            TOPIC, project_topic_prefix(p), True, PROJECT_TOPIC_OPERATIONS, f"Pub/Sub topics of project {p}"
        )
        for p in projects
    ]
    grants += [
        Grant(
            TOPIC,
            str(names.check_kafka_topic(t)),
            False,
            ADOPTED_TOPIC_OPERATIONS,
            f"the adopted Kafka topic {t} (label kafka-topic)",
        )
        for t in adopted_topics
    ]
    return grants


def spark_grants(
    internal_prefix: str, projects: Iterable[str] = (), acks: bool = True, publish: bool = False
) -> list[Grant]:
    """What a Spark reader's principal needs (spark/, docs/spark.md): the resource topic, the
    lease/ack logs and the projects' topics to read, the subscriptions' groups to read their
    committed offsets, Write on the logs to acknowledge (`acks`), and Write on the projects'
    topics to publish with spark.write_topic (`publish`; the idempotent producer needs no more
    since Kafka 3.0, where Write on a topic implies IdempotentWrite)."""
    logs = f"{names.internal_topic(internal_prefix, 'acks')}."
    return [
        Grant(
            TOPIC,
            str(names.internal_topic(internal_prefix, "resources")),
            False,
            ("READ",),
            "the gateway's resources: where a subscription's topic and log are",
        ),
        Grant(
            TOPIC,
            logs,
            True,
            ("READ", "WRITE") if acks else ("READ",),
            "lease/ack logs: what is acknowledged" + (", and acknowledging" if acks else ""),
        ),
        Grant(GROUP, group_prefix(internal_prefix), True, ("DESCRIBE",), "subscriptions' committed offsets"),
        *(
            Grant(
                TOPIC,
                project_topic_prefix(p),
                True,
                ("READ", "WRITE") if publish else ("READ",),
                f"Pub/Sub topics of project {p}" + (", and publishing" if publish else ""),
            )
            for p in projects
        ),
    ]


# ------------------------------------------------------------------------ refusals

_RESOURCE_OF = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: TOPIC,
    KafkaError.GROUP_AUTHORIZATION_FAILED: GROUP,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: TRANSACTIONAL_ID,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: CLUSTER,
}


def refused_resource(err: KafkaError) -> str | None:
    """The kind of resource (TOPIC, GROUP, ...) an authorization error of Kafka's is about;
    None for any other error."""
    return _RESOURCE_OF.get(err.code())


def missing(what: str, needs: Sequence[Need], detail: str = "") -> PermissionDenied:
    """PERMISSION_DENIED naming what the gateway's principal lacks."""
    lacks = " and ".join(str(n) for n in needs) or "an operation"
    more = f" ({detail})" if detail else ""
    return PermissionDenied(
        f"{what}: Kafka's authorizer does not allow the gateway's principal {lacks}{more}. "
        f"Grant the ACLs the gateway needs: {DOCS}."
    )


def denial(what: str, err: KafkaError, needs: Sequence[Need]) -> PermissionDenied | None:
    """A PermissionDenied naming the refused operation and resource when `err` is Kafka's
    authorizer refusing; None for any other error. Of `needs`, those on the kind of resource
    the error names are the ones refused (a call may need several: Read on a group and on a
    topic); if none is, the error's own words must do."""
    kind = _RESOURCE_OF.get(err.code())
    if kind is None:
        return None
    refused = [n for n in needs if n.resource == kind]
    if not refused:
        return missing(what, [], f"{kind}: {err.str()}")
    return missing(what, refused if len(refused) == 1 else [_either(refused)], err.str())


def _either(needs: Sequence[Need]) -> Need:
    return Need(
        " or ".join(dict.fromkeys(n.operation for n in needs)),
        needs[0].resource,
        " or ".join(dict.fromkeys(n.name for n in needs)),
    )


# ------------------------------------------------------------------------ applying


def _acl_name(operation: str) -> str:
    """kafka-acls.sh's spelling of an AclOperation name: DESCRIBE_CONFIGS -> DescribeConfigs."""
    return "".join(word.capitalize() for word in operation.split("_"))


def kafka_acls_commands(
    principal: str,
    grants: Sequence[Grant],
    bootstrap: str = "BROKER:9093",
    command_config: str = "admin.properties",
) -> list[str]:
    """One `kafka-acls.sh --add` command per grant."""
    out = []
    for g in grants:
        args = [
            "kafka-acls.sh",
            "--bootstrap-server",
            bootstrap,
            "--command-config",
            command_config,
            "--add",
            "--allow-principal",
            principal,
        ]
        for op in g.operations:
            args += ["--operation", _acl_name(op)]
        args += ["--cluster"] if g.resource == CLUSTER else [f"--{g.resource}", g.name]
        if g.prefixed:
            args += ["--resource-pattern-type", "prefixed"]
        out.append(" ".join(shlex.quote(a) for a in args))
    return out


_KINDS = {
    TOPIC: ResourceType.TOPIC,
    GROUP: ResourceType.GROUP,
    TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID,
    CLUSTER: ResourceType.BROKER,
}


def _patterns(grants: Sequence[Grant]) -> list[tuple[ResourceType, str, ResourcePatternType, str]]:
    """(resource type, name, pattern type, operation) of each ACL of the grants."""
    return [
        (
            _KINDS[g.resource],
            "kafka-cluster" if g.resource == CLUSTER else g.name,
            ResourcePatternType.PREFIXED if g.prefixed else ResourcePatternType.LITERAL,
            op,
        )
        for g in grants
        for op in g.operations
    ]


def apply(
    config: Config, principal: str, grants: Sequence[Grant], host: str = "*", timeout: float = 30.0
) -> None:
    """Create the grants' ACLs (blocking), as a principal allowed to alter the cluster's ACLs."""
    admin = AdminClient(dict(config))
    acls = [
        AclBinding(kind, name, pattern, principal, host, AclOperation[op], AclPermissionType.ALLOW)
        for kind, name, pattern, op in _patterns(grants)
    ]
    for fut in admin.create_acls(acls).values():
        fut.result(timeout)


def revoke(
    config: Config, principal: str, grants: Sequence[Grant], host: str = "*", timeout: float = 30.0
) -> None:
    """Delete exactly the grants' ACLs (blocking)."""
    admin = AdminClient(dict(config))
    filters = [
        AclBindingFilter(kind, name, pattern, principal, host, AclOperation[op], AclPermissionType.ALLOW)
        for kind, name, pattern, op in _patterns(grants)
    ]
    for fut in admin.delete_acls(filters).values():
        fut.result(timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.kafka.acls",
        description="Print (or apply) the ACLs a gateway principal needs on a Kafka cluster "
        "with an authorizer: kafka-acls.sh commands, one per resource pattern.",
    )
    parser.add_argument("--principal", required=True, help="e.g. User:pubsub-gateway")
    parser.add_argument(
        "--internal-prefix",
        default="__pubsub_gateway",
        help="the gateway's --internal-prefix (default __pubsub_gateway)",
    )
    parser.add_argument(
        "--project",
        action="append",
        default=[],
        help="a project whose Pub/Sub topics the gateway serves (repeatable)",
    )
    parser.add_argument(
        "--adopted-topic",
        action="append",
        default=[],
        help="an existing Kafka topic adopted with the label kafka-topic (repeatable)",
    )
    parser.add_argument(
        "--spark-reader",
        action="store_true",
        help="the set of a Spark reader (spark/) instead of the gateway's",
    )
    parser.add_argument("--no-acks", action="store_true", help="with --spark-reader: read only")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="with --spark-reader: also publish to the projects' topics (spark.write_topic)",
    )
    parser.add_argument("--bootstrap", default="BROKER:9093", help="for the printed commands, or --apply")
    parser.add_argument(
        "--command-config",
        default="admin.properties",
        help="kafka-acls.sh --command-config file named in the printed commands",
    )
    parser.add_argument(
        "--apply",
        action="store_true",
        help="create the ACLs now, logging in with --kafka-config (an admin's)",
    )
    parser.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka option of the admin connection for --apply (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        if args.spark_reader:
            grants = spark_grants(
                args.internal_prefix, args.project, acks=not args.no_acks, publish=args.publish
            )
        else:
            grants = gateway_grants(args.internal_prefix, args.project, args.adopted_topic)
    except Exception as exc:  # noqa: BLE001 - a bad name: say which, as argparse would
        parser.error(str(exc))
    if not args.principal.count(":"):
        parser.error("--principal needs a type: User:NAME")
    if not args.apply:
        for grant, command in zip(
            grants,
            kafka_acls_commands(args.principal, grants, args.bootstrap, args.command_config),
            strict=True,
        ):
            print(f"# {grant.purpose}\n{command}")
        return 0
    config = {"bootstrap.servers": args.bootstrap}
    for item in args.kafka_config:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--kafka-config wants KEY=VALUE, got {item!r}")
        config[key.strip()] = value.strip()
    apply(config, args.principal, grants)
    for grant in grants:
        kind = "prefix" if grant.prefixed else "name"
        print(
            f"granted {args.principal} {', '.join(grant.operations)} on {grant.resource} "
            f"{kind} {grant.name} ({grant.purpose})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
