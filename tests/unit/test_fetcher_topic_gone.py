"""A GroupFetcher that loses its last partition looks its topic up, and logs a WARNING when it
is gone (deleted with Kafka's own tools: the subscription then only delivers nothing). Against
a real broker: tests/e2e/test_kafka_topic_gone.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import confluent_kafka
import pytest
from confluent_kafka import KafkaError

from gateway.kafka.consumer import GroupFetcher


class Consumer:
    """list_topics answers `topics` (name -> error or None), or raises `fails`."""

    def __init__(self, topics: dict[str, KafkaError | None], fails: bool = False) -> None:
        self.topics = {t: SimpleNamespace(error=e) for t, e in topics.items()}
        self.fails = fails
        self.asked: list[str] = []

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        self.asked.append(topic)
        if self.fails:
            raise confluent_kafka.KafkaException(KafkaError(KafkaError._TRANSPORT, "down"))
        return SimpleNamespace(topics=self.topics)


FETCHER = SimpleNamespace(_topic="p.t", _group="pubsub-gateway.sub.p.s")


def _said(consumer: Consumer, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.set_level(logging.WARNING, logger="gateway.kafka.consumer")
    GroupFetcher._say_if_gone(FETCHER, consumer)  # type: ignore[arg-type]
    assert consumer.asked == ["p.t"]
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    "topics",
    [{}, {"p.t": KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition")}],
)
def test_a_topic_gone_is_said_naming_it_and_the_group(
    topics: dict[str, KafkaError | None], caplog: pytest.LogCaptureFixture
) -> None:
    [line] = _said(Consumer(topics), caplog)
    assert "Kafka topic p.t, which consumer group pubsub-gateway.sub.p.s reads, does not exist" in line


@pytest.mark.parametrize(
    "consumer",
    [
        Consumer({"p.t": None}),  # there: the partitions went to other members
        Consumer({"p.t": KafkaError(KafkaError.LEADER_NOT_AVAILABLE, "electing")}),
        Consumer({}, fails=True),  # the cluster cannot tell now
    ],
)
def test_nothing_is_said_unless_the_topic_is_known_to_be_gone(
    consumer: Consumer, caplog: pytest.LogCaptureFixture
) -> None:
    assert _said(consumer, caplog) == []
