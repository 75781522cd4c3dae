"""What every generator shares: the 1 KiB payload with a send timestamp, start synchronisation,
the result dict, and the raw Kafka client configurations."""

from __future__ import annotations

import struct
import time
from typing import Any

MSG_BYTES = 1024
_STAMP = struct.Struct("<d")
_FILL = b"x" * (MSG_BYTES - _STAMP.size)

PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "enable.idempotence": True}
"""The raw baseline's producer: acks=all and idempotent like the gateway's; librdkafka defaults
otherwise (linger.ms 5)."""


def payload(sent_at: float) -> bytes:
    """1 KiB whose first 8 bytes are the send time (time.time())."""
    return _STAMP.pack(sent_at) + _FILL


def sent_at(data: bytes) -> float:
    return float(_STAMP.unpack_from(data)[0])


def wait_until(start_at: float) -> None:
    time.sleep(max(0.0, start_at - time.time()))


def result(count: int, t0: float, t1: float, cpu0: float, **extra: Any) -> dict[str, Any]:
    """A generator's report: messages, its wall window (time.time()) and its own CPU seconds."""
    return {"count": count, "t0": t0, "t1": t1, "cpu_s": time.process_time() - cpu0, **extra}


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p99/max in milliseconds of latencies given in seconds."""
    if not values:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return 1000.0 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": 1000.0 * ordered[-1]}
