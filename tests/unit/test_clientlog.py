"""The rate limit on librdkafka's log lines (gateway.kafka.clientlog), with a fake clock."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest

from gateway.kafka.clientlog import BURST_LINES, INTERVAL_SECONDS, RateLimit, client_logger, shape

FAIL = (
    "[thrd:127.0.0.1:{port}/bootstrap]: 127.0.0.1:{port}/bootstrap: Connect to "
    "ipv4#127.0.0.1:{port} failed: Connection refused (after {ms}ms in state CONNECT{more})"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def out(clock: Clock) -> Iterator[tuple[logging.Logger, Collect]]:
    logger = client_logger(f"test.clientlog.{uuid.uuid4().hex}", RateLimit(clock))
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = Collect()
    logger.addHandler(handler)
    yield logger, handler
    logger.removeHandler(handler)


def fail(logger: logging.Logger, client: str, port: int = 9092, ms: int = 0, more: str = "") -> None:
    """What confluent-kafka's log callback calls for librdkafka's FAIL line."""
    logger.log(logging.ERROR, "%s [%s] %s", "FAIL", client, FAIL.format(port=port, ms=ms, more=more))


def test_near_identical_lines_share_a_shape() -> None:
    a = FAIL.format(port=9092, ms=0, more="")
    b = FAIL.format(port=41234, ms=17, more=", 7 identical error(s) suppressed")
    assert shape(a) == shape(b)
    assert shape("1/1 brokers are down") == shape("3/3 brokers are down") != shape(a)


def test_a_flood_gives_a_handful_of_lines(clock: Clock, out: tuple[logging.Logger, Collect]) -> None:
    logger, got = out
    for i in range(1000):  # 1000 lines in 10 s from 4 clients on 2 ports
        fail(
            logger,
            f"rdkafka#{('producer', 'consumer')[i % 2]}-{i % 4}",
            9092 + i % 2,
            i % 5,
            ", 7 identical error(s) suppressed" if i % 3 else "",
        )
        clock.now += 0.01
    assert len(got.records) == 1
    assert got.records[0].levelno == logging.ERROR
    assert "Connect to ipv4#127.0.0.1:9092 failed" in got.messages[0]


def test_the_next_line_after_the_interval_reports_what_was_held(
    clock: Clock, out: tuple[logging.Logger, Collect]
) -> None:
    logger, got = out
    for _ in range(153):
        fail(logger, "rdkafka#producer-1")
        clock.now += 0.1
    clock.now += INTERVAL_SECONDS - 15.3
    fail(logger, "rdkafka#consumer-3")
    assert len(got.records) == 2
    assert got.messages[1].endswith("(and 152 more like it in the last 30 s)")
    assert "rdkafka#consumer-3" in got.messages[1]
    fail(logger, "rdkafka#consumer-3")  # the count starts again
    clock.now += INTERVAL_SECONDS
    fail(logger, "rdkafka#consumer-3")
    assert got.messages[2].endswith("(and 1 more like it in the last 30 s)")


def test_distinct_messages_do_not_hold_each_other_back(
    clock: Clock, out: tuple[logging.Logger, Collect]
) -> None:
    logger, got = out
    for i in range(300):
        fail(logger, "rdkafka#producer-1")
        if i % 100 == 50:
            logger.log(
                logging.WARNING,
                "%s [%s] %s",
                "REQTMOUT",
                "rdkafka#producer-1",
                f"127.0.0.1:9092/1: Timed out {i} in-flight requests",
            )
            logger.log(
                logging.ERROR, "%s [%s] %s", "ERROR", "rdkafka#consumer-2", f"{i % 7}/1 brokers are down"
            )
        clock.now += 0.01
    logger.log(logging.INFO, "%s [%s] %s", "FAIL", "rdkafka#producer-1", "a different facility's line")
    kinds = [m.split(": ", 1)[-1][:22] for m in got.messages]
    assert len(got.records) == 4, kinds  # FAIL, REQTMOUT, ERROR and the INFO line, once each


def test_a_line_after_a_quiet_period_passes(clock: Clock, out: tuple[logging.Logger, Collect]) -> None:
    logger, got = out
    for _ in range(100):
        fail(logger, "rdkafka#producer-1")
        clock.now += 0.05
    clock.now += 16  # the broker came back; a new outage begins 21 s after the first
    fail(logger, "rdkafka#producer-1")
    assert len(got.records) == 2
    assert got.messages[1].endswith("(and 99 more like it in the last 21 s)")


def test_all_shapes_together_are_capped_per_second(clock: Clock, out: tuple[logging.Logger, Collect]) -> None:
    logger, got = out
    for i in range(1000):  # 1000 different lines in 10 s
        logger.error("unusual line number %s", "x" * (i % 300) + "y" * (i // 300))
        clock.now += 0.01
    assert len(got.records) <= BURST_LINES + 10 * 5
    clock.now += 5
    logger.error("a recovery line")  # after a quiet moment, anything passes again
    assert got.messages[-1] == "a recovery line"


def test_debug_lines_are_not_limited(clock: Clock, out: tuple[logging.Logger, Collect]) -> None:
    logger, got = out
    for _ in range(50):
        logger.log(logging.DEBUG, "%s [%s] %s", "BRKMAIN", "rdkafka#producer-1", "Enter main broker thread")
    assert len(got.records) == 50


def test_client_logger_attaches_one_shared_filter() -> None:
    a, b = client_logger("gateway.kafka.producer"), client_logger("gateway.kafka.producer")
    assert a is b and a.name == "gateway.kafka.producer.librdkafka"
    assert len(a.filters) == 1 and a.filters[0] is client_logger("gateway.kafka.consumer").filters[0]


def test_a_real_client_against_a_closed_port() -> None:
    """What confluent-kafka really calls: ERROR-level FAIL lines, several a second, limited."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    raw, limited = Collect(), Collect()
    plain = logging.getLogger(f"test.clientlog.raw.{uuid.uuid4().hex}")
    plain.propagate = False
    plain.addHandler(raw)
    wrapped = client_logger(f"test.clientlog.real.{uuid.uuid4().hex}", RateLimit())
    wrapped.propagate = False
    wrapped.addHandler(limited)
    producers = [
        confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{port}"}, logger=lg)
        for lg in (plain, wrapped, wrapped)
    ]
    for p in producers:
        p.produce("t", b"waiting for a broker")  # a client with work reconnects eagerly
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        for p in producers:
            p.poll(0.02)
    for p in producers:
        p.purge()
    assert len(raw.records) >= 5, raw.messages
    assert {(r.levelno, r.msg, r.args[0]) for r in raw.records if isinstance(r.args, tuple)} == {
        (logging.ERROR, "%s [%s] %s", "FAIL")
    }
    # Two producers, each as loud as the first one: one line for both.
    assert len(limited.records) == 1, limited.messages
    assert f"Connect to ipv4#127.0.0.1:{port} failed" in limited.messages[0]


async def test_the_admin_clients_lines_reach_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """confluent-kafka hands an admin client's log lines over only from poll(), which no admin
    call makes: the gateway's Admin serves them while it runs (they were never logged)."""
    from gateway.kafka import admin as admin_module

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(admin_module, "LOG_POLL_SECONDS", 0.1)
    seen = Collect()
    logger = logging.getLogger("gateway.kafka.admin.librdkafka")
    logger.addHandler(seen)
    try:
        async with admin_module.Admin({"bootstrap.servers": f"127.0.0.1:{port}"}):
            for _ in range(100):  # 10 s at most
                if seen.records:
                    break
                await asyncio.sleep(0.1)
    finally:
        logger.removeHandler(seen)
    assert any(f"Connect to ipv4#127.0.0.1:{port} failed" in m for m in seen.messages), seen.messages
