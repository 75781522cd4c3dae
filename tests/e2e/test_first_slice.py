"""The first end-to-end slice, with the official Python client on a real broker:
CreateTopic, Publish, CreateSubscription, Pull, Acknowledge; a plain Kafka consumer reads the
same records."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import confluent_kafka
import pytest
from google.pubsub_v1 import types

from gateway.translate.names import kafka_topic_for
from gateway.translate.names import topic as topic_name
from tests.e2e.clients import clients, gapic_publisher, pull_nothing, pull_until
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration


def test_publish_pull_ack_and_kafka_reads_the_same_records(
    shared_gateway: GatewayProcess, names: Callable[[str], str], kafka_bootstrap: str
) -> None:
    pub, sub = clients(shared_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    created = pub.create_topic(name=topic)
    assert created.name == topic
    sub.create_subscription(name=subscription, topic=topic)

    # One request of 50 messages: ids come back in request order, one per message.
    batch = [types.PubsubMessage(data=f"m{i}".encode(), attributes={"i": str(i)}) for i in range(50)]
    ids = list(gapic_publisher(shared_gateway).publish(topic=topic, messages=batch).message_ids)
    assert len(ids) == 50 and len(set(ids)) == 50
    # And through the batching high-level publisher.
    futures = [pub.publish(topic, f"h{i}".encode(), origin="hl") for i in range(10)]
    ids += [f.result(timeout=30) for f in futures]

    got = pull_until(sub, subscription, 60)
    by_id = {m.message.message_id: m for m in got}
    assert set(by_id) == set(ids), "every published message is pulled once"
    for i, mid in enumerate(ids[:50]):
        msg = by_id[mid].message
        assert msg.data == f"m{i}".encode()
        assert dict(msg.attributes) == {"i": str(i)}
        assert msg.publish_time.timestamp() > 0
    assert by_id[ids[50]].message.attributes["origin"] == "hl"
    assert all(m.delivery_attempt == 0 for m in got), "no dead-letter policy: attempt is 0"

    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])
    assert pull_nothing(sub, subscription, 3.0) == []

    # A plain Kafka consumer reads the records: data as value, attributes as headers.
    kafka_topic = kafka_topic_for(topic_name(topic))
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"plain-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([kafka_topic])
    records: list[confluent_kafka.Message] = []
    try:
        for _ in range(100):
            records += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
            if len(records) >= 60:
                break
    finally:
        consumer.close()
    assert sorted(r.value() for r in records) == sorted(
        [f"m{i}".encode() for i in range(50)] + [f"h{i}".encode() for i in range(10)]
    )
    m7 = next(r for r in records if r.value() == b"m7")
    assert m7.headers() == [("i", b"7")]
    assert m7.key() is None
