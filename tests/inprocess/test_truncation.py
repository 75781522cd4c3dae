"""The seed API's truncation in the core (gateway/core/truncation.py, docs/truncation.md), on a
real broker: TruncateSubscription, its event (taken, leased, nacked, expired, acked), and the
TruncationPolicy's max_age_seconds and max_bytes applied by the partitions' owner.

The legacy servicers are not part of these tests: subscriptions are made through the v1 core,
with the policy written into their records as CreateSubscription's truncation_policy would."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.core import runner as runner_module
from gateway.core.runner import Delivery
from gateway.core.truncation import TruncationService
from gateway.errors import InvalidArgument
from gateway.kafka import consumer as consumer_module
from gateway.translate import ackids
from gateway.translate.limits import OutgoingMessage
from gateway.translate.meta import SubscriptionMeta
from tests.inprocess.conftest import InProcessGateway, wait_for

Names = Callable[..., str]


def _setup(gw: InProcessGateway, names: Names, suffix: str = "", **policy: int) -> tuple[str, str]:
    topic, sub = names("topics", suffix), names("subscriptions", suffix)
    gw.run(gw.gateway.topics.create(pb.Topic(name=topic)))
    gw.run(gw.gateway.subscriptions.create(pb.Subscription(name=sub, topic=topic, ack_deadline_seconds=30)))
    if policy:

        def with_policy(meta: SubscriptionMeta) -> SubscriptionMeta:
            return dataclasses.replace(meta, **policy)

        gw.run(gw.gateway.store.change_subscription(sub, with_policy))
    return topic, sub


def _publish(gw: InProcessGateway, topic: str, texts: list[str], size: int = 0) -> None:
    messages = [OutgoingMessage(t.encode().ljust(size, b"."), {"n": t}, "") for t in texts]
    gw.run(gw.gateway.topics.publish(topic, messages))


def _pull(gw: InProcessGateway, sub: str, count: int, timeout: float = 30.0) -> list[Delivery]:
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += gw.run(gw.gateway.delivery.pull(sub, count - len(got), 2.0))
    return got


def _texts(deliveries: list[Delivery]) -> set[str]:
    return {dict(d.record.headers or [])["n"].decode() for d in deliveries}  # type: ignore[union-attr]


def _adopted(gw: InProcessGateway, sub: str) -> bool:
    """Whether this process's runner of `sub` is in the subscription's current epoch (the
    truncation's checkpoints reach it through the lease/ack log)."""
    epoch = gw.gateway.store.require("subscription", sub).meta.epoch
    runner = gw.gateway.delivery._runners.get(sub)  # no public view of its states
    return runner is not None and all(s.epoch >= epoch for s in runner.states.values())


def test_truncate_drops_the_backlog_and_delivers_one_event_until_acked(
    gw: InProcessGateway, names: Names
) -> None:
    topic, sub = _setup(gw, names)
    trunc: TruncationService = gw.gateway.truncation
    assert gw.run(trunc.take_event(sub, 10)) is None and trunc.pending(sub) == 0
    _publish(gw, topic, [f"old{i}" for i in range(5)])
    old = _pull(gw, sub, 5)
    assert _texts(old) == {f"old{i}" for i in range(5)}

    gw.run(trunc.truncate(sub))
    assert trunc.pending(sub) == 1
    assert _adopted(gw, sub), "truncate returns once the partitions' owner took the new epoch"
    # The old deliveries' leases are gone with the backlog: nacked, nothing comes back.
    gw.run(gw.gateway.delivery.modify_ack_deadline(sub, [d.ack_id for d in old], 0))
    assert gw.run(gw.gateway.delivery.pull(sub, 10, 1.0)) == []

    # The event: taken once per lease, back after a nack, and v1 never takes its id for its own.
    event = gw.run(trunc.take_event(sub, 30))
    assert event is not None and ackids.decode_event(event).seq == 1
    assert gw.run(trunc.take_event(sub, 30)) is None
    with pytest.raises(InvalidArgument):
        gw.run(gw.gateway.delivery.acknowledge(sub, [event]))
    gw.run(trunc.settle(sub, [event], 0))  # Nack
    assert gw.run(trunc.take_event(sub, 1)) == event
    # ... and after its deadline passed (1 s)
    assert gw.run(trunc.take_event(sub, 1)) is None
    wait_for("the lease expires", lambda: gw.run(trunc.take_event(sub, 30)) == event, seconds=5.0)
    gw.run(trunc.settle(sub, [event], 60))  # ModifyAckDeadline: still ours
    assert gw.run(trunc.take_event(sub, 30)) is None

    # Messages published after the truncation are delivered.
    _publish(gw, topic, [f"new{i}" for i in range(3)])
    new = _pull(gw, sub, 3)
    assert _texts(new) == {f"new{i}" for i in range(3)}
    gw.run(gw.gateway.delivery.acknowledge(sub, [d.ack_id for d in new]))

    # The ack clears it; acking again, or an id of another subscription, changes nothing.
    gw.run(trunc.settle(sub, [event], None))
    assert trunc.pending(sub) == 0 and gw.run(trunc.take_event(sub, 30)) is None
    gw.run(trunc.settle(sub, [event, ackids.encode_event("0000beef", 9)], None))
    meta = gw.gateway.store.require("subscription", sub).meta
    assert (meta.legacy_truncations, meta.legacy_truncations_acked) == (1, 1)
    with pytest.raises(InvalidArgument):
        gw.run(trunc.settle(sub, ["trunc:nonsense"], None))


def test_truncations_before_an_ack_coalesce_into_the_latest(gw: InProcessGateway, names: Names) -> None:
    topic, sub = _setup(gw, names)
    trunc: TruncationService = gw.gateway.truncation
    gw.run(trunc.truncate(sub))
    first = gw.run(trunc.take_event(sub, 30))
    gw.run(trunc.truncate(sub))
    gw.run(trunc.truncate(sub))
    assert trunc.pending(sub) == 3
    latest = gw.run(trunc.take_event(sub, 30))  # a newer event: not held back by the older one's lease
    assert first is not None and latest is not None and ackids.decode_event(latest).seq == 3
    assert gw.run(trunc.take_event(sub, 30)) is None
    with pytest.raises(InvalidArgument):  # checked before anything, as ModifyAckDeadline's
        gw.run(trunc.settle(sub, [ackids.encode_event("0000beef", 1)], 601))
    with pytest.raises(InvalidArgument):
        gw.run(trunc.take_event(sub, 601))
    gw.run(trunc.settle(sub, [first], None))  # acking the older event leaves the newer pending
    assert trunc.pending(sub) == 3
    gw.run(trunc.settle(sub, [latest], None))
    assert trunc.pending(sub) == 0
    _publish(gw, topic, ["after"])
    assert _texts(_pull(gw, sub, 1)) == {"after"}


def test_max_age_drops_messages_held_and_fetched_too_old(gw: InProcessGateway, names: Names) -> None:
    topic, sub = _setup(gw, names, legacy_truncate_max_age_seconds=2)
    trunc: TruncationService = gw.gateway.truncation
    # The runner first (its group's join takes ~3 s): the messages must be young when fetched.
    assert gw.run(gw.gateway.delivery.pull(sub, 1, 5.0)) == []
    _publish(gw, topic, [f"m{i}" for i in range(4)])
    held = _pull(gw, sub, 4)  # leased, never acked: dropped when 2 s old (checked every second)
    assert len(held) == 4
    wait_for("an event", lambda: trunc.pending(sub) == 1)
    gw.run(gw.gateway.delivery.modify_ack_deadline(sub, [d.ack_id for d in held], 0))
    assert gw.run(gw.gateway.delivery.pull(sub, 10, 1.0)) == []
    _publish(gw, topic, ["young"])
    young = _pull(gw, sub, 1)
    assert _texts(young) == {"young"}
    gw.run(gw.gateway.delivery.acknowledge(sub, [d.ack_id for d in young]))

    # Messages already too old when a runner first fetches them are never delivered.
    topic2, sub2 = _setup(gw, names, "-2", legacy_truncate_max_age_seconds=1)
    _publish(gw, topic2, ["stale"])
    time.sleep(1.1)
    assert gw.run(gw.gateway.delivery.pull(sub2, 10, 2.0)) == []
    wait_for("an event", lambda: trunc.pending(sub2) == 1)


def test_max_bytes_drops_the_oldest_until_under(gw: InProcessGateway, names: Names) -> None:
    topic, sub = _setup(gw, names, legacy_truncate_max_bytes=1000)
    trunc: TruncationService = gw.gateway.truncation
    # 10 messages of 300 bytes of data and 3 of attributes ("n" = "mI"): 303 bytes stored each,
    # so 3 fit under 1000.
    _publish(gw, topic, [f"m{i}" for i in range(10)], size=300)
    first = _pull(gw, sub, 1)  # starts the runner; the oldest, leased, goes too
    assert _texts(first) == {"m0"}
    wait_for("an event", lambda: trunc.pending(sub) >= 1)
    rest = _pull(gw, sub, 3)
    assert _texts(rest) == {"m7", "m8", "m9"}
    assert gw.run(gw.gateway.delivery.pull(sub, 10, 1.0)) == []
    gw.run(gw.gateway.delivery.acknowledge(sub, [d.ack_id for d in rest]))
    assert trunc.pending(sub) == 1  # under max_bytes since: no more events


def test_concurrent_raises_and_truncations_are_all_counted(gw: InProcessGateway, names: Names) -> None:
    """Every write of the counts is a compare-and-set retried on the version that won: none of
    three concurrent ones undoes another."""
    _, sub = _setup(gw, names)
    trunc: TruncationService = gw.gateway.truncation
    epoch = gw.gateway.store.require("subscription", sub).meta.epoch

    async def together() -> None:
        await asyncio.gather(trunc.raise_event(sub), trunc.truncate(sub), trunc.raise_event(sub))

    gw.run(together())
    meta = gw.gateway.store.require("subscription", sub).meta
    assert (meta.legacy_truncations, meta.epoch) == (3, epoch + 1)


def test_a_seek_still_starts_an_epoch_that_redelivers(gw: InProcessGateway, names: Names) -> None:
    """Seek shares the epoch's start with truncation (SnapshotService.start_epoch)."""
    topic, sub = _setup(gw, names)
    _publish(gw, topic, ["a", "b"])
    first = _pull(gw, sub, 2)
    gw.run(gw.gateway.delivery.acknowledge(sub, [d.ack_id for d in first]))
    gw.run(gw.gateway.snapshots.seek_to_time(sub, 0))
    meta = gw.gateway.store.require("subscription", sub).meta
    assert meta.epoch == 1 and meta.legacy_truncations == 0
    assert _texts(_pull(gw, sub, 2)) == {"a", "b"}


def test_max_bytes_counts_what_is_not_fetched_yet(
    gw: InProcessGateway, names: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fetching paused (a backlog beyond the prefetch: made small here), the owner asks
    Kafka where its partitions end and counts the unfetched records at the held average, and
    drops the oldest of those too."""
    monkeypatch.setattr(runner_module, "PREFETCH_HIGH", 4)
    monkeypatch.setattr(runner_module, "PREFETCH_LOW", 2)
    monkeypatch.setattr(consumer_module, "BATCH", 2)  # so that a fetch takes 2, not all 20
    topic, sub = _setup(gw, names, legacy_truncate_max_bytes=1000)
    trunc: TruncationService = gw.gateway.truncation
    _publish(gw, topic, [f"m{i}" for i in range(20)], size=300)  # 303 bytes stored each
    assert _texts(_pull(gw, sub, 1)) == {"m0"}
    wait_for("an event", lambda: trunc.pending(sub) >= 1)
    runner = gw.gateway.delivery._runners[sub]  # no public view of what it asked Kafka
    assert runner._truncation._ends[1], "the partitions' ends were never asked: nothing was unfetched"
    assert _texts(_pull(gw, sub, 3)) == {"m17", "m18", "m19"}
    assert gw.run(gw.gateway.delivery.pull(sub, 10, 1.0)) == []
