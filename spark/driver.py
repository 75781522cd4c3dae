"""Small reads on the driver with librdkafka (confluent-kafka, as the gateway uses).

Spark's Kafka source cannot tell where a topic ends nor what a consumer group committed, and a
Spark job is a slow way to read one key: the end offsets pin a batch read to a fixed snapshot,
the committed offsets are the watermark of record, the resource topic holds the subscription.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

from spark.options import KafkaConnection

log = logging.getLogger(__name__)
TIMEOUT = 10.0


@contextlib.contextmanager
def consumer(conn: KafkaConnection, group: str | None = None) -> Iterator[Any]:
    """A read_committed consumer that never joins its group nor commits."""
    from confluent_kafka import Consumer

    c = Consumer({
        "bootstrap.servers": conn.bootstrap, "log_level": 0, "enable.auto.commit": False,
        "group.id": group or f"spark-reader-{uuid.uuid4().hex[:8]}", "isolation.level": "read_committed",
        "enable.partition.eof": True, "fetch.wait.max.ms": 20, **conn.driver_settings(),
    })
    try:
        yield c
    finally:
        c.close()


def end_offsets(c: Any, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end for read_committed readers (the last stable offset)."""
    from confluent_kafka import TopicPartition

    return {p: int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1])
            for p in range(partitions)}


def committed_offsets(c: Any, topic: str, partitions: int) -> dict[int, int]:
    """The consumer's group's committed offsets; {} when they cannot be read (the gateway commits
    only after writing a checkpoint with that watermark, so the log alone is enough for it)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        found = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT)
    except KafkaException as exc:
        log.warning("cannot read committed offsets of %s: %s", topic, exc)
        return {}
    return {tp.partition: tp.offset for tp in found if tp.error is None and tp.offset >= 0}


def latest_value(conn: KafkaConnection, topic: str, key: bytes) -> tuple[bool, bytes | None]:
    """(found, value) of the last record with `key` in partition 0 of `topic`, read to its end
    (a value of None is a tombstone)."""
    from confluent_kafka import KafkaError, TopicPartition

    with consumer(conn) as c:
        c.assign([TopicPartition(topic, 0, 0)])
        found, value = False, None
        deadline = time.monotonic() + 6 * TIMEOUT
        while time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.05):
                error = m.error()
                if error is not None and error.code() in (KafkaError._PARTITION_EOF,
                                                          KafkaError.UNKNOWN_TOPIC_OR_PART):
                    return found, value
                if error is None and m.key() == key:
                    found, value = True, m.value()
    raise TimeoutError(f"could not read {topic} to its end")
