"""A topic's name is reusable at once after DeleteTopic. Kafka has taken the deletion when
DeleteTopic answers, but a broker's copy of the cluster's metadata may still show the Kafka
topic a moment longer. CreateTopic makes its Kafka topic first, so that the controller decides
whether one exists, and takes on only one the controller has (a left-over of an interrupted
create): never one a stale look-up still lists. It once answered NOT_FOUND ("reading the configs
of Kafka topic ...: no such Kafka topic"), seen in tests/e2e/test_stock_broker.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.core import topics as topics_module
from gateway.errors import AlreadyExists, NotFound
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
    assert stale == []  # the stale answer was given, and decided nothing:
    assert gw.run(real(kafka)) == topics.get(name).meta.partitions  # the topic was made for real


def test_a_kafka_topic_a_stale_broker_lists_whole_is_not_taken_on(
    gw: InProcessGateway, names: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stale broker lists the deleted topic and answers for its configs too (on a cluster,
    another broker than the one DeleteTopic waited for): the topic is made for real all the
    same, not taken on while its deletion lands."""
    topics = gw.gateway.topics
    name = names("topics")
    kafka = kafka_names.kafka_topic_for(name)
    admin = topics._admin
    real_partitions, real_config = admin.partitions, admin.topic_config
    made = {"max.message.bytes": str(topics_module.MAX_MESSAGE_BYTES)}

    async def partitions(topic: str, wait: float = 0.0) -> int | None:
        if topic == kafka and await real_partitions(topic) is None:
            return gw.settings.default_partitions  # as a stale broker still has it
        return await real_partitions(topic, wait)

    async def topic_config(topic: str) -> dict[str, str]:
        if topic == kafka and await real_partitions(topic) is None:
            return made
        return await real_config(topic)

    monkeypatch.setattr(admin, "partitions", partitions)
    monkeypatch.setattr(admin, "topic_config", topic_config)
    gw.run(topics.create(pb.Topic(name=name)))
    assert gw.run(real_partitions(kafka)) == topics.get(name).meta.partitions


def test_a_left_over_kafka_topic_is_taken_on_and_a_foreign_one_refused(
    gw: InProcessGateway, names: Callable[..., str]
) -> None:
    topics = gw.gateway.topics
    admin = topics._admin
    partitions = gw.settings.default_partitions
    config = {"max.message.bytes": str(topics_module.MAX_MESSAGE_BYTES)}
    # Left over from a create interrupted after its Kafka step: as CreateTopic makes it.
    left_over = names("topics", "-left")
    gw.run(admin.create_topic(kafka_names.kafka_topic_for(left_over), partitions, config))
    gw.run(topics.create(pb.Topic(name=left_over)))
    assert topics.get(left_over).meta.kafka_topic == kafka_names.kafka_topic_for(left_over)
    # Somebody else's, of the same derived name: not taken silently.
    foreign = names("topics", "-foreign")
    gw.run(admin.create_topic(kafka_names.kafka_topic_for(foreign), partitions + 1))
    with pytest.raises(AlreadyExists, match="adopt it with the label"):
        gw.run(topics.create(pb.Topic(name=foreign)))
    with pytest.raises(NotFound):
        topics.get(foreign)
