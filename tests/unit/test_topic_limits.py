"""What batches an adopted Kafka topic takes: its max.message.bytes as read (and read again) by
TopicLimits, the producer's batch.size fitted to it, and what one record alone takes.
Against a real broker: tests/e2e/test_adopted_topic_limits.py."""

from __future__ import annotations

import asyncio
import logging

import pytest
from confluent_kafka import KafkaError

from gateway.errors import FailedPrecondition, NotFound, PermissionDenied, Unavailable
from gateway.kafka import producer as producer_module
from gateway.kafka import topic_limits
from gateway.kafka.producer import LOG_OVERHEAD, Producer, alone_bytes
from gateway.kafka.topic_limits import UNKNOWN, TopicConfig, TopicLimits

BOOT = {"bootstrap.servers": "127.0.0.1:1"}  # never started: no client is made


class FakeAdmin:
    """topic_config answers from `answers`, one per call: a limit, a cleanup.policy and a limit,
    or an exception to raise."""

    def __init__(self, *answers: int | tuple[str, int] | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def topic_config(self, topic: str) -> dict[str, str]:
        self.calls += 1
        await asyncio.sleep(0)  # callers meanwhile wait for this read, not one of their own
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        policy, limit = answer if isinstance(answer, tuple) else ("delete", answer)
        return {"max.message.bytes": str(limit), "cleanup.policy": policy}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _limits(admin: FakeAdmin, clock: Clock) -> TopicLimits:
    return TopicLimits(admin, clock)  # type: ignore[arg-type]


async def test_a_limit_is_read_once_then_again_after_a_while_or_a_refusal() -> None:
    admin, clock = FakeAdmin(60_000, 50_000, 40_000), Clock()
    limits = _limits(admin, clock)
    assert await asyncio.gather(*(limits.of("t") for _ in range(3))) == [TopicConfig(60_000, False)] * 3
    assert admin.calls == 1
    clock.now += topic_limits.REFRESH_SECONDS - 1
    assert (await limits.of("t")).max_message_bytes == 60_000
    clock.now += 1
    assert (await limits.of("t")).max_message_bytes == 50_000  # read again
    limits.forget("t")  # the broker refused a batch as too large
    assert (await limits.of("t")).max_message_bytes == 40_000
    assert admin.calls == 3


async def test_without_describe_configs_the_limit_is_unknown_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin, clock = FakeAdmin(PermissionDenied("no DescribeConfigs"), PermissionDenied("still none")), Clock()
    limits = _limits(admin, clock)
    with caplog.at_level(logging.WARNING, logger=topic_limits.__name__):
        assert await limits.of("t") == UNKNOWN
        assert await limits.of("t") == UNKNOWN
        assert admin.calls == 1  # the refusal is remembered as long as a limit would be
        clock.now += topic_limits.REFRESH_SECONDS
        assert await limits.of("t") == UNKNOWN
    assert admin.calls == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "grant DescribeConfigs" in warnings[0].getMessage()


async def test_a_failed_read_keeps_what_was_known_and_is_tried_again_soon() -> None:
    admin = FakeAdmin(Unavailable("broker away"), 60_000, NotFound("gone"), FailedPrecondition("?"), 50_000)
    clock = Clock()
    limits = _limits(admin, clock)
    retry = topic_limits.RETRY_SECONDS
    assert await limits.of("t") == UNKNOWN  # unknown yet: the producer's batch.size
    clock.now += retry - 1
    assert await limits.of("t") == UNKNOWN  # not asked again per write
    assert admin.calls == 1
    clock.now += 1
    assert (await limits.of("t")).max_message_bytes == 60_000
    clock.now += topic_limits.REFRESH_SECONDS
    assert (await limits.of("t")).max_message_bytes == 60_000  # the refresh failed: what was known stays
    clock.now += retry
    assert (await limits.of("t")).max_message_bytes == 60_000  # and again
    clock.now += retry
    assert (await limits.of("t")).max_message_bytes == 50_000
    assert admin.calls == 5


@pytest.mark.parametrize(
    ("policy", "compacted"),
    [("delete", False), ("compact", True), ("compact,delete", True), ("delete, compact", True)],
)
async def test_a_compacted_topic_is_known(policy: str, compacted: bool) -> None:
    limits = _limits(FakeAdmin((policy, 60_000)), Clock())
    assert await limits.of("t") == TopicConfig(60_000, compacted)


def test_batch_size_is_fitted_only_to_a_topic_that_takes_less() -> None:
    producer = Producer(BOOT)
    stock = producer.batch_bytes + LOG_OVERHEAD  # Kafka's default max.message.bytes, 1,048,588
    assert stock == 1_048_588
    assert producer.fitted_batch(stock) is None
    assert producer.fitted_batch(11 * 1024 * 1024) is None
    assert producer.fitted_batch(stock - 1) == producer.batch_bytes - 1
    assert producer.fitted_batch(60_000) == 60_000 - LOG_OVERHEAD
    # The user's smaller batch.size fits already.
    assert Producer({**BOOT, "batch.size": 50_000}).fitted_batch(60_000) is None


@pytest.mark.parametrize(
    ("config", "compresses"),
    [
        ({}, False),
        ({"compression.type": "none"}, False),
        ({"compression.type": "lz4"}, True),
        ({"compression.codec": "gzip"}, True),
    ],
)
def test_compression_is_known(config: dict[str, str], compresses: bool) -> None:
    assert Producer({**BOOT, **config}).compresses is compresses


def test_what_one_record_alone_takes() -> None:
    # The batch header (61), the record's length (1), attributes and deltas (3), a null key (1),
    # an empty value (1 + 0), no headers (1).
    assert alone_bytes((None, b"", None)) == 68
    assert alone_bytes((b"k", b"", None)) == 69  # a key of 1 byte: its length (1) and itself
    # Lengths are zigzag varints: 63 takes one byte, 64 two.
    assert alone_bytes((None, bytes(64), None)) - alone_bytes((None, bytes(63), None)) == 2
    # A header: the name's and the value's lengths and bytes (the count stays one byte); a null
    # value's length is -1.
    assert alone_bytes((None, b"", [("ab", b"xyz")])) == 68 + 1 + 2 + 1 + 3
    assert alone_bytes((None, b"", [("ab", None)])) == 68 + 1 + 2 + 1
    assert alone_bytes((None, b"", [("é", "é")])) == 68 + 1 + 2 + 1 + 2  # UTF-8 bytes, not chars
    # The record's own length takes a second byte past 63 bytes of body.
    assert alone_bytes((None, bytes(57), None)) == 61 + 1 + 63
    assert alone_bytes((None, bytes(58), None)) == 61 + 2 + 64


@pytest.mark.parametrize("code", [KafkaError.INVALID_RECORD, KafkaError.INVALID_TIMESTAMP])
def test_records_the_broker_refuses_for_good_are_not_unavailable(code: int) -> None:
    """Clients retry UNAVAILABLE until their deadline; these refusals would come again."""
    refused = producer_module._translate(KafkaError(code), "t")
    assert isinstance(refused, FailedPrecondition) and "Kafka topic t refused the records" in refused.message
