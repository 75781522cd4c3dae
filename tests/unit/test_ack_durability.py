"""What AckPath.settle answers while a lease-log write is still under way (its log partition
has no leader): the rule of docs/lease-log.md, "What is durable before an RPC answers OK",
against a stand-in owner and a log writer whose writes never end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.core import acks, exactly_once
from gateway.core.acks import AckPath
from gateway.core.log_writer import Logged
from gateway.core.resources import Resource, StoredSubscription
from gateway.core.tally import Tally
from gateway.errors import AckIdsFailed
from gateway.leases.commands import Command
from gateway.translate import ackids
from gateway.translate.meta import SubscriptionMeta

NAME = "projects/p/subscriptions/s"


class Owner:
    """Owns partition 0, where every lease is valid, through `log` (a LeaseLog's stand-in whose
    writes go to `writer`); records what is applied and what the streams heard."""

    def __init__(self, writer: StuckWriter | SlowWriter) -> None:
        self.ready = asyncio.Event()
        self.tally = Tally()
        self.applied: list[Command] = []
        self.told: list[Command] = []  # commands the streams heard of before they were applied
        self.told_in_apply: list[Command] = []  # ... and once applied
        self.log = _Log(self, writer)

    def tell_settled(self, p: int, cmd: Command) -> None:
        (self.told_in_apply if cmd in self.applied else self.told).append(cmd)

    def tell_room(self, p: int, offsets: list[int]) -> None:
        pass


class _Log:
    def __init__(self, owner: Owner, writer: StuckWriter | SlowWriter) -> None:
        self._owner = owner
        self.write = writer.write
        self.defer = writer.defer

    def owns(self, p: int) -> bool:
        return p == 0

    def judge(
        self, p: int, entries: Iterable[tuple[int, int]], acking: bool, now_ms: int, hold_until: int | None
    ) -> list[bool | None]:
        return [True for _ in entries]

    def order_acks(self, p: int, offsets: list[int]) -> tuple[list[int], list[int]]:
        return offsets, []

    def apply(self, p: int, cmd: Command, key: bytes | None) -> None:
        self._owner.applied.append(cmd)

    def claim(self, p: int, keys: Iterable[bytes]) -> None:
        pass


class StuckWriter:
    """A log partition without a leader: writes are accepted and never end."""

    topic = "log"

    def __init__(self) -> None:
        self.writes = 0
        self.deferred = 0

    async def write(self, partition: int, cmds: list[Command]) -> list[Logged]:
        self.writes += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def defer(self, partition: int, cmd: Command) -> asyncio.Future[list[Logged]]:
        self.writes += 1
        self.deferred += 1
        return asyncio.get_running_loop().create_future()


class SlowWriter:
    """A log partition whose leader moves: writes end, after `seconds`."""

    topic = "log"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.writes = 0

    async def write(self, partition: int, cmds: list[Command]) -> list[Logged]:
        self.writes += 1
        await asyncio.sleep(self.seconds)
        return [Logged(b"key", 0) for _ in cmds]

    def defer(self, partition: int, cmd: Command) -> asyncio.Future[list[Logged]]:
        raise AssertionError("exactly-once writes nothing later: it waits for each write")


def _subscription(exactly_once_on: bool) -> StoredSubscription:
    proto = pubsub_pb2.Subscription(name=NAME, enable_exactly_once_delivery=exactly_once_on)
    meta = SubscriptionMeta(uid="u1", kafka_topic="t", partitions=2, log_topic="log", group_id="g")
    return Resource(NAME, proto, meta)


def _ids(n: int) -> list[str]:
    tag = ackids.subscription_tag(NAME, "u1")
    return [ackids.encode(tag, 0, offset, 1) for offset in range(n)]


async def _settle(
    exactly_once_on: bool, seconds: int | None, writer: StuckWriter | SlowWriter | None = None
) -> tuple[Owner, BaseException | None]:
    writer = writer or StuckWriter()
    owner = Owner(writer)
    path = AckPath(lambda name: owner, admin=None, take_on=None)  # type: ignore[arg-type,return-value]
    try:
        await asyncio.wait_for(path.settle(_subscription(exactly_once_on), _ids(3), seconds, False), 5)
    except AckIdsFailed as exc:
        return owner, exc
    finally:
        assert writer.writes == 1
    return owner, None


@pytest.fixture(autouse=True)
def _short_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acks, "SETTLE_PATIENCE_SECONDS", 0.05)
    monkeypatch.setattr(acks, "EXACTLY_ONCE_PATIENCE_SECONDS", 0.2)


@pytest.mark.parametrize("seconds", [None, 0, 30], ids=["ack", "nack", "extend"])
async def test_exactly_once_confirms_nothing_that_is_not_written(seconds: int | None) -> None:
    owner, error = await _settle(True, seconds)
    assert isinstance(error, AckIdsFailed)
    assert error.failures == dict.fromkeys(_ids(3), exactly_once.NOT_WRITTEN)
    # A deadline change holds in the owner at once; an ack only once written.
    assert len(owner.applied) == (0 if seconds is None else 1)


async def test_without_exactly_once_a_deadline_change_answers_at_once() -> None:
    writer = StuckWriter()
    owner, error = await _settle(False, 30, writer)
    assert error is None
    assert len(owner.applied) == 1
    assert writer.deferred == 1  # written with the log's next write (LogWriter.defer)
    assert owner.told == owner.told_in_apply == []  # an extension ends no delivery


async def test_without_exactly_once_a_nack_is_written_at_once_and_frees_room_at_once() -> None:
    writer = StuckWriter()
    owner, error = await _settle(False, 0, writer)
    assert error is None
    assert writer.deferred == 0
    assert len(owner.told) == 1 and owner.told_in_apply == []


async def test_without_exactly_once_an_ack_waits_its_patience_then_holds_here() -> None:
    owner, error = await _settle(False, None)
    assert error is None
    assert len(owner.applied) == 1
    # The streams had room for more before the write ended, and are not told twice.
    assert len(owner.told) == 1 and owner.told_in_apply == []


@pytest.mark.parametrize("seconds", [None, 0], ids=["ack", "nack"])
async def test_exactly_once_frees_room_only_once_written(seconds: int | None) -> None:
    owner, error = await _settle(True, seconds, SlowWriter(0.1))
    assert error is None
    assert owner.told == [] and len(owner.told_in_apply) == 1


@pytest.mark.parametrize("seconds", [None, 0, 30], ids=["ack", "nack", "extend"])
async def test_exactly_once_waits_for_a_slow_write_longer_than_at_least_once(seconds: int | None) -> None:
    """A write that ends after the at-least-once patience but within exactly-once's is
    confirmed, not failed: a transient failure would cost the client a backoff that grows."""
    owner, error = await _settle(True, seconds, SlowWriter(0.1))
    assert error is None
    assert len(owner.applied) == 1
