"""Reading what the gateway wrote to Kafka, with a plain Kafka consumer, as a user's would."""

from __future__ import annotations

import time
import uuid

import confluent_kafka


def committed_records(
    bootstrap: str, kafka_topic: str, expect: int, timeout: float = 30, linger: float = 3.0
) -> list[confluent_kafka.Message]:
    """The topic's committed records from its start (read_committed: an aborted transaction's
    records take offsets too, and are not counted), once `expect` are in or `timeout` passed,
    with whatever more comes within `linger` seconds after (a duplicate, say)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    # Assigned, not subscribed: no wait for a group to form (3 s on a stock broker).
    partitions = consumer.list_topics(kafka_topic, timeout=30).topics[kafka_topic].partitions
    consumer.assign(
        [confluent_kafka.TopicPartition(kafka_topic, p, confluent_kafka.OFFSET_BEGINNING) for p in partitions]
    )
    out: list[confluent_kafka.Message] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            out += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
            if len(out) >= expect:
                deadline = min(deadline, time.monotonic() + linger)
    finally:
        consumer.close()
    return out
