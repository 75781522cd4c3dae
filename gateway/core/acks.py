"""The ack path: every Acknowledge and ModifyAckDeadline, on any subscription.

An ack or deadline change counts only for a message leased now under that ack id, and only the
owner of its partition knows the leases: the subscription's LeaseLog in the process whose
runner owns the partition (lease_log.py). `AckPath.settle` parses the ids, has the LeaseLog
judge those of its partitions (with exactly-once, per id), has it write one command per
partition and apply each once durable, tells the runner's streams that deliveries ended, and
forwards the ids of partitions another process owns to that process.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Protocol

from gateway.clock import now_ms
from gateway.core import exactly_once, peers
from gateway.core.lease_log import LeaseLog, Logged
from gateway.core.resources import StoredSubscription
from gateway.core.tally import Tally
from gateway.errors import GatewayError, InvalidArgument
from gateway.kafka.admin import Admin
from gateway.leases.commands import Ack, Command, SetDeadline
from gateway.leases.ranges import to_ranges
from gateway.translate import ackids
from gateway.translate.ackids import Named

log = logging.getLogger(__name__)
# How long an ack or deadline change waits for its lease-log write before it answers: a write
# waits for as long as its log partition has no leader (a dead broker led it, until the
# controller notices: 9 s by default), and the official clients block their stream or their
# ack thread on these calls. What is still being written then is answered as settle() says.
SETTLE_PATIENCE_SECONDS = 1.0
# With exactly-once, what is not yet written is answered as a transient failure, and the
# official clients retry it after a random, doubling backoff: a failure during the seconds a
# dead broker is not yet fenced let the Python subscriber wait 26 s more for its next try,
# holding its stream meanwhile (receipt modacks gate delivery to user code). Waiting for the
# write instead answers as soon as Kafka takes writes again: past the default fence (9 s) and
# an election, and well within the clients' 60 s deadline for these calls.
EXACTLY_ONCE_PATIENCE_SECONDS = 15.0
# A valid lease does not expire while its ack or deadline change is being written (exactly-once:
# an ack confirmed must not find its message redelivered): longer than any wait above.
HOLD_MS = 20_000


class Served(Protocol):
    """A subscription served here (SubscriptionRunner): its lease log, and its streams."""

    log: LeaseLog
    ready: asyncio.Event
    tally: Tally

    def tell_settled(self, p: int, cmd: Command) -> None: ...

    def tell_room(self, p: int, offsets: list[int]) -> None: ...


def _apply(runner: Served, p: int, cmd: Command, key: bytes | None, settles: bool) -> None:
    """Apply a command written (`key`) or being written (None) to the owner's state; `settles`:
    it ends deliveries (an ack or a nack), and the streams holding them get room."""
    runner.log.apply(p, cmd, key)
    if settles:
        runner.tell_settled(p, cmd)


def parse(res: StoredSubscription, ack_ids: Sequence[str]) -> dict[int, Named]:
    """Validate every ack id before anything is written; ids of another subscription skip."""
    if not ack_ids:
        raise InvalidArgument("No ack IDs given (ack_ids).")
    try:
        out = ackids.by_partition(ack_ids, ackids.subscription_tag(res.name, res.meta.uid))
    except ackids.MalformedAckId as bad:
        raise InvalidArgument(f"Invalid ack ID: {str(bad)[:80]!r} (ack_ids).") from None
    for p, named in out.items():  # (in the order of each partition's first id)
        if not 0 <= p < res.meta.partitions:
            raise InvalidArgument(
                f"Invalid ack ID: {named.ids[0][:80]!r} names no partition of {res.name} (ack_ids)."
            )
    return out


def commands(refs: dict[int, Named], seconds: int | None, epoch: int) -> dict[int, Command]:
    """The log commands for acks (seconds None) or deadline changes of the given ids."""
    if seconds is None:
        return {p: Ack(p, tuple(to_ranges(n.offsets)), epoch) for p, n in refs.items() if n.ids}
    deadline = now_ms() + seconds * 1000
    return {
        p: SetDeadline(p, tuple(zip(n.offsets, n.generations, strict=True)), deadline, epoch)
        for p, n in refs.items()
        if n.ids
    }


def ordered_acks(runner: Served | None, valid: dict[int, Named], epoch: int) -> dict[int, Command]:
    """The ack commands of valid ids, in the order ordered delivery allows: an ack of a message
    whose key has an earlier one still out waits for it, with the owner (`order_acks`). The
    ones held back are done for the streams that delivered them: they free their room."""
    if runner is None:
        return {}
    out: dict[int, Command] = {}
    for p, named in valid.items():
        now, held = runner.log.order_acks(p, named.offsets)
        if held:
            runner.tell_room(p, held)
        if now:
            out[p] = Ack(p, tuple(to_ranges(now)), epoch)
    return out


def split(runner: Served | None, refs: dict[int, Named]) -> tuple[dict[int, Named], dict[int, Named]]:
    """(ids of partitions this process owns, ids of the others)."""
    local = {p: n for p, n in refs.items() if runner is not None and runner.log.owns(p)}
    remote = {p: n for p, n in refs.items() if p not in local}
    return local, remote


def judge(
    runner: Served | None, local: dict[int, Named], seconds: int | None, now: int, hold: bool = True
) -> tuple[dict[int, Named], dict[str, str]]:
    """Split owned ids into valid ones and failures by id. With `hold`, a valid lease does not
    expire while its command is written (exactly-once: an ack confirmed must not find its
    message redelivered); without, an ack written as the lease runs out still acks."""
    valid: dict[int, Named] = {}
    failures: dict[str, str] = {}
    if runner is None:
        return valid, failures
    hold_until = now + HOLD_MS if hold else None
    for p, named in local.items():
        entries = zip(named.offsets, named.generations, strict=True)
        verdicts = runner.log.judge(p, entries, seconds is None, now, hold_until)
        if all(verdicts):  # every one a current lease: the common case
            valid[p] = named
            continue
        mine = Named([], [], [])
        for ack_id, offset, gen, verdict in zip(*named, verdicts, strict=True):
            if verdict:
                mine.ids.append(ack_id)
                mine.offsets.append(offset)
                mine.generations.append(gen)
            elif verdict is False:
                failures[ack_id] = exactly_once.INVALID
            # None: acked already, and acking again succeeds
        if mine.ids:
            valid[p] = mine
    return valid, failures


def _count(
    runner: Served | None, valid: dict[int, Named], seconds: int | None, unwritten: Iterable[int]
) -> None:
    """Count the acks (seconds None) and nacks (0) the owner accepted and wrote, for /metrics."""
    if runner is None or seconds not in (None, 0) or not valid:
        return
    skip, now, tally = set(unwritten), now_ms(), runner.tally
    for p, named in valid.items():
        if p in skip:
            continue
        if seconds is None:
            tally.on_acked(p, named.offsets, now)
        else:
            tally.on_nacked(p, named.offsets)


class AckPath:
    """`runner_of` names this process's runner of a subscription (None: not served here);
    `take_on` starts serving a subscription nobody serves."""

    def __init__(
        self,
        runner_of: Callable[[str], Served | None],
        admin: Admin,
        take_on: Callable[[StoredSubscription], Coroutine[object, object, object]],
    ) -> None:
        self._runner_of = runner_of
        self._admin = admin
        self._take_on = take_on
        self._peers: peers.Peers | None = None
        self.address = ""

    def connect_peers(self, address: str, transport: peers.Peers) -> None:
        self.address = address
        self._peers = transport

    async def _write(
        self, res: StoredSubscription, cmds: dict[int, Command], seconds: int | None, strict: bool
    ) -> tuple[set[int], dict[int, BaseException]]:
        """Write each partition's command (acks if `seconds` is None, else deadline changes) and
        apply it here once durable. Returns the partitions whose write is still under way when
        the RPC answers and those whose write failed. What must be durable before OK, and so
        how long this waits, follows docs/lease-log.md:

        - without exactly-once (`strict` False) an ack waits SETTLE_PATIENCE_SECONDS, a deadline
          change nothing; an extension or receipt modack goes with the writer's next write
          (LogWriter.defer), a nack at once (its message is redelivered now). Acks and nacks give
          their streams room as soon as they are sent: the stream's next delivery goes out while
          the write is under way, and its lease write shares the write's produce request;
        - with exactly-once each waits EXACTLY_ONCE_PATIENCE_SECONDS, and streams hear of it once
          durable.

        A late write is applied here when it ends, or early, at once (and when it ends only its
        key is folded: applying an older deadline change again could undo a newer one): always
        without exactly-once, and for a deadline change with it (the owner holds it whatever
        becomes of the write; the client is told it failed and retries)."""
        settles = seconds in (None, 0)
        if strict:
            patience = EXACTLY_ONCE_PATIENCE_SECONDS
        else:
            patience = SETTLE_PATIENCE_SECONDS if seconds is None else 0.0
        early = not strict or seconds is not None
        defer = not strict and bool(seconds)
        room_first = not strict and settles
        runner = self._runner_of(res.name)
        if not cmds or runner is None:  # (only the owner judges ids valid: it made the commands)
            return set(), {}
        lease_log = runner.log
        if defer:
            writes = {p: lease_log.defer(p, c) for p, c in cmds.items()}
        else:
            writes = {p: asyncio.ensure_future(lease_log.write(p, [c])) for p, c in cmds.items()}
        told = room_first
        if told:
            for p, cmd in cmds.items():
                runner.tell_settled(p, cmd)
        if patience > 0:
            await asyncio.wait(writes.values(), timeout=patience)
        late: set[int] = set()
        failed: dict[int, BaseException] = {}
        runner = self._runner_of(res.name)  # (it may have stopped meanwhile)
        applies = settles and not told  # streams told already need not hear it again
        for p, write in writes.items():
            if not write.done():
                late.add(p)
                if early and runner is not None:
                    _apply(runner, p, cmds[p], None, applies)
                write.add_done_callback(
                    functools.partial(self._written_late, res.name, p, None if early else cmds[p], settles)
                )
            elif (error := write.exception()) is not None:
                failed[p] = error
            elif runner is not None:
                _apply(runner, p, cmds[p], write.result()[0].key, applies)
        if settles and runner is not None:
            runner.ready.set()
        return late, failed

    def _written_late(
        self,
        name: str,
        p: int,
        cmd: Command | None,
        settles: bool,
        write: asyncio.Future[list[Logged]],
    ) -> None:
        """A write answered before it ended has ended: apply `cmd`, or if it was applied
        early (None), fold its key like that of any command applied here."""
        runner = self._runner_of(name)
        if runner is None or write.cancelled():
            return
        if write.exception() is not None:
            log.info("%s: a late lease-log write of partition %d failed: %s", name, p, write.exception())
            return
        key = write.result()[0].key
        if cmd is None:
            runner.log.claim(p, (key,))
            return
        _apply(runner, p, cmd, key, settles)
        if settles:
            runner.ready.set()

    async def settle(
        self, res: StoredSubscription, ack_ids: Sequence[str], seconds: int | None, forwarded: bool
    ) -> None:
        """Ack (seconds None) or set deadlines. With exactly-once delivery, only current leases
        count: the others are reported per id, and ids of partitions another process owns are
        judged by that process.

        Without exactly-once a deadline change is not waited for at all: it takes effect in
        this process at once and its write goes on in the background. An ack write still under
        way after SETTLE_PATIENCE_SECONDS (its log partition lost its leader) goes on in the
        background too; it takes effect here at once and is answered OK: it is in the next
        checkpoint, and if this process dies first the message is only delivered again, as
        at-least-once allows. With exactly-once an ack or a deadline change is answered OK only
        once durable, waiting up to EXACTLY_ONCE_PATIENCE_SECONDS for it; what is not written
        by then is reported per id as a transient failure, which the client retries (a late
        deadline change takes effect here at once all the same)."""
        refs = parse(res, ack_ids)
        epoch = res.meta.epoch
        runner = self._runner_of(res.name)
        local, remote = split(runner, refs)
        strict = res.proto.enable_exactly_once_delivery
        valid, failures = judge(runner, local, seconds, now_ms(), hold=strict)
        if not strict:
            # Ids of no current lease change nothing and are not reported (ack ids can be made
            # up: only the owner's leases say which are real). The owner judges the others.
            # With ordering, acks follow the order of their keys. (With exactly-once, an ack
            # confirmed is final: the ordering rule redelivers only what is not acked.)
            ordered = seconds is None and res.proto.enable_message_ordering
            cmds = ordered_acks(runner, valid, epoch) if ordered else commands(valid, seconds, epoch)
            # A deadline change (a nack included) need not be durable before OK: lost, it
            # only moves a redelivery (docs/lease-log.md). It takes effect here at once.
            _, failed = await self._write(res, cmds, seconds, strict=False)
            _count(runner, valid, seconds, failed.keys())
            if failed:
                raise next(iter(failed.values()))
            if remote:
                await self._forward(res, remote, seconds, forwarded)
            return
        # A deadline change still being written after the patience takes effect here at once
        # (the owner holds it whatever becomes of the write), but like an ack it is confirmed
        # only once durable: the client retries it, and hands its message to user code only
        # after a receipt modack succeeds (docs/lease-log.md).
        late, failed = await self._write(res, commands(valid, seconds, epoch), seconds, strict=True)
        for p in late | failed.keys():
            failures |= dict.fromkeys(valid[p].ids, exactly_once.NOT_WRITTEN)
        _count(runner, valid, seconds, late | failed.keys())
        if remote:
            failures |= await self._forward(res, remote, seconds, forwarded)
        if failures:
            raise exactly_once.failed(ack_ids, failures)

    async def _forward(
        self, res: StoredSubscription, remote: dict[int, Named], seconds: int | None, forwarded: bool
    ) -> dict[str, str]:
        ids = {p: n.ids for p, n in remote.items()}
        if forwarded or self._peers is None:
            return {i: exactly_once.NOT_OWNER for group in ids.values() for i in group}
        try:
            owners = await self._admin.group_owners(res.meta.group_id)
        except GatewayError:
            owners = {}
        by_address: dict[str, list[str]] = {}
        failures: dict[str, str] = {}
        for p, group in ids.items():
            address = peers.address_of(owners.get(p, ""))
            if address is None or address == self.address:
                failures |= dict.fromkeys(group, exactly_once.NOT_OWNER)
                if not owners:  # nobody serves the subscription: take it on, the retry will land
                    asyncio.get_running_loop().create_task(self._take_on(res))
            else:
                by_address.setdefault(address, []).extend(group)
        for address, group in by_address.items():
            try:
                failures |= await self._peers.settle(address, res.name, group, seconds)
            except Exception as exc:  # noqa: BLE001 - the owner is unreachable: retry later
                log.info("forwarding %d ack ids to %s failed: %s", len(group), address, exc)
                failures |= dict.fromkeys(group, exactly_once.UNREACHABLE)
        return failures
