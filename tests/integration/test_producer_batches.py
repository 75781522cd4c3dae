"""The gateway's Producer on a real broker: records without headers go through produce_batch in
runs, the others one by one, and every record lands where `send` says, in the caller's order.

A run to one partition of an idempotent producer has one delivery callback for all its records,
and its offsets are given out in the order of its records (the broker writes them in that
order); a record given another's offset shows up here as an offset that holds another record.

The local queue here holds 64 records and one call sends 3,000, so most runs meet a full queue
and are queued a prefix at a time: a record lost, doubled or reordered on that path shows up the
same way.
"""

from __future__ import annotations

import asyncio
import collections
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]

from gateway.kafka.producer import OutRecord, Producer

pytestmark = pytest.mark.integration

PARTITIONS = 3
RECORDS = 3000
QUEUE = 64


def _records() -> list[OutRecord]:
    """Keyless runs, records with headers between them, and keyed records on three keys, with
    headers and without, and tombstones."""
    out: list[OutRecord] = []
    for i in range(RECORDS):
        value = f"r{i}".encode()
        if i % 500 == 499:
            out.append((None, value, [("h", b"1")]))  # ends a run
        elif i % 50 == 24:  # a key's record that goes one by one: its partition must not differ
            out.append((f"k{i % 3}".encode(), value, [("h", b"2")]))
        elif i % 100 == 50:  # a tombstone, as the lease log writes: a null value, not an empty one
            out.append((f"k{i % 3}".encode(), None, None))
        elif i % 7 == 3:
            out.append((f"k{i % 3}".encode(), value, None))  # to the partitioner's partition
        else:
            out.append((None, value, None))
    return out


def _read(
    bootstrap: str, topic: str, count: int = RECORDS
) -> dict[tuple[int, int], tuple[bytes | None, bytes | None, list]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: dict[tuple[int, int], tuple[bytes | None, bytes | None, list]] = {}
    try:
        for _ in range(600):
            for m in consumer.consume(500, 0.2):
                assert m.error() is None, m.error()
                seen[(m.partition(), m.offset())] = (m.key(), m.value(), m.headers() or [])
            if len(seen) >= count:
                break
    finally:
        consumer.close()
    return seen


def _topic(bootstrap: str) -> str:
    topic = f"batches-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    return topic


def _check(bootstrap: str, topic: str, records: list[OutRecord], written: list[tuple[int, int]]) -> None:
    """Every record is at the (partition, offset) send returned for it, and a partition holds
    one call's records in the caller's order."""
    assert len(set(written)) == len(records)  # one offset each
    seen = _read(bootstrap, topic, len(records))
    assert len(seen) == len(records)
    for (key, value, headers), where in zip(records, written, strict=True):
        assert seen[where] == (key, value, headers or [])
    by_partition = collections.defaultdict(list)
    for i, (p, o) in enumerate(written):
        by_partition[p].append((o, i))
    for rows in by_partition.values():
        assert [i for _, i in sorted(rows)] == sorted(i for _, i in rows)  # the caller's order


@pytest.mark.parametrize(
    ("spread", "partition", "idempotence"),
    [(PARTITIONS, None, True), (0, None, True), (0, 1, True), (PARTITIONS, None, False)],
    ids=["spread", "partitioner", "one-partition", "not-idempotent"],
)
def test_every_record_lands_where_send_says_in_order(
    kafka_bootstrap: str, spread: int, partition: int | None, idempotence: bool
) -> None:
    """Runs to one partition of an idempotent producer share one delivery callback and are
    matched by offset order; the others have a callback per record. Both must agree with what
    the broker holds."""
    topic = _topic(kafka_bootstrap)
    records = _records()

    async def send() -> list[tuple[int, int]]:
        config = {
            "bootstrap.servers": kafka_bootstrap,
            "queue.buffering.max.messages": QUEUE,
            "enable.idempotence": idempotence,
        }
        async with Producer(config) as producer:
            return await producer.send(topic, records, partition=partition, spread=spread)

    written = asyncio.run(send())
    _check(kafka_bootstrap, topic, records, written)
    keyless = {written[i][0] for i, (k, _, _) in enumerate(records) if k is None}
    if spread:
        assert len(keyless) == 1  # one call's keyless records share the partition it picked
    if partition is not None:
        assert {p for p, _ in written} == {partition}
    for n in range(3):
        key = f"k{n}".encode()
        assert len({written[i][0] for i, (k, _, _) in enumerate(records) if k == key}) == 1


def test_calls_whose_runs_interleave_in_one_partition_get_their_own_offsets(kafka_bootstrap: str) -> None:
    """Four calls at once to one partition through a queue of 64: their runs are queued a
    prefix at a time, the calls' records interleave in the partition, and each call still gets
    the offsets of its own records."""
    topic = _topic(kafka_bootstrap)
    calls = [[(None, f"c{c}-r{i}".encode(), None) for i in range(700)] for c in range(4)]

    async def send() -> list[list[tuple[int, int]]]:
        config = {"bootstrap.servers": kafka_bootstrap, "queue.buffering.max.messages": QUEUE}
        async with Producer(config) as producer:
            return list(await asyncio.gather(*(producer.send(topic, rs, partition=2) for rs in calls)))

    written = asyncio.run(send())
    seen = _read(kafka_bootstrap, topic, sum(map(len, calls)))
    offsets = [[o for _, o in w] for w in written]
    assert any(max(a) > min(b) for a in offsets for b in offsets if a is not b)  # they did interleave
    for records, where in zip(calls, written, strict=True):
        assert [seen[w][1] for w in where] == [value for _, value, _ in records]
