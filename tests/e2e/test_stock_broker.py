"""On a broker with Kafka's stock settings (the suite's own): no lookup creates a topic, the
gateway's topics are made and kept as it needs them, and names are reusable at once."""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import AlterConfigOpType as AlterConfigOpType  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigEntry as ConfigEntry  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigResource as ConfigResource  # type: ignore[attr-defined]
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]
from google.api_core import exceptions

from gateway.errors import Unavailable
from gateway.kafka.admin import Admin
from gateway.translate import names as gw_names
from tests.conftest import GatewayFactory
from tests.e2e.clients import clients, pull_until
from tests.gateways import GatewayProcess, serve_command

pytestmark = pytest.mark.integration


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False})


def _partitions(admin: AdminClient, topic: str) -> int | None:
    try:
        desc = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    except Exception:  # unknown topic
        return None
    return len(desc.partitions)


def _config(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource("topic", topic)
    return {k: e.value for k, e in admin.describe_configs([resource])[resource].result(30).items()}


def _set_config(admin: AdminClient, topic: str, **config: str) -> None:
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in config.items()
    ]
    resource = ConfigResource("topic", topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)


def _log_lines(gw: GatewayProcess, level: str) -> list[str]:
    return [ln for p in gw.log_paths for ln in p.read_text().splitlines() if f" {level} " in ln]


def test_topics_have_the_partitions_and_configs_asked_for(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway()
    admin = _admin(gw.bootstrap)
    pub, sub = clients(gw)
    topic = names("topics")
    pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "3"}})
    assert _partitions(admin, gw_names.kafka_topic_for(topic)) == 3
    for own in ("resources", "pushkeys"):
        kafka = gw_names.internal_topic(gw.prefix, own)
        assert _partitions(admin, kafka) == 1
        assert _config(admin, kafka)["cleanup.policy"] == "compact", own

    # Looking up what does not exist creates nothing on a broker that would auto-create.
    missing = names("topics", "-missing")
    with pytest.raises(exceptions.NotFound):
        pub.get_topic(topic=missing)
    with pytest.raises(exceptions.NotFound):
        pub.publish(missing, b"x").result(timeout=30)
    with pytest.raises(exceptions.NotFound):
        sub.create_subscription(name=names("subscriptions"), topic=missing)
    adopt = f"not-there-{uuid.uuid4().hex[:8]}"
    with pytest.raises(exceptions.NotFound):
        pub.create_topic(request={"name": names("topics", "-adopt"), "labels": {"kafka-topic": adopt}})
    assert _partitions(admin, gw_names.kafka_topic_for(missing)) is None
    assert _partitions(admin, adopt) is None


def test_a_foreign_kafka_topic_of_the_derived_name_is_not_taken_silently(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    admin = _admin(shared_gateway.bootstrap)
    pub, _ = clients(shared_gateway)
    topic = names("topics")
    kafka = gw_names.kafka_topic_for(topic)
    admin.create_topics([NewTopic(kafka, 1, 1)])[kafka].result(30)
    with pytest.raises(exceptions.AlreadyExists, match="kafka-topic"):
        pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "2"}})
    pub.create_topic(request={"name": topic, "labels": {"kafka-topic": kafka}})  # adopting works
    assert _partitions(admin, kafka) == 1


def test_internal_topics_are_mended_at_start_or_refused_with_the_command(
    kafka_bootstrap: str, log_dir: Path, start_gateway: GatewayFactory
) -> None:
    admin = _admin(kafka_bootstrap)
    prefix = f"m{uuid.uuid4().hex[:8]}"
    resources = gw_names.internal_topic(prefix, "resources")
    pushkeys = gw_names.internal_topic(prefix, "pushkeys")
    # As a broker that auto-created them would have: the delete policy.
    for topic in (resources, pushkeys):
        admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "delete"})])[topic].result(30)
    gw = start_gateway(prefix=prefix)
    for topic in (resources, pushkeys):
        assert _config(admin, topic)["cleanup.policy"] == "compact"
    warnings = _log_lines(gw, "WARNING")
    assert any(resources in ln and "cleanup.policy=delete" in ln for ln in warnings), warnings

    # A resources topic with the wrong partition count cannot be mended: the gateway refuses.
    bad = f"b{uuid.uuid4().hex[:8]}"
    wrong = gw_names.internal_topic(bad, "resources")
    admin.create_topics([NewTopic(wrong, 3, 1)])[wrong].result(30)
    proc = subprocess.run(
        serve_command(
            "--kafka-bootstrap",
            kafka_bootstrap,
            "--internal-prefix",
            bad,
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "READY" not in proc.stdout
    assert re.search(rf"{re.escape(wrong)} has 3 partitions where the gateway needs 1", proc.stderr), (
        proc.stderr[-3000:]
    )
    assert "kafka-topics.sh --delete" in proc.stderr


def test_a_lease_log_whose_config_was_changed_is_mended_when_first_used(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway()
    admin = _admin(gw.bootstrap)
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    # This gateway's prefix is its own and it has one subscription: one lease log.
    log_topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(f"{gw.prefix}_gacks.")]
    assert len(log_topics) == 1, log_topics
    _set_config(admin, log_topics[0], cleanup_policy="delete")
    pub.publish(topic, b"m").result(timeout=30)
    assert len(pull_until(sub, subscription, 1)) == 1
    assert _config(admin, log_topics[0])["cleanup.policy"] == "compact"


def test_names_are_reusable_at_once_and_deletes_are_clean(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway()
    admin = _admin(gw.bootstrap)
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    for round_ in range(3):
        started = time.monotonic()
        pub.create_topic(name=topic)
        sub.create_subscription(name=subscription, topic=topic)
        pub.publish(topic, f"round {round_}".encode()).result(timeout=30)
        admin_seconds = time.monotonic() - started
        assert admin_seconds < 5, f"create + publish took {admin_seconds:.1f} s in round {round_}"
        got = pull_until(sub, subscription, 1, timeout=20)
        assert [m.message.data for m in got] == [f"round {round_}".encode()]
        sub.delete_subscription(subscription=subscription)
        pub.delete_topic(topic=topic)

    # The subscriptions' consumer groups go once their members have left.
    prefix = f"{gw.prefix}.{subscription}."
    deadline = time.monotonic() + 30
    while True:
        left = [
            g.group_id for g in admin.list_consumer_groups().result(30).valid if g.group_id.startswith(prefix)
        ]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert left == []
    errors = _log_lines(gw, "ERROR")
    assert errors == [], errors[:5]
    assert not any("not deleted" in ln for ln in _log_lines(gw, "INFO")), "no retry loop on delete"


def test_a_subscription_of_a_deleted_topic_is_never_fed_by_its_successor(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub = clients(shared_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    pub.publish(topic, b"before").result(timeout=30)
    assert len(pull_until(sub, subscription, 1)) == 1
    pub.delete_topic(topic=topic)
    pub.create_topic(name=topic)
    pub.publish(topic, b"after").result(timeout=30)
    assert sub.get_subscription(subscription=subscription).topic == "_deleted-topic_"
    with pytest.raises(exceptions.FailedPrecondition, match="topic of this subscription was deleted"):
        sub.pull(subscription=subscription, max_messages=10, timeout=10)


async def test_the_readiness_probe_never_creates_the_topic_it_asks_for(kafka_bootstrap: str) -> None:
    """The probe is a Metadata request naming the resources topic (Admin.answers); on a broker
    that creates topics on lookup, a probe of a topic that is gone must fail, not make it."""
    missing = f"readiness-probe-{uuid.uuid4().hex[:8]}"
    async with Admin({"bootstrap.servers": kafka_bootstrap}) as admin:
        with pytest.raises(Unavailable, match=missing):
            await admin.answers(missing, 10.0)
        assert await admin.partitions(missing) is None
        await admin.create_topic(missing, 2)
        # The broker's copy of the metadata learns of the new topic a moment after the create
        # is confirmed; the probe asks about a topic made long before (the resources topic).
        assert await admin.partitions(missing, wait=10.0) == 2
        await admin.answers(missing, 10.0)
    assert _partitions(_admin(kafka_bootstrap), missing) == 2
