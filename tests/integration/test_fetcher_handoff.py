"""A real GroupFetcher on a real topic, its seek and commit requests hammered from other threads.

After the last request of each kind, the fetcher must act on exactly that one: the listener sees
the partition's records again from the last requested offset (and nothing fetched before it),
`on_seeked` having told it so, and the group's committed offset is the last one requested.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]

from gateway.kafka.consumer import GroupFetcher
from gateway.translate.records import Record

pytestmark = pytest.mark.integration

PARTITIONS = 3
RECORDS = 300  # per partition
HAMMER_SECONDS = 1.5
WAIT = 30.0


class _Listener:
    """Keeps, per partition, the offsets fetched since the last `on_seeked` that named it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.owned: set[int] = set()
        self.since_seek: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.seeked: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
        self.threads: set[str] = set()

    def on_assigned(self, partitions: list[int], committed: dict[int, int]) -> dict[int, int]:
        with self.cond:
            self.owned.update(partitions)
            self.cond.notify_all()
        return dict.fromkeys(partitions, 0)

    def on_revoked(self, partitions: list[int], lost: bool) -> dict[int, int]:
        with self.cond:
            self.owned.difference_update(partitions)
        return {}

    def on_records(self, records: list[Record]) -> None:
        with self.cond:
            self.threads.add(threading.current_thread().name)
            for r in records:
                self.since_seek[r.partition].append(r.offset)
            self.cond.notify_all()

    def wants_records(self) -> bool:
        return True

    def on_fetch_targets(self, ends: dict[int, int]) -> None:
        with self.cond:
            self.threads.add(threading.current_thread().name)

    def on_seeked(self, done: dict[int, int]) -> None:
        with self.cond:
            self.threads.add(threading.current_thread().name)
            for p in done:
                self.since_seek[p] = []
                self.seeked[p] += 1
            self.cond.notify_all()


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    name = f"fetcher-handoff-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])[name].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce(name, value=b"v%d" % i, partition=p)
        producer.poll(0)
    assert producer.flush(30) == 0
    yield name
    admin.delete_topics([name])[name].result(30)


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def test_last_seek_and_commit_requested_from_other_threads_win(kafka_bootstrap: str, topic: str) -> None:
    group = f"fetcher-handoff-{uuid.uuid4().hex[:8]}"
    listener = _Listener()
    fetcher = GroupFetcher({"bootstrap.servers": kafka_bootstrap}, group, topic, listener, 6000)
    rng = random.Random(7)
    final_seek = {p: rng.randrange(1, RECORDS - 1) for p in range(PARTITIONS)}
    final_commit = {p: rng.randrange(1, RECORDS) for p in range(PARTITIONS)}
    calls = {"seek": 0, "commit": 0}

    def hammer(kind: str, final: dict[int, int]) -> None:
        request = fetcher.request_seek if kind == "seek" else fetcher.request_commit
        local = random.Random(kind)
        deadline = time.monotonic() + HAMMER_SECONDS
        while time.monotonic() < deadline:
            p = local.randrange(PARTITIONS)
            offset = local.randrange(RECORDS)
            if offset != final[p]:  # the final request must be told apart from every other
                request({p: offset})
                calls[kind] += 1
        for p in local.sample(range(PARTITIONS), PARTITIONS):
            request({p: final[p]})

    fetcher.start()
    try:
        with listener.cond:
            assert listener.cond.wait_for(lambda: len(listener.owned) == PARTITIONS, WAIT), (
                f"the fetcher owns {listener.owned} after {WAIT} s"
            )
        threads = [
            threading.Thread(target=hammer, args=("seek", final_seek), name="seeker"),
            threading.Thread(target=hammer, args=("commit", final_commit), name="committer"),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(HAMMER_SECONDS + 10)
            assert not t.is_alive(), f"{t.name} did not finish"
        assert calls["seek"] > 1000 and calls["commit"] > 1000, calls

        expected = {p: list(range(final_seek[p], RECORDS)) for p in range(PARTITIONS)}
        with listener.cond:
            settled = listener.cond.wait_for(lambda: listener.since_seek == expected, WAIT)
            since = {p: (v[:3], len(v)) for p, v in listener.since_seek.items()}
            seeked = dict(listener.seeked)
            callers = set(listener.threads)
        assert settled, (
            f"wanted each partition from {final_seek} to {RECORDS}; since the last "
            f"on_seeked: (first offsets, count) {since}"
        )
        assert all(n >= 1 for n in seeked.values()), seeked
        assert len(callers) == 1 and next(iter(callers)).startswith("fetch-"), callers

        deadline = time.monotonic() + WAIT
        committed = _committed(kafka_bootstrap, group, topic)
        while committed != final_commit and time.monotonic() < deadline:
            time.sleep(0.2)  # nothing to wait on: the fetcher commits asynchronously, untold
            committed = _committed(kafka_bootstrap, group, topic)
        assert committed == final_commit
    finally:
        fetcher.stop()
