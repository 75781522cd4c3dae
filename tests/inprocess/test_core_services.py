"""The core services on a real broker, called directly in this process: topics, the resource
store, delivery (pull, ack, modack), stream sessions and the subscription runner behind them."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable

import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.core.lease_log import Recovered
from gateway.core.runner import Delivery
from gateway.core.streams import StreamOutput
from gateway.errors import AckIdsFailed, AlreadyExists, InvalidArgument, NotFound
from gateway.leases.commands import Ack, Command, SetDeadline
from gateway.translate.limits import OutgoingMessage
from gateway.translate.records import message_id
from tests.inprocess.conftest import InProcessGateway, settings_for

Names = Callable[..., str]


def _setup(gw: InProcessGateway, names: Names, **subscription: object) -> tuple[str, str]:
    topic, sub = names("topics"), names("subscriptions")
    gw.run(gw.gateway.topics.create(pb.Topic(name=topic)))
    gw.run(gw.gateway.subscriptions.create(pb.Subscription(name=sub, topic=topic, **subscription)))
    return topic, sub


def _publish(gw: InProcessGateway, topic: str, texts: list[str], key: str = "") -> list[str]:
    messages = [OutgoingMessage(t.encode(), {"n": t}, key) for t in texts]
    return gw.run(gw.gateway.topics.publish(topic, messages))


def _pull_all(gw: InProcessGateway, sub: str, count: int, timeout: float = 30.0) -> list[Delivery]:
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += gw.run(gw.gateway.delivery.pull(sub, count - len(got), 2.0))
    return got


async def _read(batches: AsyncIterator[StreamOutput], count: int, patience: float) -> list[Delivery]:
    """A stream's deliveries until there are at least `count`, waiting up to `patience` s for each
    of its responses."""
    got: list[Delivery] = []
    while len(got) < count:
        got += (await asyncio.wait_for(anext(batches), patience)).deliveries
    return got


def test_topics_and_subscriptions_are_created_once_and_found(gw: InProcessGateway, names: Names) -> None:
    topic, sub = _setup(gw, names)
    assert gw.gateway.store.get("topic", topic) is not None
    assert gw.gateway.subscriptions.get(sub).proto.topic == topic
    with pytest.raises(AlreadyExists):
        gw.run(gw.gateway.topics.create(pb.Topic(name=topic)))
    with pytest.raises(NotFound):
        gw.gateway.topics.get(names("topics", "-missing"))
    with pytest.raises(InvalidArgument):
        gw.run(gw.gateway.topics.create(pb.Topic(name="projects/p/topics/goog-reserved")))


def test_pull_ack_and_modack_zero_through_the_delivery_service(gw: InProcessGateway, names: Names) -> None:
    topic, sub = _setup(gw, names, ack_deadline_seconds=60)
    ids = _publish(gw, topic, [f"m{i}" for i in range(30)])
    assert len(set(ids)) == 30

    first = _pull_all(gw, sub, 30)
    assert sorted(d.record.value for d in first) == sorted(f"m{i}".encode() for i in range(30))
    assert sorted(message_id(d.record.partition, d.record.offset) for d in first) == sorted(ids)

    # Ack 20, hand 10 back with a zero deadline: exactly those 10 come again.
    acked, returned = first[:20], first[20:]
    gw.run(gw.gateway.delivery.acknowledge(sub, [d.ack_id for d in acked]))
    gw.run(gw.gateway.delivery.modify_ack_deadline(sub, [d.ack_id for d in returned], 0))
    again = _pull_all(gw, sub, 10)
    assert sorted(d.record.value for d in again) == sorted(d.record.value for d in returned)
    assert {d.ack_id for d in again}.isdisjoint(d.ack_id for d in returned)  # new leases

    gw.run(gw.gateway.delivery.acknowledge(sub, [d.ack_id for d in again]))
    assert gw.run(gw.gateway.delivery.pull(sub, 10, 1.0)) == []


def test_a_stream_session_delivers_within_its_outstanding_limit(gw: InProcessGateway, names: Names) -> None:
    topic, sub = _setup(gw, names, ack_deadline_seconds=30)
    _publish(gw, topic, [f"s{i}" for i in range(25)])
    delivery = gw.gateway.delivery

    async def read(limit: int) -> tuple[list[Delivery], list[Delivery]]:
        session = await delivery.open_stream(sub, 30, limit, 0)
        batches = session.batches()
        try:
            first = await _read(batches, limit, 20)  # up to the limit, and then nothing until acks
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(batches), 1.5)
            # (a pending anext of an async generator cannot be resumed after its cancellation)
        finally:
            session.release()
        await delivery.acknowledge(sub, [d.ack_id for d in first])
        session = await delivery.open_stream(sub, 30, 0, 0)
        batches = session.batches()
        try:
            rest = await _read(batches, 25 - limit, 20)
        finally:
            await batches.aclose()
            session.release()
        await delivery.acknowledge(sub, [d.ack_id for d in rest])
        return first, rest

    first, rest = gw.run(read(10))
    assert len(first) == 10
    assert sorted(d.record.value for d in first + rest) == sorted(f"s{i}".encode() for i in range(25))


def test_run_ahead_widens_clients_streams_only(gw: InProcessGateway, names: Names) -> None:
    """--stream-run-ahead 3: a client's stream that asked for 2 holds 6; the gateway's own
    sessions (push asks for its window) hold exactly what they asked for."""
    topic, sub = _setup(gw, names, ack_deadline_seconds=30)
    _publish(gw, topic, [f"r{i}" for i in range(20)])
    delivery = gw.gateway.delivery

    async def hold(client: bool) -> list[Delivery]:
        session = await delivery.open_stream(sub, 30, 2, 0, client=client)
        batches = session.batches()
        try:
            got = await _read(batches, 6 if client else 2, 20)
            with pytest.raises(TimeoutError):  # and nothing more until acks
                await asyncio.wait_for(anext(batches), 1.5)
        finally:
            session.release()
        await delivery.acknowledge(sub, [d.ack_id for d in got])
        return got

    strict = delivery._settings
    delivery._settings = dataclasses.replace(strict, stream_run_ahead=3.0)
    try:
        assert len(gw.run(hold(client=False))) == 2
        assert len(gw.run(hold(client=True))) == 6
    finally:
        delivery._settings = strict


def test_a_stream_counts_a_message_it_gets_again_once(gw: InProcessGateway, names: Names) -> None:
    """A lease that runs out tells no stream: the message may come back on the stream that
    still counts it as outstanding. It must count once, or the stream has less room after."""
    topic, sub = _setup(gw, names, ack_deadline_seconds=10)
    _publish(gw, topic, ["a", "b"])
    delivery = gw.gateway.delivery

    async def read() -> tuple[list[Delivery], list[Delivery], list[Delivery]]:
        session = await delivery.open_stream(sub, 10, 3, 0)  # room for 3: never full below
        batches = session.batches()
        try:
            first = await _read(batches, 2, 20)
            again = await _read(batches, 2, 30)  # not acked: back after their 10 s, on this same stream
            await delivery.acknowledge(sub, [d.ack_id for d in again])
            await gw.gateway.topics.publish(topic, [OutgoingMessage(t.encode(), {}, "") for t in "cde"])
            later = await _read(batches, 3, 5)  # the stream's whole room again: 3 at once
        finally:
            await batches.aclose()
            session.release()
        await delivery.acknowledge(sub, [d.ack_id for d in later])
        return first, again, later

    first, again, later = gw.run(read())
    assert sorted(d.record.value for d in again) == [b"a", b"b"] == sorted(d.record.value for d in first)
    assert {d.ack_id for d in again}.isdisjoint(d.ack_id for d in first)  # new leases
    assert sorted(d.record.value for d in later) == [b"c", b"d", b"e"]


def test_a_full_stream_gets_its_expired_messages_back_when_they_expire(
    gw: InProcessGateway, names: Names
) -> None:
    """A stream at its outstanding limit looks for deliveries that ended unheard (here: leases
    that ran out) when the clock wakes it, not only every PRUNE_SECONDS: the messages come
    back on it as their leases end, not a heartbeat or more later."""
    topic, sub = _setup(gw, names, ack_deadline_seconds=10)
    _publish(gw, topic, ["a", "b"])
    delivery = gw.gateway.delivery

    async def read() -> tuple[list[Delivery], list[Delivery], float]:
        session = await delivery.open_stream(sub, 10, 2, 0)  # full with both out
        batches = session.batches()
        try:
            first = await _read(batches, 2, 20)
            out_at = time.monotonic()
            again = await _read(batches, 2, 30)
            waited = time.monotonic() - out_at
        finally:
            await batches.aclose()
            session.release()
        await delivery.acknowledge(sub, [d.ack_id for d in again])
        return first, again, waited

    first, again, waited = gw.run(read())
    assert sorted(d.record.value for d in again) == [b"a", b"b"] == sorted(d.record.value for d in first)
    assert 9.5 <= waited < 11.5, f"back after {waited:.1f} s, for leases of 10 s"


def test_ordered_delivery_holds_a_key_until_its_message_is_acked(gw: InProcessGateway, names: Names) -> None:
    topic, sub = _setup(gw, names, enable_message_ordering=True, ack_deadline_seconds=60)
    _publish(gw, topic, [f"k{i}" for i in range(5)], key="key-a")
    seen: list[bytes] = []
    for _ in range(5):
        got = _pull_all(gw, sub, 1, timeout=15)
        assert len(got) == 1, f"after {seen}: {got}"
        # The next message of the key is not delivered while this one is outstanding.
        assert gw.run(gw.gateway.delivery.pull(sub, 10, 0.5)) == []
        seen.append(got[0].record.value)
        gw.run(gw.gateway.delivery.acknowledge(sub, [got[0].ack_id]))
    assert seen == [f"k{i}".encode() for i in range(5)]


def test_a_second_gateway_follows_the_resource_store(gw: InProcessGateway, names: Names) -> None:
    """Resources live in a compacted topic: another process with the same prefix serves them."""
    other = InProcessGateway(
        settings_for(gw.settings.kafka_bootstrap or "", gw.settings.internal_prefix)
    ).start()
    try:
        topic, sub = _setup(gw, names)
        deadline = time.monotonic() + 10
        while other.gateway.store.get("subscription", sub) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert other.gateway.subscriptions.get(sub).proto.topic == topic
        # A message published through one is delivered through the other.
        _publish(other, topic, ["across"])
        assert [d.record.value for d in _pull_all(gw, sub, 1)] == [b"across"]
        # A delete through the other reaches this one.
        other.run(other.gateway.topics.delete(topic))
        deadline = time.monotonic() + 10
        while gw.gateway.store.get("topic", topic) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gw.gateway.store.get("topic", topic) is None
    finally:
        other.stop()


def test_an_exactly_once_ack_of_a_replaced_lease_fails_by_id(gw: InProcessGateway, names: Names) -> None:
    topic, sub = _setup(gw, names, enable_exactly_once_delivery=True)
    _publish(gw, topic, ["eod"])
    (stale,) = _pull_all(gw, sub, 1)
    gw.run(gw.gateway.delivery.modify_ack_deadline(sub, [stale.ack_id], 0))  # handed back
    (fresh,) = _pull_all(gw, sub, 1)
    assert fresh.record.value == b"eod" and fresh.ack_id != stale.ack_id
    with pytest.raises(AckIdsFailed) as failed:
        gw.run(gw.gateway.delivery.acknowledge(sub, [stale.ack_id, fresh.ack_id]))
    assert failed.value.failures[stale.ack_id] == "PERMANENT_FAILURE_INVALID_ACK_ID"
    assert failed.value.failures[fresh.ack_id].startswith("TRANSIENT_")
    gw.run(gw.gateway.delivery.acknowledge(sub, [fresh.ack_id]))  # the retry alone succeeds
    assert gw.run(gw.gateway.delivery.pull(sub, 10, 1.0)) == []


def test_a_command_read_back_while_its_writer_is_still_at_it_is_applied_by_the_writer(
    gw: InProcessGateway, names: Names
) -> None:
    """The log reader can meet a command this process wrote before the write's own caller has
    applied it. It leaves the command to that caller (applied once, not twice), and until then
    no checkpoint claims to hold it (`log_offset`, which Spark starts from, stays below it). A
    command whose write failed here, yet is in the log, the reader applies after all; so it does
    one whose partition was taken on anew while it was written (its new state did not apply it)."""
    topic, sub = _setup(gw, names, ack_deadline_seconds=60)
    _publish(gw, topic, ["a", "b", "c"], key="one partition")
    first, second, third = sorted(_pull_all(gw, sub, 3), key=lambda d: d.record.value)
    runner = gw.gateway.delivery._runners[sub]
    lease_log = runner.log  # no public view of its reader or its keys being written
    p = first.record.partition
    assert second.record.partition == third.record.partition == p

    async def write(cmd: Command) -> tuple[bytes, int]:
        [(key, at)] = await lease_log.write(p, [cmd])  # as AckPath does, before it applies
        return key, at

    async def apply(cmd: Command, key: bytes) -> None:
        lease_log.apply(p, cmd, key)  # on the gateway's loop, as AckPath does
        runner.tell_settled(p, cmd)

    def read_back(at: int) -> None:
        deadline = time.monotonic() + 20
        while lease_log._log_applied.get(p, 0) <= at:  # (a dict read from this thread: atomic)
            assert time.monotonic() < deadline, f"offset {at} of the log not read back"
            time.sleep(0.05)

    def later_command() -> None:
        """A command written and applied after: reading it back settles what was left."""
        cmd = SetDeadline(p, ((10**9, 1),), 0, lease_log.states[p].epoch)  # of no lease: no effect
        key, at = gw.run(write(cmd))
        gw.run(apply(cmd, key))
        read_back(at)

    for d, failed in ((first, False), (second, True)):
        offset = d.record.offset
        ack = Ack(p, ((offset, offset + 1),), lease_log.states[p].epoch)
        key, at = gw.run(write(ack))
        read_back(at)
        assert not lease_log.states[p].is_acked(offset)  # left to the writer
        assert lease_log._folded_below(p) <= at
        if failed:
            lease_log._writer.writing.discard(key)  # the write failed, as far as its caller knows
        else:
            gw.run(apply(ack, key))
            assert lease_log.states[p].is_acked(offset)
        later_command()
        assert lease_log.states[p].is_acked(offset)
        assert lease_log._folded_below(p) > at and key not in lease_log._writer.writing

    offset = third.record.offset
    ack = Ack(p, ((offset, offset + 1),), lease_log.states[p].epoch)

    async def write_while_taken_on_anew() -> tuple[bytes, int]:
        written = asyncio.ensure_future(write(ack))
        await asyncio.sleep(0)  # sent: its key is being written
        # Installed again, as on_assigned does, microseconds after: long before any reply.
        lease_log.install(p, Recovered(lease_log.states[p], lease_log._folded[p], lease_log._log_applied[p]))
        return await written

    key, at = gw.run(write_while_taken_on_anew())
    read_back(at)
    assert lease_log.states[p].is_acked(offset)  # the reader applied it
    gw.run(apply(ack, key))  # the writer's late apply folds nothing of its own
    assert key not in lease_log._writer.writing and lease_log._folded_below(p) > at
