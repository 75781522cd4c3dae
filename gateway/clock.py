"""Time as the gateway counts it: whole milliseconds, the unit of Kafka's record timestamps and
of every deadline in the lease state."""

from __future__ import annotations

import time
from typing import Protocol


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
