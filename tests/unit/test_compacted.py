"""Following a compacted topic (gateway.kafka.compacted), with the Kafka reader replaced by a fake
that hands batches over from its own thread as the real one does; and what the push key store
makes of the records it is handed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest

from gateway.errors import Unavailable
from gateway.kafka import compacted
from gateway.kafka import consumer as kafka_consumer
from gateway.push import auth
from gateway.push.keystore import KeyStore

Batch = list[tuple[str, int, int, bytes | None, bytes | None]]


class FakeReader:
    made: list[FakeReader] = []
    made_one = asyncio.Event()  # set on the event loop's thread, where a follower makes its reader

    def __init__(self, config: Mapping[str, Any], name: str, on_messages: Callable[[Batch], None]) -> None:
        self.config, self.name, self.on_messages = config, name, on_messages
        self.assignments: dict[tuple[str, int], int] | None = None
        self.stops = 0
        FakeReader.made.append(self)
        FakeReader.made_one.set()

    def start(self, assignments: Mapping[tuple[str, int], int]) -> None:
        self.assignments = dict(assignments)

    def stop(self) -> None:
        self.stops += 1

    def deliver(self, batch: Batch) -> None:
        """Hand `batch` over from another thread, as the reader's own thread does."""
        t = threading.Thread(target=self.on_messages, args=(batch,))
        t.start()
        t.join()


@pytest.fixture
def end(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The end offset the fake topic reports (set [0] in a test); readers made go to FakeReader.made."""
    end = [0]
    FakeReader.made.clear()
    FakeReader.made_one = asyncio.Event()
    monkeypatch.setattr(kafka_consumer, "TailReader", FakeReader)
    monkeypatch.setattr(kafka_consumer, "end_offset", lambda config, topic, partition: end[0])
    return end


def _follower(applied: list[tuple[bytes, bytes | None, int]]) -> compacted.CompactedFollower:
    return compacted.CompactedFollower(
        {"bootstrap.servers": "x"}, "t", "things", lambda k, v, o: applied.append((k, v, o)), late="too late"
    )


async def _started(follower: compacted.CompactedFollower) -> tuple[asyncio.Task[None], FakeReader]:
    task = asyncio.create_task(follower.start())
    await asyncio.wait_for(FakeReader.made_one.wait(), 1.0)
    return task, FakeReader.made[-1]


async def test_start_reads_from_the_beginning_until_the_end_it_saw(end: list[int]) -> None:
    applied: list[tuple[bytes, bytes | None, int]] = []
    follower = _follower(applied)
    end[0] = 4
    task, reader = await _started(follower)
    assert (reader.name, reader.assignments) == ("things", {("t", 0): 0})
    reader.deliver([("t", 0, 0, b"a", b"1"), ("t", 0, 1, None, b"keyless")])
    await asyncio.sleep(0.05)
    assert not task.done(), "offsets 2 and 3 are still to come"
    reader.deliver([("t", 0, 2, b"a", None), ("t", 0, 3, b"b", b"2")])
    await asyncio.wait_for(task, 1.0)
    assert applied == [(b"a", b"1", 0), (b"a", None, 2), (b"b", b"2", 3)], "keyless records are skipped"
    assert follower.applied == 3
    await follower.stop()
    await follower.stop()
    assert reader.stops == 1


async def test_an_empty_topic_is_caught_up_at_once(end: list[int]) -> None:
    follower = _follower([])
    await asyncio.wait_for(follower.start(), 1.0)
    assert follower.applied == -1
    await follower.stop()


async def test_a_topic_not_read_in_time_is_unavailable(end: list[int]) -> None:
    end[0] = 1
    follower = _follower([])
    with pytest.raises(Unavailable, match="too late"):
        await follower.start(wait=0.05)
    await follower.stop()
    assert FakeReader.made[-1].stops == 1, "stop ends the reader a failed start left running"


async def test_waits_end_once_their_offset_is_applied(end: list[int]) -> None:
    applied: list[tuple[bytes, bytes | None, int]] = []
    follower = _follower(applied)
    await follower.start()
    reader = FakeReader.made[-1]
    waits = [asyncio.create_task(follower.caught_up(o)) for o in (0, 2, 5)]
    await asyncio.sleep(0)
    reader.deliver([("t", 0, 0, b"a", b"1"), ("t", 0, 2, b"b", b"2")])  # compaction left a gap
    await asyncio.wait_for(asyncio.gather(*waits[:2]), 1.0)
    assert not waits[2].done()
    await asyncio.wait_for(follower.caught_up(1), 0.01)  # already read: no wait at all
    with pytest.raises(Unavailable, match="too late"):
        await follower.caught_up(6, wait=0.05)
    reader.deliver([("t", 0, 5, b"c", b"3")])
    await asyncio.wait_for(waits[2], 1.0)
    assert [o for _, _, o in applied] == [0, 2, 5]
    assert follower.applied == 5


async def test_what_apply_raises_ends_the_batch(end: list[int]) -> None:
    """`apply` must handle its own unreadable records (both stores do): an exception leaves
    the rest of the batch unapplied and its waiters waiting."""

    def apply(key: bytes, value: bytes | None, offset: int) -> None:
        if value == b"bad":
            raise RuntimeError("unreadable")
        seen.append(offset)

    seen: list[int] = []
    follower = compacted.CompactedFollower({}, "t", "things", apply, late="too late")
    await follower.start()
    wait = asyncio.create_task(follower.caught_up(2))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError):
        follower.apply_batch([("t", 0, 0, b"a", b"ok"), ("t", 0, 1, b"b", b"bad"), ("t", 0, 2, b"c", b"ok")])
    assert seen == [0]
    assert not wait.done()
    follower.apply_batch([("t", 0, 3, b"d", b"ok")])
    await asyncio.wait_for(wait, 1.0)


def test_the_key_store_applies_keys_and_tombstones_and_skips_unreadable_ones() -> None:
    none = cast(Any, None)
    store = KeyStore(none, none, {}, "p", None, rotation_hours=24)
    old, new = auth.new_key(1), auth.new_key(2)
    store._follower.apply_batch(
        [
            ("k", 0, 0, old.kid.encode(), auth.encode_key(old)),
            ("k", 0, 1, b"junk", b"{not json"),
            ("k", 0, 2, None, auth.encode_key(new)),
            ("k", 0, 3, new.kid.encode(), auth.encode_key(new)),
            ("k", 0, 4, b"mismatch", auth.encode_key(new).replace(new.kid.encode(), b"other")),
        ]
    )
    assert sorted(k.kid for k in store._keys.values()) == sorted([old.kid, new.kid])
    store._follower.apply_batch([("k", 0, 5, old.kid.encode(), None)])
    assert list(store._keys) == [new.kid]
    assert store._follower.applied == 5
