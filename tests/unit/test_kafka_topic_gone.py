"""A write the producer could not place (unknown topic or partition) or gave up on (timed out):
`_translate` marks it UnknownTopic, still UNAVAILABLE, and Publish asks the cluster whether the
Kafka topic is gone for good (`kafka_topic_gone`). Against a real broker:
tests/e2e/test_kafka_topic_gone.py."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError

from gateway.core import topics
from gateway.core.topics import kafka_topic_gone
from gateway.errors import Code, FailedPrecondition, NotFound, Unavailable
from gateway.kafka.producer import UnknownTopic, _translate
from gateway.once import OnePerKey


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._MSG_TIMED_OUT,
    ],
)
def test_unplaced_writes_are_unknown_topic_and_still_unavailable(code: int) -> None:
    err = _translate(KafkaError(code, "gone?"), "p.t")
    assert isinstance(err, UnknownTopic)
    assert err.code is Code.UNAVAILABLE


@pytest.mark.parametrize(
    "code", [KafkaError._TRANSPORT, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._ALL_BROKERS_DOWN]
)
def test_other_transient_write_errors_are_plain_unavailable(code: int) -> None:
    err = _translate(KafkaError(code, "later"), "p.t")
    assert type(err) is Unavailable


class Admin:
    """`partitions` answers `found` (a count, None for no such topic, or an exception), after
    `delay` seconds."""

    def __init__(self, found: int | Exception | None, delay: float = 0.0) -> None:
        self.found, self.delay = found, delay
        self.asked: list[tuple[str, float]] = []

    async def partitions(self, name: str, wait: float = 0.0) -> int | None:
        self.asked.append((name, wait))
        await asyncio.sleep(self.delay)
        if isinstance(self.found, Exception):
            raise self.found
        return self.found


def _gone(admin: Admin, partitions: int = 4) -> object:
    return asyncio.run(kafka_topic_gone(admin, OnePerKey(), "projects/p/topics/t", "p.t", partitions))  # type: ignore[arg-type]


def test_a_kafka_topic_not_found_is_not_found_naming_both_topics() -> None:
    admin = Admin(None)
    gone = _gone(admin)
    assert isinstance(gone, NotFound)
    assert "Kafka topic p.t, which holds the messages of projects/p/topics/t, does not exist" in gone.message
    assert admin.asked == [("p.t", topics.GONE_WAIT_SECONDS)]  # a topic just made is waited for


def test_fewer_partitions_than_made_with_is_failed_precondition() -> None:
    gone = _gone(Admin(1), partitions=4)
    assert isinstance(gone, FailedPrecondition)
    assert "has only 1 of the 4 partitions" in gone.message


@pytest.mark.parametrize("found", [4, 6])
def test_a_topic_there_as_it_was_leaves_the_writes_own_error(found: int) -> None:
    assert _gone(Admin(found), partitions=4) is None


def test_a_cluster_that_cannot_tell_leaves_the_writes_own_error() -> None:
    assert _gone(Admin(Unavailable("Kafka did not answer"))) is None


def test_a_cluster_that_does_not_answer_in_time_leaves_the_writes_own_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics, "GONE_LOOK_SECONDS", 0.05)
    assert _gone(Admin(None, delay=1.0)) is None


def test_calls_failing_together_share_one_look_and_each_get_their_own_error() -> None:
    admin = Admin(None, delay=0.05)

    async def many() -> list[object]:
        looks: OnePerKey[str, int | None] = OnePerKey()
        calls = [kafka_topic_gone(admin, looks, "projects/p/topics/t", "p.t", 4) for _ in range(20)]  # type: ignore[arg-type]
        return await asyncio.gather(*calls)

    errors = asyncio.run(many())
    assert len(admin.asked) == 1
    assert all(isinstance(e, NotFound) for e in errors)
    assert len({id(e) for e in errors}) == 20  # raised by each call: no instance shared
