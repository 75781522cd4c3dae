"""A secured local broker for tests: SASL_SSL with SCRAM-SHA-512 logins, a CA made for it, and
Kafka's StandardAuthorizer allowing nobody anything without an ACL (gateway/kafka/secured.py).

Principals get exactly the ACLs a test grants them; `acls_of` reads back what they have.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, AdminClient
from confluent_kafka.admin import ResourcePatternType as PatternType
from confluent_kafka.admin import ResourceType as KafkaResource

from gateway.kafka import acls
from gateway.kafka.local import STOCK, LocalKafka
from tests.gateways import kafka_version

Acl = tuple[str, str, str, str]  # resource type, name, pattern type, operation


@contextlib.contextmanager
def secured_kafka(data_dir: Path, users: dict[str, str]) -> Iterator[LocalKafka]:
    """One secured node with Kafka's stock settings, and SCRAM logins for `users`."""
    with LocalKafka(
        data_dir=data_dir, heap_mb=384, profile=STOCK, version=kafka_version(), secured=True
    ) as broker:
        for user, password in users.items():
            broker.add_user(user, password)
        yield broker


def kafka_config_args(kafka: LocalKafka, user: str, password: str) -> list[str]:
    """`--kafka-config` arguments of the gateway that log in as `user`."""
    assert kafka.security is not None
    args = []
    for key, value in kafka.security.librdkafka(user, password).items():
        args += ["--kafka-config", f"{key}={value}"]
    return args


def acls_of(kafka: LocalKafka, principal: str) -> set[Acl]:
    """Every ACL of the principal on the cluster."""
    admin = AdminClient(kafka.admin_config())
    found = admin.describe_acls(
        AclBindingFilter(
            KafkaResource.ANY, None, PatternType.ANY, principal, None, AclOperation.ANY, AclPermissionType.ANY
        )
    ).result(30)
    return {(b.restype.name, b.name, b.resource_pattern_type.name, b.operation.name) for b in found}


def expected(grants: list[acls.Grant]) -> set[Acl]:
    """The ACLs the grants make."""
    kinds = {
        acls.TOPIC: "TOPIC",
        acls.GROUP: "GROUP",
        acls.TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
        acls.CLUSTER: "BROKER",
    }
    return {
        (
            kinds[g.resource],
            "kafka-cluster" if g.resource == acls.CLUSTER else g.name,
            "PREFIXED" if g.prefixed else "LITERAL",
            op,
        )
        for g in grants
        for op in g.operations
    }


def await_acls(kafka: LocalKafka, principal: str, want: set[Acl]) -> None:
    """The authorizer answers from the metadata an ACL change went into: wait until it shows."""
    deadline = time.monotonic() + 30
    while acls_of(kafka, principal) != want:
        assert time.monotonic() < deadline, "the ACL change did not show in 30 s"
        time.sleep(0.1)


def grant(kafka: LocalKafka, principal: str, grants: list[acls.Grant]) -> None:
    """Give the principal these ACLs on top of what it has, and wait until they count."""
    want = acls_of(kafka, principal) | expected(grants)
    acls.apply(kafka.admin_config(), principal, grants)
    await_acls(kafka, principal, want)


def revoke(kafka: LocalKafka, principal: str, grants: list[acls.Grant]) -> None:
    """Take these ACLs away from the principal, and wait until that counts."""
    want = acls_of(kafka, principal) - expected(grants)
    acls.revoke(kafka.admin_config(), principal, grants)
    await_acls(kafka, principal, want)
