"""The gateway's Producer on a real broker: records without headers go through produce_batch in
runs, the others one by one, and every record lands where `send` says, in the caller's order.

The local queue here holds 64 records and one call sends 3,000, so most runs meet a full queue
and are queued a prefix at a time: a record lost, doubled or reordered on that path shows up as
an offset that holds another record.
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


def _read(bootstrap: str, topic: str) -> dict[tuple[int, int], tuple[bytes | None, bytes | None, list]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: dict[tuple[int, int], tuple[bytes | None, bytes | None, list]] = {}
    try:
        for _ in range(600):
            for m in consumer.consume(500, 0.2):
                assert m.error() is None, m.error()
                seen[(m.partition(), m.offset())] = (m.key(), m.value(), m.headers() or [])
            if len(seen) >= RECORDS:
                break
    finally:
        consumer.close()
    return seen


@pytest.mark.parametrize("spread", [PARTITIONS, 0])
def test_every_record_lands_where_send_says_in_order(kafka_bootstrap: str, spread: int) -> None:
    topic = f"batches-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    records = _records()

    async def send() -> list[tuple[int, int]]:
        config = {"bootstrap.servers": kafka_bootstrap, "queue.buffering.max.messages": QUEUE}
        async with Producer(config) as producer:
            return await producer.send(topic, records, spread=spread)

    written = asyncio.run(send())
    assert len(set(written)) == RECORDS  # one offset each
    seen = _read(kafka_bootstrap, topic)
    assert len(seen) == RECORDS
    for (key, value, headers), where in zip(records, written, strict=True):
        assert seen[where] == (key, value, headers or [])

    by_partition = collections.defaultdict(list)
    for i, (p, o) in enumerate(written):
        by_partition[p].append((o, i))
    for rows in by_partition.values():
        assert [i for _, i in sorted(rows)] == sorted(i for _, i in rows)  # the caller's order
    keyless = {written[i][0] for i, (k, _, _) in enumerate(records) if k is None}
    if spread:
        assert len(keyless) == 1  # one call's keyless records share the partition it picked
    for n in range(3):
        key = f"k{n}".encode()
        assert len({written[i][0] for i, (k, _, _) in enumerate(records) if k == key}) == 1
