"""A topic's name is reusable at once after DeleteTopic. Kafka has taken the deletion when
DeleteTopic answers, but a broker's copy of the cluster's metadata may still show the Kafka
topic a moment longer: a CreateTopic that finds it there, and then finds it gone when it reads
its configs, makes it anew. It once answered NOT_FOUND ("reading the configs of Kafka topic
...: no such Kafka topic"), seen in tests/e2e/test_stock_broker.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.translate import names as kafka_names
from tests.inprocess.conftest import InProcessGateway


def test_a_kafka_topic_seen_while_its_deletion_lands_is_made_anew(
    gw: InProcessGateway, names: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = gw.gateway.topics
    name = names("topics")
    kafka = kafka_names.kafka_topic_for(name)
    admin = topics._admin
    real = admin.partitions
    stale = [1]  # one answer from a broker that has not yet learnt of a deletion

    async def partitions(topic: str, wait: float = 0.0) -> int | None:
        if topic == kafka and stale:
            stale.pop()
            return 1
        return await real(topic, wait)

    monkeypatch.setattr(admin, "partitions", partitions)
    gw.run(topics.create(pb.Topic(name=name)))
    assert stale == []  # the stale answer was given
    assert gw.run(real(kafka)) == topics.get(name).meta.partitions  # and the topic made for real
