"""A secured cluster: SASL_SSL with SCRAM-SHA-512, a CA made by the test, Kafka's StandardAuthorizer
allowing nobody anything without an ACL. The gateway runs with exactly the ACL set of
docs/kafka.md ("Secured clusters"), and with any one ACL of it taken away the API call that needs
it fails at once with PERMISSION_DENIED naming the operation and the resource.

One broker for the module; one gateway process for the cases that run on a started gateway.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1

from gateway.kafka import acls
from gateway.kafka.local import LocalKafka
from gateway.translate import names as gw_names
from tests.e2e.clients import clients, pull_until
from tests.gateways import GatewayProcess, serve_command
from tests.secured import acls_of, expected, grant, kafka_config_args, revoke, secured_kafka

pytestmark = pytest.mark.integration

PROJECT = "sec-project"
USER, PASSWORD = "gateway", "gateway-" + uuid.uuid4().hex[:12]
PRINCIPAL = f"User:{USER}"
PREFIX = "__secured_gw"
FAST = 30.0  # a refusal must be answered within this (seconds): not a hang, not retries
T = TypeVar("T")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    with secured_kafka(tmp_path_factory.mktemp("secured-kafka"), {USER: PASSWORD}) as broker:
        yield broker


def _grants(prefix: str = PREFIX) -> list[acls.Grant]:
    return acls.gateway_grants(prefix, [PROJECT])


@pytest.fixture(scope="module")
def granted(kafka: LocalKafka) -> Iterator[list[acls.Grant]]:
    """Exactly the gateway's ACL set, and nothing else, for the gateway's principal."""
    grants = _grants()
    grant(kafka, PRINCIPAL, grants)
    yield grants
    revoke(kafka, PRINCIPAL, grants)


@pytest.fixture(scope="module")
def gateway(kafka: LocalKafka, granted: list[acls.Grant], log_dir: Path) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(kafka.bootstrap, PREFIX, log_dir, *kafka_config_args(kafka, USER, PASSWORD))
    yield gw.start()
    gw.terminate()


@contextlib.contextmanager
def without(kafka: LocalKafka, resource: str, name: str, *operations: str) -> Iterator[None]:
    """Take some ACLs of the gateway's set away for a while, then give them back."""
    taken = [acls.Grant(resource, name, True, tuple(operations), "taken away by the test")]
    revoke(kafka, PRINCIPAL, taken)
    try:
        yield
    finally:
        grant(kafka, PRINCIPAL, taken)


def _name(kind: str) -> str:
    return f"projects/{PROJECT}/{kind}/{kind[:3]}-{uuid.uuid4().hex[:10]}"


def again(call: Callable[[], T], within: float = 10.0) -> T:
    """A call that works once more now that the ACL is back: clients cache what Kafka told them
    (librdkafka, a topic's refusal until it next asks), so allow a moment."""
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except exceptions.PermissionDenied:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def refused(call: Callable[[], object], *words: str) -> str:
    """Run a call that must fail with PERMISSION_DENIED within FAST seconds, naming `words`."""
    started = time.monotonic()
    with pytest.raises(exceptions.PermissionDenied) as caught:
        call()
    took = time.monotonic() - started
    message = str(caught.value.message)
    print(f"REFUSED in {took:.2f} s: {message}")  # shown with -s
    assert took < FAST, f"refused only after {took:.1f} s"
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    return message


# ----------------------------------------------------------------------------- the full set


def test_the_gateway_serves_everything_with_exactly_the_minimal_acl_set(
    kafka: LocalKafka,
    granted: list[acls.Grant],
    gateway: GatewayProcess,
) -> None:
    assert acls_of(kafka, PRINCIPAL) == expected(granted)  # nothing more, nothing on the cluster
    assert not any(g.resource == acls.CLUSTER for g in granted)
    pub, sub = clients(gateway)
    topic, dead = _name("topics"), _name("topics")
    plain, eod, lettered, dead_sub = (_name("subscriptions") for _ in range(4))
    pub.create_topic(name=topic)
    pub.create_topic(name=dead)
    pub.update_topic(
        request={
            "topic": {"name": topic, "message_retention_duration": {"seconds": 3600}},
            "update_mask": {"paths": ["message_retention_duration"]},
        }
    )
    sub.create_subscription(name=plain, topic=topic)
    sub.create_subscription(request={"name": eod, "topic": topic, "enable_exactly_once_delivery": True})
    sub.create_subscription(
        request={
            "name": lettered,
            "topic": topic,
            "ack_deadline_seconds": 10,
            "dead_letter_policy": {"dead_letter_topic": dead, "max_delivery_attempts": 5},
        }
    )
    sub.create_subscription(name=dead_sub, topic=dead)
    for i in range(3):
        pub.publish(topic, f"m{i}".encode(), n=str(i)).result(timeout=30)

    for subscription in (plain, eod):
        got = pull_until(sub, subscription, 3)
        assert sorted(m.message.data for m in got) == [b"m0", b"m1", b"m2"]
        sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])
    # Snapshots and seeks read the lease/ack log and the topic's offsets.
    snapshot = f"projects/{PROJECT}/snapshots/snap-{uuid.uuid4().hex[:8]}"
    sub.create_snapshot(name=snapshot, subscription=plain)
    sub.seek(request={"subscription": plain, "time": {"seconds": int(time.time()) - 3600}})
    assert len(pull_until(sub, plain, 3)) == 3
    sub.seek(request={"subscription": plain, "snapshot": snapshot})
    assert sub.pull(subscription=plain, max_messages=10, timeout=30).received_messages == []
    # Dead-lettering is a transaction (message and ack): nack all three five times.
    for attempt in range(5):
        got = pull_until(sub, lettered, 3)
        assert len(got) == 3, f"{len(got)} of 3 redelivered after {attempt} nacks"
        sub.modify_ack_deadline(
            subscription=lettered, ack_ids=[m.ack_id for m in got], ack_deadline_seconds=0
        )
    letters = pull_until(sub, dead_sub, 3)
    assert sorted(m.message.data for m in letters) == [b"m0", b"m1", b"m2"]
    sub.acknowledge(subscription=dead_sub, ack_ids=[m.ack_id for m in letters])
    assert sub.pull(subscription=lettered, max_messages=10, timeout=30).received_messages == []

    sub.delete_subscription(subscription=plain)
    pub.delete_topic(topic=dead)
    log = "\n".join(p.read_text() for p in gateway.log_paths)
    for word in ("authoriz", "PermissionDenied", "refus", "not allow"):
        assert word not in log, f"{word!r} in the gateway's log"


# ----------------------------------------------------------------------------- one ACL missing


def test_creating_a_topic_without_create_on_the_project_prefix(
    kafka: LocalKafka,
    gateway: GatewayProcess,
) -> None:
    pub, _ = clients(gateway)
    topic = _name("topics")
    kafka_topic = gw_names.kafka_topic_for(topic)
    with without(kafka, acls.TOPIC, f"{PROJECT}.", "CREATE"):
        refused(lambda: pub.create_topic(name=topic), f"CREATE on topic {kafka_topic}")
    again(lambda: pub.create_topic(name=topic))  # and with it back


def test_creating_a_topic_without_describe_on_the_project_prefix(
    kafka: LocalKafka,
    gateway: GatewayProcess,
) -> None:
    pub, _ = clients(gateway)
    topic = _name("topics")
    kafka_topic = gw_names.kafka_topic_for(topic)
    # Describe is implied by Read, Write and Delete: all three go.
    with without(kafka, acls.TOPIC, f"{PROJECT}.", "READ", "WRITE", "DELETE"):
        refused(lambda: pub.create_topic(name=topic), f"DESCRIBE on topic {kafka_topic}")
    again(lambda: pub.create_topic(name=topic))


def test_publishing_without_write_on_the_topic(kafka: LocalKafka, gateway: GatewayProcess) -> None:
    pub, _ = clients(gateway)
    topic = _name("topics")
    pub.create_topic(name=topic)
    kafka_topic = gw_names.kafka_topic_for(topic)
    with without(kafka, acls.TOPIC, f"{PROJECT}.", "WRITE"):
        refused(lambda: pub.publish(topic, b"x").result(timeout=FAST), f"WRITE on topic {kafka_topic}")
    again(lambda: pub.publish(topic, b"x").result(timeout=30))


def _subscribed(
    gateway: GatewayProcess, **extra: object
) -> tuple[
    pubsub_v1.PublisherClient,
    pubsub_v1.SubscriberClient,
    str,
    str,
]:
    pub, sub = clients(gateway)
    topic, subscription = _name("topics"), _name("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(request={"name": subscription, "topic": topic, **extra})
    pub.publish(topic, b"hello").result(timeout=30)
    return pub, sub, topic, subscription


def test_pulling_without_read_on_the_topic(kafka: LocalKafka, gateway: GatewayProcess) -> None:
    _, sub, topic, subscription = _subscribed(gateway)
    kafka_topic = gw_names.kafka_topic_for(topic)
    with without(kafka, acls.TOPIC, f"{PROJECT}.", "READ"):
        refused(
            lambda: sub.pull(subscription=subscription, max_messages=1, timeout=FAST),
            f"READ on topic {kafka_topic}",
        )
    assert [m.message.data for m in again(lambda: pull_until(sub, subscription, 1))] == [b"hello"]


def test_pulling_without_read_on_the_group(kafka: LocalKafka, gateway: GatewayProcess) -> None:
    _, sub, topic, subscription = _subscribed(gateway)
    group = f"{PREFIX}.{subscription}."
    with without(kafka, acls.GROUP, f"{PREFIX}.", "READ"):
        refused(
            lambda: sub.pull(subscription=subscription, max_messages=1, timeout=FAST),
            f"READ on group {group}",
        )
        # The streaming subscriber ends with it too, instead of reconnecting for ever.
        future = sub.subscribe(subscription, lambda m: m.ack())
        refused(lambda: future.result(timeout=FAST), f"READ on group {group}")
        # A new subscription cannot be made: its group's offsets are set at creation.
        refused(lambda: sub.create_subscription(name=_name("subscriptions"), topic=topic), "READ on group")
    assert [m.message.data for m in again(lambda: pull_until(sub, subscription, 1))] == [b"hello"]


def test_dead_lettering_without_write_on_the_transactional_ids(
    kafka: LocalKafka,
    gateway: GatewayProcess,
) -> None:
    pub, sub = clients(gateway)
    dead, dead_sub = _name("topics"), _name("subscriptions")
    pub.create_topic(name=dead)
    sub.create_subscription(name=dead_sub, topic=dead)
    _, sub, _, subscription = _subscribed(
        gateway, dead_letter_policy={"dead_letter_topic": dead, "max_delivery_attempts": 5}
    )
    with without(kafka, acls.TRANSACTIONAL_ID, f"{PREFIX}.", "WRITE"):
        for _ in range(5):  # the fifth nack makes it a dead letter
            got = pull_until(sub, subscription, 1)
            assert got
            sub.modify_ack_deadline(
                subscription=subscription, ack_ids=[got[0].ack_id], ack_deadline_seconds=0
            )
        refused(
            lambda: sub.pull(subscription=subscription, max_messages=1, timeout=FAST),
            f"WRITE on transactional-id {PREFIX}.{PREFIX}_gacks.",
        )
    # With the ACL back, the next try (within 5 s) dead-letters it and pulls work again.
    assert [m.message.data for m in pull_until(sub, dead_sub, 1)] == [b"hello"]
    assert (
        again(lambda: sub.pull(subscription=subscription, max_messages=1, timeout=30)).received_messages == []
    )


def test_acknowledging_without_write_on_the_internal_topics(
    kafka: LocalKafka,
    gateway: GatewayProcess,
) -> None:
    _, sub, topic, subscription = _subscribed(gateway)
    got = pull_until(sub, subscription, 1)
    log_topic = f"{PREFIX}_gacks."
    with without(kafka, acls.TOPIC, f"{PREFIX}_g", "WRITE"):
        refused(
            lambda: sub.acknowledge(subscription=subscription, ack_ids=[got[0].ack_id]),
            f"WRITE on topic {log_topic}",
        )
        refused(lambda: sub.create_subscription(name=_name("subscriptions"), topic=topic), "WRITE on topic")
    again(lambda: sub.acknowledge(subscription=subscription, ack_ids=[got[0].ack_id]))


def test_pulling_without_read_on_the_internal_topics(kafka: LocalKafka, gateway: GatewayProcess) -> None:
    _, sub, _, subscription = _subscribed(gateway)
    with without(kafka, acls.TOPIC, f"{PREFIX}_g", "READ"):  # the lease/ack log cannot be read
        refused(
            lambda: sub.pull(subscription=subscription, max_messages=1, timeout=FAST),
            f"READ on topic {PREFIX}_gacks.",
        )
    assert [m.message.data for m in again(lambda: pull_until(sub, subscription, 1))] == [b"hello"]


# ----------------------------------------------------------------------------- start-up


def _serve(
    kafka: LocalKafka,
    prefix: str,
    log_dir: Path,
    password: str = PASSWORD,
) -> tuple[int, str, str]:
    """Run `pubsub-gateway serve` expecting it not to start: (exit status, stdout, its log)."""
    cmd = serve_command(
        "--kafka-bootstrap",
        kafka.bootstrap,
        "--internal-prefix",
        prefix,
        *kafka_config_args(kafka, USER, password),
    )
    log_path = log_dir / f"refused-{prefix}.log"
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, log_path.read_text()


@pytest.mark.parametrize(
    ("resource", "operation", "expected"),
    [
        (acls.TOPIC, "READ", "READ on topic {prefix}_gresources"),
        (acls.TOPIC, "CREATE", "CREATE on topic {prefix}_gresources"),
        (acls.GROUP, "READ", "READ on group {prefix}.janitor"),
    ],
)
def test_the_gateway_refuses_to_start_without_its_own_acls(
    kafka: LocalKafka,
    log_dir: Path,
    resource: str,
    operation: str,
    expected: str,
) -> None:
    """A gateway of its own prefix, given the ACL set of that prefix less one operation (no
    project: start-up needs none)."""
    prefix = f"__gw{uuid.uuid4().hex[:6]}"
    grants = [
        g
        if g.resource != resource
        else acls.Grant(
            g.resource, g.name, g.prefixed, tuple(op for op in g.operations if op != operation), g.purpose
        )
        for g in acls.gateway_grants(prefix)
    ]
    grant(kafka, PRINCIPAL, grants)
    try:
        started = time.monotonic()
        status, out, log = _serve(kafka, prefix, log_dir)
        took = time.monotonic() - started
    finally:
        revoke(kafka, PRINCIPAL, grants)
    assert status == 1, log[-3000:]
    assert "READY" not in out
    assert took < FAST  # a Python start-up and a few Kafka round trips
    assert expected.format(prefix=prefix) in _reason(log)
    assert "Traceback" not in log


def _reason(log: str) -> str:
    """The one line saying why the gateway did not start."""
    lines = [ln for ln in log.splitlines() if ln.startswith("pubsub-gateway: cannot start: ")]
    assert len(lines) == 1, log[-3000:]
    return lines[0]


def test_the_gateway_refuses_to_start_with_a_wrong_password(kafka: LocalKafka, log_dir: Path) -> None:
    started = time.monotonic()
    status, _, log = _serve(kafka, f"__gw{uuid.uuid4().hex[:6]}", log_dir, password="wrong")
    assert status == 1, log[-3000:]
    assert time.monotonic() - started < FAST
    assert "refused the gateway's login" in _reason(log)
    assert "Traceback" not in log
