"""A Pub/Sub topic whose Kafka topic was deleted, or made again with fewer partitions, outside
the gateway. Publish said UNAVAILABLE ("Kafka did not confirm the write: Local: Unknown topic"),
which the official publishers retry for minutes though no retry can succeed. Now it says what
is wrong: NOT_FOUND for a Kafka topic that is gone, FAILED_PRECONDITION for one with fewer
partitions than the topic was made with, each naming the Kafka topic; and the topic can be
deleted and created anew."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]
from google.api_core import exceptions

from gateway.translate.names import TopicName, kafka_topic_for
from tests.e2e.clients import clients, gapic_publisher, pull_until
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration

# The first write after the deletion may be held for the producer's whole write timeout (30 s)
# before it fails (timed out, or unknown partition); later writes fail at once.
FIRST_CALL_SECONDS = 90


def _delete(admin: AdminClient, kafka: str) -> None:
    admin.delete_topics([kafka])[kafka].result(30)
    end = time.monotonic() + 30
    while kafka in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < end, f"{kafka} still listed"
        time.sleep(0.2)


def test_publish_to_a_topic_whose_kafka_topic_was_deleted_is_not_found(
    shared_gateway: GatewayProcess, names: Callable[..., str]
) -> None:
    gw = shared_gateway
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    pub, sub = clients(gw)
    topic = names("topics")
    pub.create_topic(name=topic)
    kafka = kafka_topic_for(TopicName(topic))
    publisher = gapic_publisher(gw)
    publisher.publish(topic=topic, messages=[{"data": b"before"}], timeout=30)

    _delete(admin, kafka)
    for _ in range(2):  # the first call waits out librdkafka's propagation time, the next not
        t0 = time.monotonic()
        with pytest.raises(
            exceptions.NotFound,
            match=rf"Kafka topic {kafka}, which holds the messages of {topic}, does not exist",
        ):
            publisher.publish(
                topic=topic, messages=[{"data": b"lost?"}], retry=None, timeout=FIRST_CALL_SECONDS
            )
    assert time.monotonic() - t0 < 10
    assert kafka not in admin.list_topics(timeout=10).topics  # looking made nothing

    # The way out the message names: the topic deleted and created anew works again.
    pub.delete_topic(topic=topic)
    pub.create_topic(name=topic)
    subscription = names("subscriptions")
    sub.create_subscription(name=subscription, topic=topic)
    publisher.publish(topic=topic, messages=[{"data": b"after"}], timeout=60)
    got = pull_until(sub, subscription, 1, timeout=30)
    assert [m.message.data for m in got] == [b"after"]


def test_publish_to_an_adopted_topic_made_again_with_fewer_partitions_fails_precondition(
    shared_gateway: GatewayProcess, names: Callable[..., str]
) -> None:
    gw = shared_gateway
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    kafka = f"adopted-shrunk-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(kafka, 4, 1)])[kafka].result(30)
    pub, _ = clients(gw)
    topic = names("topics")
    pub.create_topic(request={"name": topic, "labels": {"kafka-topic": kafka}})
    publisher = gapic_publisher(gw)
    publisher.publish(topic=topic, messages=[{"data": b"before"}], timeout=30)

    _delete(admin, kafka)
    admin.create_topics([NewTopic(kafka, 1, 1)])[kafka].result(30)
    # Each call goes to one partition of the four; those to partition 0 are written.
    refused, written = [], 0
    for _ in range(12):
        try:
            publisher.publish(topic=topic, messages=[{"data": b"x"}], retry=None, timeout=FIRST_CALL_SECONDS)
            written += 1
        except exceptions.FailedPrecondition as exc:
            refused.append(str(exc))
    assert refused, f"all {written} calls written"
    assert all(
        f"Kafka topic {kafka}, which holds the messages of {topic}, has only 1 of the 4 partitions" in r
        for r in refused
    ), refused[0]
