"""Read a subscription's lease/ack log with a plain consumer: which keys are still live."""

from __future__ import annotations

import time
import uuid
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient

from benchmarks.gen.common import watermarks
from gateway.translate import names


def find_log_topic(bootstrap: str, prefix: str, subscription: str) -> str:
    """The log topic of `subscription`: `<prefix>_gacks.<P>.<S>.<uid>` (one per subscription)."""
    base = names.internal_topic(prefix, "acks", subscription) + "."
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    found = [t for t in topics if t.startswith(base)]
    if len(found) != 1:
        raise RuntimeError(f"expected one lease-log topic {base}*, found {found}")
    return found[0]


def live_keys(bootstrap: str, topic: str, timeout: float = 60.0) -> dict[str, Any]:
    """Read every partition to its end; a key is live when its latest value is not a tombstone."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "enable.auto.commit": False,
            "group.id": f"leaselog-{uuid.uuid4().hex}",
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {}
        for p in parts:
            low, high = watermarks(consumer, confluent_kafka.TopicPartition(topic, p))
            if high > low:
                ends[p] = high
        latest = _read(consumer, topic, ends, timeout)
    finally:
        consumer.close()
    live = {k: v for k, v in latest.items() if v is not None}
    return {
        "partitions": len(parts),
        "records": sum(ends.values()),
        "live_keys": len(live),
        "live_bytes": sum(len(k) + len(v) for k, v in live.items()),
        "keys": sorted(k.decode(errors="replace") for k in live)[:16],
    }


def _read(
    consumer: confluent_kafka.Consumer, topic: str, ends: dict[int, int], timeout: float
) -> dict[bytes, bytes | None]:
    start = confluent_kafka.OFFSET_BEGINNING
    consumer.assign([confluent_kafka.TopicPartition(topic, p, start) for p in ends])
    latest: dict[bytes, bytes | None] = {}
    left = dict(ends)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=0.5):
            if msg.error() is not None:
                continue
            latest[msg.key() or b""] = msg.value()
            p, nxt = msg.partition() or 0, (msg.offset() or 0) + 1
            if p in left and nxt >= left[p]:
                del left[p]
    if left:
        raise TimeoutError(f"could not read {topic} to its end in {timeout:.0f}s")
    return latest
