"""Concurrent writes of one resource (core/resources.py), with the log played by hand: the test
decides when the records written so far are read back, so interleavings that a broker makes
only now and then happen every time. What must hold: no write its writer was told succeeded is
undone, and the newest record of each key, read alone (as after compaction), gives what every
process holds."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.core import resources
from gateway.core.resources import Resource, ResourceStore, StoredSubscription
from gateway.errors import Aborted, AlreadyExists, NotFound, Unavailable
from gateway.translate.meta import SubscriptionMeta

NAME = "projects/p/subscriptions/s"


class HandLog:
    """One partition written by `send` and read back only when the test says (`deliver`)."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.delivered = 0
        self.store: ResourceStore | None = None
        # Records whose value `hold` picks wait for `gate` before they are written.
        self.hold: Callable[[bytes | None], bool] = lambda value: False
        self.gate = asyncio.Event()

    async def send(
        self, topic: str, records: list[Any], partition: int | None = None
    ) -> list[tuple[int, int]]:
        out = []
        for key, value, _headers in records:
            if self.hold(value):
                await self.gate.wait()
            out.append((0, len(self.records)))
            self.records.append((key, value))
        return out

    def deliver(self) -> int:
        """Read back everything written so far, in one batch; how many records that was."""
        assert self.store is not None
        batch = [("r", 0, i, k, v) for i, (k, v) in enumerate(self.records) if i >= self.delivered]
        self.delivered = len(self.records)
        if batch:
            self.store._follower.apply_batch(batch)
        return len(batch)

    def newest(self) -> dict[bytes, bytes | None]:
        """Each key's newest record: what compaction keeps."""
        return dict(self.records)


def _store(log: HandLog) -> ResourceStore:
    none = cast(Any, None)
    store = ResourceStore(none, cast(Any, log), {}, "r", 1)
    store._loop = asyncio.get_running_loop()
    store._follower._loop = store._loop
    log.store = store
    return store


def _sub(op: str = "") -> StoredSubscription:
    meta = SubscriptionMeta(uid="u", kafka_topic="t", partitions=1, log_topic="l", group_id="g")
    return Resource(NAME, pubsub_pb2.Subscription(name=NAME, topic="projects/p/topics/t"), meta, op)


async def _run(log: HandLog, *writes: Awaitable[Any]) -> list[Any]:
    """Run `writes` together, reading the log back whenever all of them wait for it."""
    tasks = [asyncio.ensure_future(w) for w in writes]
    for _ in range(1000):
        await _settled()  # every task goes as far as it can without the log
        if all(t.done() for t in tasks):
            break
        log.deliver()
    return await asyncio.gather(*tasks, return_exceptions=True)


def _replacing(store: ResourceStore, held: StoredSubscription, field: str) -> asyncio.Future[None]:
    """A compare-and-set of `held` (by its op) raising `field`, started."""
    return asyncio.ensure_future(
        store.replace(dataclasses.replace(held, meta=_raise(field)(held.meta)), held.op)
    )


def _fresh_reader(log: HandLog) -> ResourceStore:
    """A process started after compaction: it reads each key's newest record only."""
    other = HandLog()
    other.records = list(log.newest().items())
    store = _store(other)
    other.deliver()
    return store


def _raise(field: str) -> Callable[[SubscriptionMeta], SubscriptionMeta]:
    return lambda meta: dataclasses.replace(meta, **{field: getattr(meta, field) + 1})


@pytest.mark.parametrize("writers", [2, 3, 5])
async def test_concurrent_compare_and_set_changes_are_all_kept(writers: int) -> None:
    """Each writer raises a count; the losers are retried on the version that won. The one
    that lost to a record later than its own once rewrote the held version as a plain record,
    undoing a retry applied in between (seen: three concurrent truncation writes counted two)."""
    log = HandLog()
    store = _store(log)
    await _run(log, store.create(_sub()))
    fields = ["legacy_truncations", "epoch", "legacy_truncations_acked", "last_active_ms", "created_ms"]
    outcomes = await _run(log, *(store.change_subscription(NAME, _raise(f)) for f in fields[:writers]))
    assert not [o for o in outcomes if isinstance(o, BaseException)]
    meta = store.require("subscription", NAME).meta
    assert [getattr(meta, f) for f in fields[:writers]] == [1] * writers
    assert _fresh_reader(log).require("subscription", NAME) == store.require("subscription", NAME)


async def test_one_count_raised_by_many_writers_counts_every_one() -> None:
    log = HandLog()
    store = _store(log)
    await _run(log, store.create(_sub()))
    outcomes = await _run(log, *(store.change_subscription(NAME, _raise("epoch")) for _ in range(6)))
    assert not [o for o in outcomes if isinstance(o, BaseException)]
    assert store.require("subscription", NAME).meta.epoch == 6
    assert _fresh_reader(log).require("subscription", NAME).meta.epoch == 6


async def test_an_update_of_the_proto_keeps_a_count_raised_meanwhile() -> None:
    """UpdateSubscription changes the proto over the version held when it writes (`change`); it
    once wrote back the whole record it had read, undoing a Seek's epoch raised meanwhile."""
    log = HandLog()
    store = _store(log)
    await _run(log, store.create(_sub()))
    held = store.require("subscription", NAME)

    def deadline(res: StoredSubscription) -> StoredSubscription:
        proto = pubsub_pb2.Subscription()
        proto.CopyFrom(res.proto)
        proto.ack_deadline_seconds = 42
        return dataclasses.replace(res, proto=proto)

    outcomes = await _run(log, store.change(held, deadline), store.change_subscription(NAME, _raise("epoch")))
    assert not [o for o in outcomes if isinstance(o, BaseException)]
    for seen in (store, _fresh_reader(log)):
        res = seen.require("subscription", NAME)
        assert (res.proto.ack_deadline_seconds, res.meta.epoch) == (42, 1)


async def test_a_create_that_lost_does_not_undo_the_winners_next_change() -> None:
    """The losing create rewrites the winner so that compaction keeps it. Its rewrite is held
    back here until the winner's process has changed the winner: that change must survive."""
    log = HandLog()
    store = _store(log)
    log.hold = lambda value: value is not None and b'"op":"win"' in value and b'"create":false' in value
    winner = asyncio.ensure_future(store.create(_sub("win")))
    loser = asyncio.ensure_future(store.create(_sub("lose")))
    await _settled()
    log.deliver()  # both creates read back: the winner's came first
    await _settled()
    assert winner.done() and not winner.exception() and not loser.done()
    [changed] = await _run(log, store.change_subscription(NAME, _raise("epoch")))
    assert changed.meta.epoch == 1
    log.gate.set()  # now the loser's rewrite is written
    outcomes = await _run(log, loser)
    assert isinstance(outcomes[0], AlreadyExists)
    assert store.require("subscription", NAME).meta.epoch == 1
    assert _fresh_reader(log).require("subscription", NAME).meta.epoch == 1


async def test_a_change_that_lost_to_a_delete_leaves_the_resource_deleted_after_compaction() -> None:
    log = HandLog()
    store = _store(log)
    await _run(log, store.create(_sub()))
    outcomes = await _run(
        log, store.delete("subscription", NAME), store.change_subscription(NAME, _raise("epoch"))
    )
    assert outcomes[0] is None
    assert store.get("subscription", NAME) is None
    assert _fresh_reader(log).get("subscription", NAME) is None


async def test_a_create_after_a_delete_survives_the_clean_up_of_a_change_read_before_it() -> None:
    """A change read before a delete is written after it and so is not applied; a create of the
    name comes before that change's writer cleans up. The clean-up once was a tombstone, which
    deleted the new resource after its create had succeeded."""
    log = HandLog()
    store = _store(log)
    await _run(log, store.create(_sub("old")))
    held = store.require("subscription", NAME)
    gone = asyncio.ensure_future(store.delete("subscription", NAME))
    stale = _replacing(store, held, "epoch")
    await _settled()  # both written, neither read back yet: the delete first
    log.hold = lambda value: True  # the change's clean-up waits
    log.deliver()
    await _settled()
    assert gone.done() and store.get("subscription", NAME) is None and not stale.done()
    log.hold = lambda value: False
    assert (await _run(log, store.create(_sub("new"))))[0].op == "new"
    log.gate.set()
    outcomes = await _run(log, stale)
    assert isinstance(outcomes[0], Aborted)
    assert store.require("subscription", NAME).op == "new"
    assert _fresh_reader(log).require("subscription", NAME).op == "new"


async def test_a_write_is_told_it_won_even_when_a_rewrite_of_it_that_lost_comes_first() -> None:
    """Another process changes our version and rewrites it (a clean-up that lost); both are read
    in the batch after ours, before our writer looks: the rewrite, which carries our version's
    op, must not make our writer think its own write lost (it would retry it: counted twice)."""
    log = HandLog()
    store = _store(log)
    await _run(log, store.create(_sub("a")))
    held = store.require("subscription", NAME)
    ours = _replacing(store, held, "epoch")
    await _settled()
    written, _ = Resource.decode(cast(bytes, log.records[-1][1]))
    theirs = dataclasses.replace(written, op="y", base=written.op, meta=_raise("created_ms")(written.meta))
    rewrite = dataclasses.replace(written, base=written.op)
    log.records += [
        (theirs.key(), theirs.encode(create=False)),
        (rewrite.key(), rewrite.encode(create=False)),
    ]
    start = log.delivered
    store._follower.apply_batch([("r", 0, start, *log.records[start])])
    store._follower.apply_batch([("r", 0, i, *log.records[i]) for i in range(start + 1, len(log.records))])
    log.delivered = len(log.records)
    assert (await _run(log, ours)) == [None]
    assert store.require("subscription", NAME).op == "y"


async def test_a_loser_left_by_a_writer_that_died_is_settled_by_the_sweep() -> None:
    """A process that wrote a losing change and died before its clean-up leaves the loser as
    the newest record: a process started after compaction would hold the loser's version, which
    its writer never saw succeed, while the running ones hold another. Any process's sweep
    writes the clean-up once the key has been so for SETTLE_GRACE_SECONDS."""
    log = HandLog()
    store = _store(log)
    await _run(log, store.create(_sub("a")))
    held = store.require("subscription", NAME)
    await _run(log, store.change_subscription(NAME, _raise("epoch")))  # the version now: epoch 1
    dead = dataclasses.replace(held, op="dead", base="a", meta=_raise("created_ms")(held.meta))
    log.records.append((dead.key(), dead.encode(create=False)))  # read "a", lost, then died
    log.deliver()
    assert store.require("subscription", NAME).meta.created_ms == 0
    assert _fresh_reader(log).require("subscription", NAME).meta.created_ms == 1  # the loser
    start = asyncio.get_running_loop().time()
    await _run(log, store.sweep_once(start))  # too soon: the writer may still be at it
    assert log.records[-1][1] == dead.encode(create=False)
    await _run(log, store.sweep_once(start + resources.SETTLE_GRACE_SECONDS))
    for seen in (store, _fresh_reader(log)):
        assert (
            seen.require("subscription", NAME).meta.epoch,
            seen.require("subscription", NAME).meta.created_ms,
        ) == (
            1,
            0,
        )


async def test_a_clean_up_that_kafka_refuses_is_left_to_the_sweep() -> None:
    """The loser's writer is told ABORTED as it should be, not the clean-up's UNAVAILABLE; the
    sweep writes the clean-up later."""
    log = HandLog()
    store = _store(log)
    await _run(log, store.create(_sub("a")))
    held = store.require("subscription", NAME)
    first = _replacing(store, held, "epoch")
    second = _replacing(store, held, "created_ms")
    await _settled()
    failing = HandLog.send

    async def refuse(self: HandLog, topic: str, records: list[Any], partition: int | None = None) -> Any:
        raise Unavailable("Kafka did not confirm the write")

    HandLog.send = refuse  # type: ignore[method-assign]
    try:
        outcomes = await _run(log, first, second)
    finally:
        HandLog.send = failing  # type: ignore[method-assign]
    assert outcomes[0] is None and isinstance(outcomes[1], Aborted)
    assert _fresh_reader(log).require("subscription", NAME).meta.created_ms == 1  # the loser, newest
    await _run(log, store.sweep_once(asyncio.get_running_loop().time() + resources.SETTLE_GRACE_SECONDS))
    fresh = _fresh_reader(log).require("subscription", NAME).meta
    assert (fresh.epoch, fresh.created_ms) == (1, 0)


async def test_a_change_of_a_resource_deleted_meanwhile_writes_nothing() -> None:
    """A topic's deletion marks its subscriptions by `change`; one deleted in between stays
    deleted (the plain write used before wrote it back), and the caller is told NOT_FOUND."""
    log = HandLog()
    store = _store(log)
    await _run(log, store.create(_sub()))
    held = store.require("subscription", NAME)
    await _run(log, store.delete("subscription", NAME))
    written = len(log.records)
    [outcome] = await _run(
        log, store.change(held, lambda res: dataclasses.replace(res, meta=_raise("epoch")(res.meta)))
    )
    assert isinstance(outcome, NotFound)
    assert len(log.records) == written
    assert store.get("subscription", NAME) is None


async def _settled() -> None:
    for _ in range(20):
        await asyncio.sleep(0)
