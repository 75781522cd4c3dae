"""Small reads on the driver with librdkafka (confluent-kafka, as the gateway uses).

Spark's Kafka source cannot tell where a topic ends nor what a consumer group committed, and a
Spark job is a slow way to read one key: the end offsets pin a batch read to a fixed snapshot,
the committed offsets are the watermark of record, the resource topic holds the subscription.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from spark.options import KafkaConnection

if TYPE_CHECKING:
    from confluent_kafka import Consumer

log = logging.getLogger(__name__)
TIMEOUT = 10.0
TAIL_STEP = 64  # records read at first when looking for a checkpoint backwards (x4 per step)


@contextlib.contextmanager
def consumer(conn: KafkaConnection, group: str | None = None) -> Iterator[Consumer]:
    """A read_committed consumer that never joins its group nor commits."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": conn.bootstrap,
            "log_level": 0,
            "enable.auto.commit": False,
            "group.id": group or f"spark-reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 20,
            **conn.driver_settings(),
            "allow.auto.create.topics": False,  # a lookup of a deleted topic must not re-create it
        }
    )
    try:
        yield c
    finally:
        c.close()


def end_offsets(c: Consumer, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end for read_committed readers (the last stable offset)."""
    from confluent_kafka import TopicPartition

    return {
        p: int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1])
        for p in range(partitions)
    }


def committed_offsets(c: Consumer, topic: str, partitions: int) -> dict[int, int]:
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
                if error is not None and error.code() in (
                    KafkaError._PARTITION_EOF,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                ):
                    return found, value
                if error is None and m.key() == key:
                    found, value = True, m.value()
    raise TimeoutError(f"could not read {topic} to its end")


@dataclasses.dataclass(frozen=True, slots=True)
class LogTail:
    """What a batch read needs of one lease-log partition: the current checkpoint (the latest
    record of `s.<p>.<epoch>`, None if the partition has none) and every command value written
    from the checkpoint's `log_offset` on (from the start of the log if it does not say)."""

    checkpoint: bytes | None
    watermark: int  # the checkpoint's (-1 without one)
    commands: list[bytes]


def _librdkafka(conn: KafkaConnection) -> dict[str, str | int | bool]:
    return {
        "bootstrap.servers": conn.bootstrap,
        "isolation.level": "read_committed",
        "log_level": 0,
        **conn.driver_settings(),
    }


def log_tail(conn: KafkaConnection, log_topic: str, partition: int, epoch: int) -> LogTail:
    """Look for the checkpoint backwards from the log's end (it is rewritten every checkpoint
    interval, so the last few records usually hold it), then read the commands from the offset
    it names on. The history before that (old checkpoint versions not compacted yet, commands
    folded long ago) is not read."""
    from gateway.kafka.consumer import bounds, read_to_end
    from gateway.leases import logformat
    from gateway.leases.commands import Checkpoint

    config = _librdkafka(conn)
    key = logformat.checkpoint_key(partition, epoch)
    low, end = bounds(config, log_topic, partition, TIMEOUT)
    read: list[tuple[int, bytes | None, bytes | None]] = []  # [upper, end), in order
    checkpoint: bytes | None = None
    upper, step = end, TAIL_STEP
    while checkpoint is None and upper > low:
        lower = max(low, upper - step)
        chunk = read_to_end(config, log_topic, partition, 6 * TIMEOUT, start=lower, end=upper)
        read = chunk + read
        checkpoint = next((v for _, k, v in reversed(chunk) if k == key and v is not None), None)
        upper, step = lower, step * 4
    start, watermark = low, -1
    if checkpoint is not None:
        cp = logformat.decode(checkpoint)
        if not isinstance(cp, Checkpoint):
            raise logformat.BadLogRecord(f"{key!r} of {log_topic} holds no checkpoint")
        start, watermark = max(low, cp.log_offset), cp.watermark
    if start < upper:
        read = read_to_end(config, log_topic, partition, 6 * TIMEOUT, start=start, end=upper) + read
    commands = [
        v
        for o, k, v in read
        if o >= start and k is not None and v is not None and logformat.is_command_key(k)
    ]
    return LogTail(checkpoint, watermark, commands)


def await_applied(
    conn: KafkaConnection, log_topic: str, partitions: int, group: str, applied_group: str, timeout: float
) -> None:
    """Return once every partition of the lease/ack log that a gateway process owns has been
    applied by it up to the log's current end (read now, after the caller's writes): from then
    on no process delivers what those writes acknowledged. A partition nobody owns needs no
    wait (its next owner folds the whole log before it delivers anything), and neither does a
    subscription no process serves. While the group rebalances, assignments are not known:
    wait for it to settle. TimeoutError after `timeout` seconds, naming the partitions behind."""
    from confluent_kafka import ConsumerGroupState, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": conn.bootstrap, "log_level": 0, **conn.driver_settings()})
    deadline = time.monotonic() + timeout
    behind: list[int] = []
    with consumer(conn, group=applied_group) as c:
        ends = end_offsets(c, log_topic, partitions)
        while True:
            desc = admin.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result()
            settled = desc.state in (
                ConsumerGroupState.STABLE,
                ConsumerGroupState.EMPTY,
                ConsumerGroupState.DEAD,
            )
            owned = {
                tp.partition
                for m in desc.members
                for tp in m.assignment.topic_partitions
                if tp.partition < partitions
            }
            if settled and owned:
                try:
                    found = c.committed(
                        [TopicPartition(log_topic, p) for p in sorted(owned)], timeout=TIMEOUT
                    )
                except KafkaException as exc:
                    log.debug("applied offsets of %s not readable yet: %s", log_topic, exc)
                    found = []
                done = {tp.partition: tp.offset for tp in found if tp.error is None}
                behind = [p for p in sorted(owned) if done.get(p, -1) < ends[p]]
            else:
                behind = [] if settled else sorted(owned) or [-1]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the gateway processes serving {log_topic} did not apply the acks "
                    f"within {timeout:.0f} s "
                    f"(partitions behind: {behind}; -1: the group was rebalancing)"
                )
            time.sleep(0.05)
