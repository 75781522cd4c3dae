"""A dead-letter topic adopted with the label `kafka-topic` may take smaller batches than a
transaction of a round's dead messages makes, or refuse a message even alone. The first gets one
message a transaction; the second stays in the subscription, undelivered and not lost, and goes
once the topic takes it. Before, the whole round was refused every 0.2 s, for ever."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import grpc
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import AlterConfigOpType as AlterConfigOpType  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigEntry as ConfigEntry  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigResource as ConfigResource  # type: ignore[attr-defined]
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]
from google.pubsub_v1.services.publisher import PublisherClient as PublisherGapic
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

from gateway.core import dead_letters
from tests.e2e.clients import dead_lettering, pull_nothing, pull_until
from tests.inprocess.conftest import InProcessGateway
from tests.kafka_reads import committed_records

LIMIT = 60_000


def test_a_dead_message_too_large_for_its_dead_letter_topic_waits_for_it(
    gw: InProcessGateway, names: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dead_letters, "TOO_LARGE_RETRY_SECONDS", 2.0)
    bootstrap = gw.settings.kafka_bootstrap
    kafka = f"adopted-dead-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(kafka, 1, 1, config={"max.message.bytes": str(LIMIT)})])[kafka].result(30)
    pub, sub = gw.clients()
    topic, dead, subscription = names("topics"), names("topics", "-dead"), names("subscriptions")
    pub.create_topic(name=topic)  # made by the gateway: it takes messages of 10 MB
    pub.create_topic(request={"name": dead, "labels": {"kafka-topic": kafka}})
    dead_lettering(sub, subscription, topic, dead)
    big = b"big" + bytes(LIMIT)
    gapic = PublisherGapic(transport=PublisherGrpcTransport(channel=grpc.insecure_channel(gw.address)))
    gapic.publish(  # one call: these die together, and go to the dead-letter topic together
        topic=topic,
        messages=[{"data": big}] + [{"data": f"{i:05d}".encode() + bytes(2000)} for i in range(30)],
    )
    for attempt in range(1, 6):
        got = pull_until(sub, subscription, 31, timeout=60)
        assert len(got) == 31 and {m.delivery_attempt for m in got} == {attempt}
        sub.modify_ack_deadline(
            subscription=subscription, ack_ids=[m.ack_id for m in got], ack_deadline_seconds=0
        )
    letters = committed_records(bootstrap, kafka, 30, linger=1.0)
    assert sorted(int((m.value() or b"")[:5]) for m in letters) == list(range(30))
    # The big one is held back: neither delivered again nor forwarded, while tried again.
    assert pull_nothing(sub, subscription, 5.0) == []
    assert len(committed_records(bootstrap, kafka, 31, timeout=1.0, linger=0.0)) == 30

    entries = [ConfigEntry("max.message.bytes", "1048588", incremental_operation=AlterConfigOpType.SET)]
    resource = ConfigResource("topic", kafka, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)
    letters = committed_records(bootstrap, kafka, 31, linger=1.0)
    assert len(letters) == 31 and letters[-1].value() == big
    assert pull_nothing(sub, subscription, 2.0) == []
