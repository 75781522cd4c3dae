"""A Kafka topic adopted with the label `kafka-topic` keeps its own max.message.bytes, which may
be below the 1 MiB the producer puts in one batch. Its batches are cut to fit: a Publish whose
messages each fit is written whole, however many it carries and however many calls share the
producer. A message no batch of the topic could hold is refused before anything is written.
Before, the broker refused whole batches of fitting messages (INVALID_ARGUMENT, "Message too
large for the Kafka topic"), and a call could fail after part of it was written."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import Future

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]
from google.api_core import exceptions
from google.cloud import pubsub_v1

from tests.e2e.clients import clients, dead_lettering, gapic_publisher, pull_nothing, pull_until
from tests.gateways import GatewayProcess, emulator_env
from tests.kafka_reads import committed_records

pytestmark = pytest.mark.integration

LIMIT = 60_000  # the adopted topic's max.message.bytes: batches of 1 MiB are far over it


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex[:8]}"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)
        ]
    finally:
        consumer.close()


def test_an_adopted_topics_own_batch_limit_is_kept(
    shared_gateway: GatewayProcess, names: Callable[..., str]
) -> None:
    gw = shared_gateway
    kafka = f"adopted-small-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(kafka, 2, 1, config={"max.message.bytes": str(LIMIT)})])[kafka].result(30)
    pub, sub = clients(gw)
    topic = names("topics")
    pub.create_topic(request={"name": topic, "labels": {"kafka-topic": kafka}})
    subscription = names("subscriptions")
    sub.create_subscription(name=subscription, topic=topic)

    # The client's own batches of up to 100 messages, 2 KB each: ~200 KB a call, many calls at
    # once sharing the gateway's producer.
    batching = pubsub_v1.types.BatchSettings(max_messages=100, max_bytes=1_000_000, max_latency=0.05)
    with emulator_env(gw.address):
        batched = pubsub_v1.PublisherClient(batch_settings=batching)
    futures: list[Future[str]] = [
        batched.publish(topic, f"{i:05d}".encode() + bytes(2000), n=str(i)) for i in range(1000)
    ]
    ids = [f.result(timeout=60) for f in futures]
    assert len(set(ids)) == 1000
    assert sum(_end_offsets(gw.bootstrap, kafka, 2)) == 1000

    got = pull_until(sub, subscription, 1000, timeout=60)
    assert sorted(int(m.message.data[:5]) for m in got) == list(range(1000))
    assert all(m.message.attributes["n"] == str(int(m.message.data[:5])) for m in got)

    # A message that no batch of the topic could hold, alone or beside fitting ones: refused,
    # and none of the call is written.
    with pytest.raises(exceptions.InvalidArgument, match=r"takes at most 60000 \(its max\.message\.bytes\)"):
        pub.publish(topic, bytes(LIMIT)).result(timeout=30)
    with pytest.raises(exceptions.InvalidArgument, match=r"Message 2 takes \d+ bytes"):
        gapic_publisher(gw).publish(
            topic=topic,
            messages=[{"data": b"fits"}, {"data": b"fits too"}, {"data": bytes(LIMIT - 71)}],
        )
    assert sum(_end_offsets(gw.bootstrap, kafka, 2)) == 1000
    # A message of n bytes of data alone is a batch of n + 72 bytes (the batch header, 61; the
    # record's length, 3; attributes, deltas and the null key, 4; the value's length, 3; no
    # headers, 1): the one of exactly the limit is written, the one of a byte more was refused.
    pub.publish(topic, bytes(LIMIT - 72)).result(timeout=30)
    assert sum(_end_offsets(gw.bootstrap, kafka, 2)) == 1001


def test_dead_letters_to_an_adopted_topic_fit_its_batch_limit(
    shared_gateway: GatewayProcess, names: Callable[..., str]
) -> None:
    """All of a round's dead messages go to the dead-letter topic in one transaction, whose
    batch to it is larger than the adopted topic takes: the broker refused it, every round."""
    gw = shared_gateway
    kafka = f"adopted-dead-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(kafka, 1, 1, config={"max.message.bytes": str(LIMIT)})])[kafka].result(30)
    pub, sub = clients(gw)
    topic, dead, subscription = names("topics"), names("topics", "-dead"), names("subscriptions")
    pub.create_topic(name=topic)
    pub.create_topic(request={"name": dead, "labels": {"kafka-topic": kafka}})
    dead_lettering(sub, subscription, topic, dead)
    gapic_publisher(gw).publish(
        topic=topic, messages=[{"data": f"{i:05d}".encode() + bytes(2000)} for i in range(100)]
    )
    for attempt in range(1, 6):
        got = pull_until(sub, subscription, 100, timeout=60)
        assert len(got) == 100 and {m.delivery_attempt for m in got} == {attempt}
        sub.modify_ack_deadline(
            subscription=subscription, ack_ids=[m.ack_id for m in got], ack_deadline_seconds=0
        )
    # Read committed: an aborted transaction's records take offsets too.
    letters = committed_records(gw.bootstrap, kafka, 100)
    assert sorted(int((m.value() or b"")[:5]) for m in letters) == list(range(100))
    assert pull_nothing(sub, subscription, 3.0) == []


def test_a_compacted_adopted_topic_refuses_messages_without_an_ordering_key_at_once(
    shared_gateway: GatewayProcess, names: Callable[..., str]
) -> None:
    """A compacted Kafka topic takes only records with a key. The broker's refusal of a keyless
    record was answered UNAVAILABLE, which the clients retry until their deadline (a minute for
    Python's); now such a Publish is refused at once, before anything is written."""
    gw = shared_gateway
    kafka = f"adopted-compacted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(kafka, 1, 1, config={"cleanup.policy": "compact"})])[kafka].result(30)
    pub, _ = clients(gw)
    topic = names("topics")
    pub.create_topic(request={"name": topic, "labels": {"kafka-topic": kafka}})
    gapic = gapic_publisher(gw)
    with pytest.raises(exceptions.FailedPrecondition, match=r"Message 1 has no ordering key.*compacted"):
        gapic.publish(topic=topic, messages=[{"data": b"a", "ordering_key": "k"}, {"data": b"b"}], timeout=10)
    assert _end_offsets(gw.bootstrap, kafka, 1) == [0]
    gapic.publish(topic=topic, messages=[{"data": b"a", "ordering_key": "k"}], timeout=10)
    assert _end_offsets(gw.bootstrap, kafka, 1) == [1]
