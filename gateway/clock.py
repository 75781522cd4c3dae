"""Time as the gateway counts it: whole milliseconds, the unit of Kafka's record timestamps and
of every deadline in the lease state."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

T = TypeVar("T")


class SecondsNanos(Protocol):
    """A google.protobuf Duration or Timestamp."""

    seconds: int
    nanos: int


def now_ms() -> int:
    """The wall clock, in milliseconds since the Unix epoch."""
    return int(time.time() * 1000)


def to_ms(value: SecondsNanos) -> int:
    """A Duration (or a Timestamp) in whole milliseconds, rounded down."""
    return value.seconds * 1000 + value.nanos // 1_000_000


async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """`await awaitable`, or TimeoutError after `seconds` (None: no limit). Use this, not
    `asyncio.wait_for`: on Python 3.11 wait_for swallows a cancellation that arrives as the
    awaited thing completes, so a task cancelled at shutdown could run on (a probe loop did, and
    held a gateway's shutdown for ever). `asyncio.timeout` tells its own cancellation apart."""
    async with asyncio.timeout(seconds):
        return await awaitable
