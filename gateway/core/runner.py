"""One subscription as served by this process: the partitions it owns and their delivery state.

The runner joins the subscription's consumer group (through a GroupFetcher) and delivers. For
each partition the group assigns it, the subscription's LeaseLog (lease_log.py) rebuilds the
delivery state from the lease/ack log and follows it; the runner fetches from the state's
watermark, adds what it fetches to the state, and leases messages to pulls, each lease written
to the log before a client sees the message. The LeaseLog checkpoints each partition and the
runner commits the watermark as the group's offset. Dead letters (dead_letters.py) and the
truncation policy (truncation_policy.py) are swept here, for the partitions owned.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import operator
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from gateway.clock import now_ms, within
from gateway.core.dead_letters import DeadLetters
from gateway.core.lease_log import LeaseLog, Logged, Recovered
from gateway.core.policies import Policies
from gateway.core.tally import Tally
from gateway.core.truncation_policy import PolicyTruncation
from gateway.errors import PermissionDenied
from gateway.kafka import consumer as kafka_consumer
from gateway.leases.commands import Ack, Command, Lease, LeaseRef, SetDeadline
from gateway.leases.ranges import to_ranges
from gateway.leases.state import Budget, PartitionState
from gateway.translate import ackids
from gateway.translate.records import Record, to_message

if TYPE_CHECKING:
    from gateway.core.resources import StoredSubscription

log = logging.getLogger(__name__)
# Unleased records held ready per subscription in this process: fetching pauses above the high
# mark and resumes below the low one. The gap keeps a busy subscription from pausing (which
# drops librdkafka's prefetched records) after every pull, and bounds memory for any backlog.
PREFETCH_HIGH = 8000
PREFETCH_LOW = 4000
# How long a delivery waits for one partition's lease write before it hands out the messages
# of the partitions whose writes are done. A write waits for as long as the partition's log has
# no leader: a broker that died leads it until the controller notices (9 s by default).
LEASE_PATIENCE_SECONDS = 1.0
# How often a pull waiting for partitions to catch up (`catch_up`) looks at what is ready.
CATCH_UP_POLL_SECONDS = 0.02
# How often the runner sweeps its partitions for expired leases, messages for the dead-letter
# topic and held acks freed, and how often while none has any (an idle subscription): a lease
# made meanwhile lasts 10 s at least, and is then swept every SWEEP_SECONDS long before it ends.
# Each sweep wakes the event loop (~0.2 ms of CPU), for every subscription a process serves.
SWEEP_SECONDS = 0.2
QUIET_SWEEP_SECONDS = 1.0
# How often the owner applies a truncation policy (docs/truncation.md).
TRUNCATION_CHECK_SECONDS = 1.0


_wire_size: Callable[[Record], int] = operator.attrgetter("wire_size")  # no frame of its own


# A message leased to a delivery: (partition, offset, generation, record), the generation
# counting its deliveries. A plain tuple, one per message: a NamedTuple costs ~180 ns more each.
Taken = tuple[int, int, int, Record]


class Delivery(NamedTuple):  # a tuple: one per delivered message
    ack_id: str
    record: Record
    attempt: int  # delivery_attempt as the API reports it: 0 without a dead-letter policy


# Delivery((...)) without a frame of its own: one per message.
_new_delivery = functools.partial(tuple.__new__, Delivery)


class SubscriptionRunner(kafka_consumer.FetchListener):
    def __init__(
        self,
        *,
        name: str,
        kafka_topic: str,
        group_id: str,
        lease_log: LeaseLog,
        kafka_config: dict[str, Any],
        session_timeout_ms: int,
        client_id: str = "pubsub-gateway",
        policies: Policies | None = None,
        transactional_prefix: str = "pubsub-gateway",
        on_truncated: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self.log = lease_log
        self.states = lease_log.states  # (the LeaseLog's: what it folds, this delivers from)
        lease_log.on_change = self._after_change
        lease_log.on_seek = self._seek
        lease_log.on_checkpoint = self._commit
        self.policies = policies or Policies()
        self.tally = Tally()  # counts for /metrics: DeliveryService hands in its subscription's
        self._dead = DeadLetters(
            name=name,
            lease_log=lease_log,
            kafka_config=kafka_config,
            transactional_prefix=transactional_prefix,
            policies=lambda: self.policies,
            tally=lambda: self.tally,
            settled=self.tell_settled,
        )
        self._truncation = PolicyTruncation(
            name=name,
            kafka_topic=kafka_topic,
            kafka_config=kafka_config,
            lease_log=lease_log,
            fetching=self.wants_records,
            settled=self.tell_settled,
            on_truncated=on_truncated,
        )
        self._loop = asyncio.get_running_loop()
        self.ready = asyncio.Event()
        self.last_used = time.monotonic()  # a Pull or stream asked for messages (touch)
        self.last_taken = 0.0  # messages were leased to a client (take)
        self._wants = True
        # Set once the group has given this member its share (maybe none): a new group waits
        # for group.initial.rebalance.delay.ms (3 s by default) before anyone owns anything.
        self.joined = asyncio.Event()
        # Kafka's authorizer refused the member its group or topic: this runner cannot serve
        # and is replaced on next use (DeliveryService), which tries again with the ACLs as
        # they are then. A refused dead-letter transaction instead holds until one succeeds.
        self.denied: PermissionDenied | None = None
        self._fetcher = kafka_consumer.GroupFetcher(
            kafka_config,
            group_id,
            kafka_topic,
            self,
            session_timeout_ms,
            client_id,
            on_joined=self._on_joined,
            on_denied=self._on_denied,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False
        self._discard = False
        self.settle_listeners: set[Callable[[int, list[int]], None]] = set()
        self._seeking: dict[int, int] = {}  # partition -> the offset last asked to seek to
        self._stalled: set[int] = set()  # partitions with a lease write overdue: not taken from
        # Partitions owned but not yet fetched up to where they ended when assigned -> that end.
        # `caught_up` is set while there are none (see `catch_up`).
        self._catching_up: dict[int, int] = {}
        self.caught_up = asyncio.Event()
        self.caught_up.set()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self.log.start()
        self._fetcher.start()
        self._tasks.append(asyncio.create_task(self._sweep_loop(), name=f"sweep {self.name}"))
        self._tasks.append(asyncio.create_task(self._truncation_loop(), name=f"truncation {self.name}"))

    async def stop(self, discard: bool = False) -> None:
        """Leave the group; final checkpoints are written on revoke unless `discard` says the
        subscription is gone, and with it every reason to write. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._discard = discard
        if discard:  # before leaving the group: once it is empty, the deleter removes both groups
            self.log.discard()
        else:  # deadline changes waiting for a write go now, ahead of the final checkpoints
            self.log.flush()
        self.ready.set()  # wake streams waiting on us: they end and their clients reconnect
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.log.stop_checkpoints()
        await asyncio.to_thread(self._fetcher.stop)
        await asyncio.to_thread(self.log.stop_reading)
        await self._dead.close()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def touch(self) -> None:
        self.last_used = time.monotonic()

    # -- the fetcher's callbacks (fetcher thread) -------------------------------------------

    def _on_joined(self) -> None:
        self._loop.call_soon_threadsafe(self.joined.set)

    def _on_denied(self, refusal: PermissionDenied) -> None:
        self._loop.call_soon_threadsafe(self._deny, refusal)

    def _deny(self, refusal: PermissionDenied) -> None:
        """Pulls and streams waiting on this runner end with the refusal (see `take`)."""
        if self.denied is None:
            log.error("%s: %s", self.name, refusal.message)
        self.denied = refusal
        self.joined.set()
        self.ready.set()

    def on_assigned(self, partitions: list[int], committed: dict[int, int]) -> dict[int, int]:
        # Every partition recovered before any is installed: a failure leaves nothing half
        # done, and the fetcher calls again.
        recovered = {p: self.log.recover(p, committed.get(p, 0)) for p in partitions}
        starts: dict[int, int] = {}
        for p, rec in recovered.items():
            asyncio.run_coroutine_threadsafe(self._install(p, rec), self._loop).result(30)
            self.log.follow(p, rec.log_end)
            starts[p] = rec.state.watermark
        log.info("%s: owns partitions %s from offsets %s", self.name, partitions, starts)
        return starts

    async def _install(self, p: int, recovered: Recovered) -> None:
        self._apply_policies(recovered.state)
        self.log.install(p, recovered)

    def update_policies(self, policies: Policies) -> None:
        """A changed subscription: later deliveries follow the new policies."""
        self.policies = policies
        for state in self.states.values():
            self._apply_policies(state)

    def _apply_policies(self, state: PartitionState[Record]) -> None:
        state.backoff = self.policies.backoff
        state.max_attempts = self.policies.max_attempts
        state.on_expired = lambda n: self.tally.on_expired(n)

    def on_fetch_targets(self, ends: dict[int, int]) -> None:
        self._loop.call_soon_threadsafe(self._set_targets, ends)

    def _set_targets(self, ends: dict[int, int]) -> None:
        for p, end in ends.items():
            state = self.states.get(p)
            if state is not None and state.next_offset < end:
                self._catching_up[p] = end
        if self._catching_up:
            self.caught_up.clear()

    def _fetched_to(self, p: int, next_offset: int) -> None:
        end = self._catching_up.get(p)
        if end is not None and next_offset >= end:
            del self._catching_up[p]
            if not self._catching_up:
                self.caught_up.set()

    async def catch_up(self, enough: int, seconds: float) -> None:
        """Wait up to `seconds` until every owned partition has been fetched up to where it
        ended when it was assigned, or `enough` messages are ready (a large backlog pauses
        fetching: see PREFETCH_HIGH)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while not self.caught_up.is_set() and self.ready_count() < enough and not self._stopped:
            left = end - loop.time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await within(self.caught_up.wait(), min(left, CATCH_UP_POLL_SECONDS))

    def ready_count(self) -> int:
        return sum(s.ready_count for s in self._deliverable())

    def on_revoked(self, partitions: list[int], lost: bool) -> dict[int, int]:
        fut = asyncio.run_coroutine_threadsafe(self._revoke(partitions, lost), self._loop)
        final = fut.result(30)
        self.log.unfollow(partitions)
        log.info("%s: gave up partitions %s", self.name, partitions)
        return final

    async def _revoke(self, partitions: list[int], lost: bool) -> dict[int, int]:
        final: dict[int, int] = {}
        for p in partitions:
            self._fetched_to(p, 1 << 62)  # not ours to wait for any more
            await self._dead.forget(p)
            watermark = await self.log.give_up(p, checkpoint=not lost and not self._discard)
            if watermark is not None and not self._discard:
                final[p] = watermark
        return final

    def on_records(self, records: list[Record]) -> None:
        self._loop.call_soon_threadsafe(self._add_records, records)

    def wants_records(self) -> bool:
        return self._wants

    # -- records on the loop ---------------------------------------------------------------

    def _add_records(self, records: list[Record]) -> None:
        by_partition: dict[int, list[tuple[int, Record]]] = {}
        for r in records:
            if r.partition not in self._seeking:
                by_partition.setdefault(r.partition, []).append((r.offset, r))
        now = now_ms()
        for p, items in by_partition.items():
            state = self.states.get(p)
            if state is not None:
                state.add_records(items)
                self._fetched_to(p, state.next_offset)
                skip = self._unwanted(items, now)
                if skip:  # acked at once: never delivered, never holding back the watermark
                    state.apply(Ack(p, tuple(to_ranges(skip)), state.epoch), now)
                if self.policies.truncate_max_age_ms:  # too old when fetched: truncated
                    aged = [o for o, r in items if r.timestamp_ms <= now - self.policies.truncate_max_age_ms]
                    aged = [o for o in aged if not state.is_acked(o)]
                    if aged:
                        state.apply(Ack(p, tuple(to_ranges(aged)), state.epoch), now)
                        self._truncation.dropped += len(aged)
        self._update_wants()
        if self.has_ready():
            self.ready.set()

    def _unwanted(self, items: list[tuple[int, Record]], now: int) -> list[int]:
        """Offsets the subscription must not deliver: filtered out, or past its retention."""
        keep = self.policies.filter
        oldest = now - self.policies.retention_ms
        return [
            o
            for o, r in items
            if r.timestamp_ms < oldest or (keep is not None and not keep(to_message(r).attributes))
        ]

    def _update_wants(self) -> None:
        ready = sum(s.ready_count for s in self.states.values())
        if ready >= PREFETCH_HIGH:
            self._wants = False
        elif ready < PREFETCH_LOW and not self._wants:
            self._wants = True
            self._fetcher.wake()

    # -- what the LeaseLog tells -------------------------------------------------------------

    def _seek(self, p: int, watermark: int) -> None:
        """A new epoch's checkpoint adopted: fetch from its watermark; what was fetched before
        the consumer moves is stale."""
        self._seeking[p] = watermark
        self._fetcher.request_seek({p: watermark})

    def on_seeked(self, done: dict[int, int]) -> None:
        self._loop.call_soon_threadsafe(self._sought, done)

    def _sought(self, done: dict[int, int]) -> None:
        """Records count again once the consumer has moved to the last offset asked for: the
        end of an earlier seek while a later one is pending does not."""
        for p, offset in done.items():
            if self._seeking.get(p) == offset:
                del self._seeking[p]

    def _commit(self, p: int, watermark: int) -> None:
        """A checkpoint is written: its watermark is the group's offset."""
        self._fetcher.request_commit({p: watermark})

    def _after_change(self) -> None:
        self._update_wants()
        if self.has_ready():
            self.ready.set()

    def tell_settled(self, p: int, cmd: Command) -> None:
        """Tell the streams that the command (an ack or a nack) ends their deliveries: they
        have room for more."""
        if self.settle_listeners:
            self.tell_room(p, _offsets_of(cmd))

    def tell_room(self, p: int, offsets: list[int]) -> None:
        """Tell the streams that the deliveries of these offsets are done with."""
        for listener in list(self.settle_listeners):
            listener(p, offsets)

    # -- delivery --------------------------------------------------------------------------

    def take(self, n: int, deadline_ms: int, max_bytes: int | None = None) -> list[Taken]:
        """Lease up to n messages across owned partitions and, given `max_bytes`, no more than
        fit a response of that size (Record.wire_size; one message at least). What does not
        fit is not leased and spends no delivery attempt.

        PERMISSION_DENIED while Kafka's authorizer refuses what serving the subscription takes:
        the group, its topic, or a dead-letter transaction."""
        if self.denied is not None:
            raise self.denied
        refused = self._dead.refusal()
        if refused is not None:
            raise refused
        now = now_ms()
        out: list[Taken] = []
        states = self._deliverable()
        share = max(1, n // max(1, len(states)))
        budget = None if max_bytes is None else Budget(max_bytes, _wire_size)
        for rnd in range(2):  # a fair share from each partition first, then whatever is left
            for state in states:
                want = n - len(out)
                if want <= 0:
                    break
                got = state.take(min(want, share) if rnd == 0 else want, now, deadline_ms, budget)
                p = state.partition
                out.extend((p, o, g, r) for o, g, r in got)
        if out:
            self.last_taken = time.monotonic()
        self._update_wants()
        return out

    async def record_leases(self, taken: list[Taken], deadline_ms: int) -> list[Taken]:
        """Make leases durable before the client sees the messages; returns those whose lease
        is. A partition whose write failed gives its messages back; one whose write is still
        under way after LEASE_PATIENCE_SECONDS (its log lost its leader) is left out of this
        delivery and of later takes until the write ends, and then gives them back: one dead
        broker does not hold up the partitions the others lead."""
        by_partition: dict[int, list[LeaseRef]] = {}
        for p, o, g, _ in taken:
            by_partition.setdefault(p, []).append((o, g))
        # A partition given up while its write was under way (lost, say, in a cut from the
        # broker, and maybe taken again since) is not ours to deliver from: its messages are
        # someone else's now, or come again from the new state.
        owned = {p: self.states.get(p) for p in by_partition}
        writes = {
            p: asyncio.ensure_future(
                self.log.write(p, [Lease(p, tuple(entries), deadline_ms, self.log.epoch(p))])
            )
            for p, entries in by_partition.items()
        }
        await asyncio.wait(writes.values(), timeout=LEASE_PATIENCE_SECONDS)
        durable: set[int] = set()
        failed: BaseException | None = None
        for p, write in writes.items():
            if not write.done():
                self._stalled.add(p)
                write.add_done_callback(functools.partial(self._late_lease, p, by_partition[p]))
                continue
            state = self.states.get(p)
            error = write.exception()
            if error is None:
                self.log.claim(p, (k for k, _ in write.result()))
            if state is None or state is not owned[p]:
                continue
            if error is not None:
                failed = error
                state.release(by_partition[p])
                continue
            durable.add(p)
        if len(durable) < len(writes):
            self._after_change()
        if not durable and failed is not None:
            raise failed
        return [t for t in taken if t[0] in durable] if len(durable) < len(writes) else taken

    def _late_lease(self, p: int, entries: list[LeaseRef], write: asyncio.Future[list[Logged]]) -> None:
        """A lease write given up on by its delivery has ended: the messages go back."""
        self._stalled.discard(p)
        state = self.states.get(p)
        if not write.cancelled() and write.exception() is None:
            self.log.claim(p, (k for k, _ in write.result()))  # in the log: not to re-apply
        if state is not None:
            state.release(entries)
        self._after_change()

    async def deliver(self, res: StoredSubscription, taken: list[Taken], lease_until: int) -> list[Delivery]:
        """Make the leases durable, then name each delivery by its ack id (of those whose lease
        is: see record_leases)."""
        taken = await self.record_leases(taken, lease_until)
        self.tally.on_delivered(taken, now_ms())
        tag = ackids.subscription_tag(res.name, res.meta.uid)
        ids = ackids.encode_each(tag, taken)
        if res.proto.HasField("dead_letter_policy"):  # (delivery_attempt is set only then)
            return [_new_delivery((i, r, g)) for i, (_, _, g, r) in zip(ids, taken, strict=True)]
        return [_new_delivery((i, r, 0)) for i, (_, _, _, r) in zip(ids, taken, strict=True)]

    def owns(self, p: int) -> bool:
        return p in self.states

    def give_back(self, p: int, taken: list[LeaseRef]) -> None:
        """Release leases taken but not handed out ((offset, generation) of partition p)."""
        state = self.states.get(p)
        if state is not None:
            state.release(taken)

    def next_expiry_ms(self) -> int | None:
        times = [t for s in self.states.values() if (t := s.next_expiry()) is not None]
        return min(times) if times else None

    def has_ready(self) -> bool:
        return any(s.ready_count for s in self._deliverable())

    def _deliverable(self) -> list[PartitionState[Record]]:
        """The owned partitions that may deliver now: none with a lease write overdue, none
        whose state is of an epoch older than the subscription's record (LeaseLog.want_epoch)."""
        behind = self.log.behind
        if not self._stalled and not behind:
            return list(self.states.values())
        return [s for p, s in self.states.items() if p not in self._stalled and p not in behind]

    # -- sweeps: expired leases, held acks freed, dead letters, the truncation policy ---------

    async def _sweep_loop(self) -> None:
        while True:
            quiet = not self._dead.denied and all(s.quiet() for s in self.states.values())
            await asyncio.sleep(QUIET_SWEEP_SECONDS if quiet else SWEEP_SECONDS)
            if self.log.behind:
                self.log.wait_out_epochs()
            now = now_ms()
            for p, state in list(self.states.items()):
                # Expired leases are found here too, not only by the next pull: a message whose
                # last delivery ran out must reach the dead-letter topic even if nobody pulls.
                if state.expire(now):
                    self.ready.set()
                if (freed := state.take_freed()) and (ack := await self.log.ack_freed(p, freed)):
                    self.tell_settled(p, ack)
                if await self._dead.sweep(p, state):
                    self.ready.set()  # waiting pulls and streams end with it (see `take`)

    async def _truncation_loop(self) -> None:
        while True:
            await asyncio.sleep(TRUNCATION_CHECK_SECONDS)
            if not self.policies.truncates and not self._truncation.dropped:
                continue
            try:
                await self._truncation.apply(self.policies, now_ms())
            except Exception as exc:  # noqa: BLE001 - tried again next round; the loop must live
                log.warning("%s: applying the truncation policy failed: %s", self.name, exc)


def _offsets_of(cmd: Command) -> list[int]:
    if isinstance(cmd, Ack):
        return [o for start, end in cmd.ranges for o in range(start, end)]
    if isinstance(cmd, SetDeadline):
        return [o for o, _ in cmd.entries]
    return []
