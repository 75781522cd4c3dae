"""The driver's read of a lease-log partition for a snapshot (spark.driver.log_tail): the current
checkpoint found from the end, and the commands from the offset it names, on a real broker."""

from __future__ import annotations

import uuid

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.leases import logformat
from gateway.leases.commands import Ack, Checkpoint
from spark import KafkaConnection, driver


def _topic(bootstrap: str) -> str:
    name = f"log-tail-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def _write(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(30) == 0


def _ack(seq: int, start: int, epoch: int = 0) -> tuple[bytes, bytes]:
    return logformat.command_key(0, "w", seq), logformat.encode(Ack(0, ((start, start + 1),), epoch))


def _checkpoint(watermark: int, log_offset: int, epoch: int = 0) -> tuple[bytes, bytes]:
    cp = Checkpoint(0, watermark, (), (), (), epoch, log_offset)
    return logformat.checkpoint_key(0, epoch), logformat.encode(cp)


def test_the_tail_starts_at_the_checkpoints_log_offset(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    old_cp, folded, unfolded, cp = _checkpoint(1, -1), _ack(0, 3), _ack(1, 5), _checkpoint(4, 2)
    later = [_ack(2 + i, 100 + i) for i in range(300)]  # the checkpoint lies beyond several steps back
    _write(kafka_bootstrap, topic, [old_cp, folded, unfolded, cp, *later])
    tail = driver.log_tail(KafkaConnection(kafka_bootstrap), topic, 0, 0)
    assert tail.checkpoint == cp[1] and tail.watermark == 4
    # offset 1 (folded) is below log_offset 2; offset 2 was written before the checkpoint but
    # not folded into it, so it must be read
    assert tail.commands == [unfolded[1], *(v for _, v in later)]


def test_a_checkpoint_of_another_epoch_is_not_the_current_one(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    current, late_old = _checkpoint(7, -1, epoch=1), _checkpoint(9, 5, epoch=0)
    _write(kafka_bootstrap, topic, [_ack(0, 1), current, _ack(1, 8, epoch=1), late_old])
    tail = driver.log_tail(KafkaConnection(kafka_bootstrap), topic, 0, 1)
    assert tail.checkpoint == current[1] and tail.watermark == 7
    # without a log_offset every command is read (the epoch is filtered by Spark SQL later)
    assert tail.commands == [_ack(0, 1)[1], _ack(1, 8, epoch=1)[1]]


def test_without_a_checkpoint_every_command_is_read(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    _write(kafka_bootstrap, topic, [_ack(0, 1), (logformat.command_key(0, "w", 0), None), _ack(1, 2)])
    tail = driver.log_tail(KafkaConnection(kafka_bootstrap), topic, 0, 0)
    assert (tail.checkpoint, tail.watermark) == (None, -1)
    assert tail.commands == [_ack(0, 1)[1], _ack(1, 2)[1]]
