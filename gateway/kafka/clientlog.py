"""The loggers librdkafka's own log lines go to: rate-limited, so a broker outage cannot flood.

Every confluent-kafka client of the gateway is built with ``logger=client_logger(__name__)``.
confluent-kafka forwards each librdkafka line (from ``poll()``/``flush()``) as
``logger.log(level, "%s [%s] %s", facility, client_name, text)``, the syslog level mapped to
logging's: 0-2 CRITICAL, 3 (LOG_ERR: ``FAIL``, ``ERROR``) ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG.
With the broker down, each client repeats ``FAIL ... Connect to ipv4#127.0.0.1:9092 failed``
several times a second; a gateway holds dozens of clients.

One :class:`RateLimit` filter, shared by all client loggers, lets through per message *shape*
(level, facility, and the text with client names, broker addresses, ids and numbers folded)
at most one line per :data:`INTERVAL_SECONDS`; the next line of that shape let through ends with
``(and N more like it in the last S s)``. All shapes together get at most
:data:`LINES_PER_SECOND` lines a second (bursts of :data:`BURST_LINES`). A shape not seen for
:data:`QUIET_SECONDS` starts afresh, so the first line of a new outage (or of a recovery) is
shown at once. DEBUG lines (librdkafka's ``debug=...``, asked for on purpose) pass untouched.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable

__all__ = [
    "BURST_LINES",
    "INTERVAL_SECONDS",
    "LINES_PER_SECOND",
    "QUIET_SECONDS",
    "RateLimit",
    "client_logger",
    "shape",
]

INTERVAL_SECONDS = 30.0  # one line per shape per interval
# Longer than librdkafka's longest reconnect backoff (reconnect.backoff.max.ms 10 s, +20% jitter):
# one client retrying keeps its shape "seen"; a shape silent this long is news when it returns.
QUIET_SECONDS = 15.0
LINES_PER_SECOND = 5.0  # all Kafka clients of the process together
BURST_LINES = 20
MAX_SHAPES = 1000  # shapes remembered; the least recently seen are forgotten beyond it

_RDKAFKA_FORMAT = "%s [%s] %s"  # confluent-kafka's log_cb: facility, client name, text
_FOLDS = [
    (re.compile(r"^\[thrd:[^\]]*\]: "), ""),  # the thread, named after its broker
    (re.compile(r", \d+ identical error\(s\) suppressed"), ""),  # librdkafka's own counting
    (re.compile(r"\b(?:[a-z_]+://)?[^\s/]+:\d+/(?:\d+|bootstrap)\b"), "<broker>"),
    (re.compile(r"\bipv[46]#\S*?:\d+"), "<addr>"),
    (re.compile(r"\brdkafka#\w+-\d+"), "<client>"),
    (re.compile(r"\b(?=[-0-9a-fA-F]*\d)[-0-9a-fA-F]{8,}\b"), "<id>"),  # uuids, member ids
    (re.compile(r"\d+"), "N"),
]
_MAX_KEY = 300


def shape(text: str) -> str:
    """`text` with what differs between clients, brokers and repeats folded away."""
    for pattern, replacement in _FOLDS:
        text = pattern.sub(replacement, text)
    return text[:_MAX_KEY]


def _key(record: logging.LogRecord) -> tuple[int, str, str]:
    args = record.args
    if record.msg == _RDKAFKA_FORMAT and isinstance(args, tuple) and len(args) == 3:
        return record.levelno, str(args[0]), shape(str(args[2]))
    return record.levelno, "", shape(record.getMessage())


@dataclasses.dataclass(slots=True)
class _Shape:
    since: float  # last let through, or first seen if never
    seen: float
    passed: bool = False
    held: int = 0  # suppressed since `since`


class RateLimit(logging.Filter):
    """Per-shape interval plus a token bucket over all shapes; thread-safe (librdkafka lines
    arrive on every client's poll thread). ``clock`` is injectable for tests."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        interval: float = INTERVAL_SECONDS,
        quiet: float = QUIET_SECONDS,
        per_second: float = LINES_PER_SECOND,
        burst: int = BURST_LINES,
        max_shapes: int = MAX_SHAPES,
    ) -> None:
        super().__init__()
        self._clock = clock
        self._interval = interval
        self._quiet = quiet
        self._rate = per_second
        self._burst = float(burst)
        self._max_shapes = max_shapes
        self._tokens = float(burst)
        self._refilled = clock()
        self._shapes: dict[tuple[int, str, str], _Shape] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO:
            return True
        key = _key(record)
        with self._lock:
            now = self._clock()
            state = self._shapes.get(key)
            if state is None:
                state = self._shapes[key] = _Shape(since=now, seen=now)
                if len(self._shapes) > self._max_shapes:
                    self._forget(now)
            due = not state.passed or now - state.since >= self._interval or now - state.seen >= self._quiet
            state.seen = now
            if not due or not self._take_token(now):
                state.held += 1
                return False
            held, elapsed = state.held, now - state.since
            state.since, state.passed, state.held = now, True, 0
        if held:
            record.msg = f"{record.getMessage()} (and {held} more like it in the last {elapsed:.0f} s)"
            record.args = None
        return True

    def _take_token(self, now: float) -> bool:
        self._tokens = min(self._burst, self._tokens + (now - self._refilled) * self._rate)
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _forget(self, now: float) -> None:
        """Drop shapes gone quiet, then the least recently seen, down to half the limit."""
        stale = [k for k, s in self._shapes.items() if now - s.seen >= self._interval]
        for k in stale:
            del self._shapes[k]
        excess = len(self._shapes) - self._max_shapes // 2
        if excess > 0:
            oldest = sorted(self._shapes, key=lambda k: self._shapes[k].seen)[:excess]
            for k in oldest:
                del self._shapes[k]


_SHARED = RateLimit()


def client_logger(module: str, limit: RateLimit | None = None) -> logging.Logger:
    """The logger for librdkafka's lines of `module`'s clients: ``<module>.librdkafka``, with the
    process-wide rate limit (or `limit`) attached once. The module's own log lines stay on its own
    logger, unfiltered."""
    logger = logging.getLogger(f"{module}.librdkafka")
    limit = _SHARED if limit is None else limit
    if limit not in logger.filters:
        logger.addFilter(limit)
    return logger
