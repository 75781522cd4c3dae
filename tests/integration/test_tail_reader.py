"""A real TailReader on a real topic: what is written reaches its owner without waiting out the
reader's idle wait, a linger gathers what comes close together into one hand-over, and nothing
is handed over once `stop` has returned.

The idle wait is raised to 30 s here, so a reader that waited it out (as `consume` alone does
for a batch it cannot fill) fails these tests rather than making them slow.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]

from gateway.kafka import consumer as kafka_consumer
from gateway.kafka.consumer import TailReader

pytestmark = pytest.mark.integration

IDLE_WAIT = 30.0
WAIT = 10.0  # well under IDLE_WAIT, well over a fetch
Batch = list[tuple[str, int, int, bytes | None, bytes | None]]


class _Owner:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.batches: list[Batch] = []

    def on_messages(self, batch: Batch) -> None:
        with self.cond:
            self.batches.append(batch)
            self.cond.notify_all()

    def values(self) -> list[bytes | None]:
        with self.cond:
            return [v for b in self.batches for *_, v in b]

    def wait_for(self, n: int, within: float) -> list[bytes | None]:
        with self.cond:
            self.cond.wait_for(lambda: sum(map(len, self.batches)) >= n, within)
        return self.values()


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    name = f"tail-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    yield name
    admin.delete_topics([name])[name].result(30)


@pytest.fixture(autouse=True)
def long_idle_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_consumer, "TAIL_POLL_SECONDS", IDLE_WAIT)


def _write(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        producer.produce(topic, value=v, key=b"k", partition=0)
    assert producer.flush(30) == 0


def _started(bootstrap: str, topic: str, owner: _Owner, linger: float = 0.0) -> TailReader:
    reader = TailReader({"bootstrap.servers": bootstrap}, "test", owner.on_messages, linger_seconds=linger)
    reader.start({(topic, 0): 0})
    return reader


def test_a_record_reaches_the_owner_without_the_idle_wait(kafka_bootstrap: str, topic: str) -> None:
    owner = _Owner()
    reader = _started(kafka_bootstrap, topic, owner)
    try:
        time.sleep(1.0)  # the reader is in its idle wait, its partition assigned and fetched
        _write(kafka_bootstrap, topic, [b"one"])
        assert owner.wait_for(1, WAIT) == [b"one"]
        _write(kafka_bootstrap, topic, [b"two"])  # and again, in the next turn's wait
        assert owner.wait_for(2, WAIT) == [b"one", b"two"]
    finally:
        reader.stop()


def test_a_linger_gathers_records_that_come_close_together(kafka_bootstrap: str, topic: str) -> None:
    owner = _Owner()
    reader = _started(kafka_bootstrap, topic, owner, linger=2.0)
    try:
        time.sleep(1.0)
        _write(kafka_bootstrap, topic, [b"a"])
        time.sleep(0.3)  # within the linger that "a" began
        _write(kafka_bootstrap, topic, [b"b", b"c"])
        assert owner.wait_for(3, WAIT) == [b"a", b"b", b"c"]
        with owner.cond:
            assert len(owner.batches) == 1
    finally:
        reader.stop()


def test_nothing_is_handed_over_once_stop_has_returned(kafka_bootstrap: str, topic: str) -> None:
    owner = _Owner()
    reader = _started(kafka_bootstrap, topic, owner)
    time.sleep(1.0)
    stopper = threading.Thread(target=reader.stop)
    stopper.start()  # it waits for the reader's thread, itself in its 30 s wait
    time.sleep(0.5)
    _write(kafka_bootstrap, topic, [b"late"])  # ends that wait: the thread leaves without it
    stopper.join(WAIT)
    assert not stopper.is_alive() and not reader._thread.is_alive()
    assert owner.values() == []
    reader.stop()  # idempotent
