"""What every generator shares: the 1 KiB payload with a send timestamp, start synchronisation,
the result dict, and the raw Kafka client configurations."""

from __future__ import annotations

import struct
import time
from typing import Any

import confluent_kafka

MSG_BYTES = 1024
_STAMP = struct.Struct("<d")
_FILL = b"x" * (MSG_BYTES - _STAMP.size)

PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "enable.idempotence": True}
"""The raw baseline's producer: acks=all and idempotent like the gateway's; librdkafka defaults
otherwise (linger.ms 5)."""


_shared: Any = None  # a multiprocessing.Value("q") every pool process shares, set by init_shared


def init_shared(counter: Any) -> None:
    global _shared  # one counter per pool process, set once at its start
    _shared = counter


def add_shared(n: int) -> int:
    """Add to the count all generators of a run share; returns the new total."""
    if _shared is None:
        return n
    with _shared.get_lock():
        _shared.value += n
        return int(_shared.value)


def payload(sent_at: float) -> bytes:
    """1 KiB whose first 8 bytes are the send time (time.time())."""
    return _STAMP.pack(sent_at) + _FILL


def sent_at(data: bytes) -> float:
    return float(_STAMP.unpack_from(data)[0])


def watermarks(
    consumer: confluent_kafka.Consumer, tp: confluent_kafka.TopicPartition, timeout: float = 30.0
) -> tuple[int, int]:
    """(low, high) of a partition, waiting while a new topic's leader is being elected."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            return int(low), int(high)
        except confluent_kafka.KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


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
