"""One subscription as served by this process: the partitions it owns and their delivery state.

The runner joins the subscription's consumer group (through a GroupFetcher). For each
partition the group assigns it, it rebuilds the delivery state from the lease/ack log, seeks
the Kafka consumer to the watermark and follows the log for commands written by other
processes. It leases messages to pulls, writes every lease to the log before a client sees the
message, checkpoints each partition's state, tombstones folded commands, and commits the
watermark as the group's offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import operator
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from gateway.clock import now_ms, within
from gateway.core.acks import LogWriter
from gateway.core.policies import Policies, dead_letter_headers
from gateway.core.tally import Tally
from gateway.errors import InvalidArgument, PermissionDenied
from gateway.kafka import consumer as kafka_consumer
from gateway.kafka.producer import Producer, TransactionalSender
from gateway.leases import logformat, trim
from gateway.leases.commands import Ack, Checkpoint, Command, Lease, SetDeadline
from gateway.leases.fold import fold
from gateway.leases.ranges import to_ranges
from gateway.leases.state import Budget, PartitionState
from gateway.translate import ackids
from gateway.translate.meta import applied_group
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
# How long the dead-letter loop leaves a partition alone after Kafka's authorizer refused its
# transaction: each try makes a transactional producer.
DENIED_RETRY_SECONDS = 5.0
# A dead message that its dead-letter topic refuses as too large (an adopted topic's own
# max.message.bytes) stays in the subscription, undelivered, and is tried again this often.
TOO_LARGE_RETRY_SECONDS = 60.0
# How long the lease-log reader, having found a record, gathers more before handing them over:
# what other processes write (acks, modacks, their leases) is applied within this, and a busy
# log is handed over ~10 times a second rather than per fetch (each hand-over wakes the loop).
LOG_LINGER_SECONDS = 0.1
# How often a pull waiting for partitions to catch up (`catch_up`) looks at what is ready.
CATCH_UP_POLL_SECONDS = 0.02
# How often the runner sweeps its partitions for expired leases, messages for the dead-letter
# topic and held acks freed, and how often while none has any (an idle subscription): a lease
# made meanwhile lasts 10 s at least, and is then swept every SWEEP_SECONDS long before it ends.
# Each sweep wakes the event loop (~0.2 ms of CPU), for every subscription a process serves.
SWEEP_SECONDS = 0.2
QUIET_SWEEP_SECONDS = 1.0
# How often the owner applies a truncation policy (docs/truncation.md), and how often, while
# fetching is paused (a backlog beyond PREFETCH_HIGH), it asks Kafka where its partitions end
# to estimate the bytes not fetched yet.
TRUNCATION_CHECK_SECONDS = 1.0
TRUNCATION_ENDS_SECONDS = 10.0
# A Seek (or TruncateSubscription) raises the subscription's epoch in its record first and then
# writes the new epoch's checkpoints. A partition whose state is of an older epoch than the
# record's delivers nothing until its checkpoint is adopted. A seeker that died between the two
# writes leaves no checkpoint to come: its producer gives every write up after 30 s
# (delivery.timeout.ms), so after this long the owner carries on from its own state in the new
# epoch (the seek reached that partition no further than its record: docs/lease-log.md).
EPOCH_WAIT_SECONDS = 35.0


_wire_size: Callable[[Record], int] = operator.attrgetter("wire_size")  # no frame of its own


class Delivery(NamedTuple):  # a tuple: one per delivered message
    ack_id: str
    record: Record
    attempt: int  # delivery_attempt as the API reports it: 0 without a dead-letter policy


_new_delivery = functools.partial(tuple.__new__, Delivery)  # Delivery((...)) without its frame


class SubscriptionRunner(kafka_consumer.FetchListener):
    def __init__(
        self,
        *,
        name: str,
        kafka_topic: str,
        group_id: str,
        writer: LogWriter,
        producer: Producer,
        kafka_config: dict[str, Any],
        session_timeout_ms: int,
        checkpoint_interval: float,
        ordered: bool = False,
        client_id: str = "pubsub-gateway",
        policies: Policies | None = None,
        transactional_prefix: str = "pubsub-gateway",
        on_truncated: Callable[[str], Awaitable[None]] | None = None,
        epoch: int = 0,
    ) -> None:
        self.name = name
        # The epoch of the subscription's record (want_epoch), and the partitions whose state is
        # older: not delivered from until they adopt it -> since when (monotonic time).
        self._epoch_wanted = epoch
        self._behind: dict[int, float] = {}
        self._kafka_topic = kafka_topic
        # Truncation policy: told of every round that dropped messages (it raises the event);
        # messages dropped and not yet told; the partitions' ends as last asked (monotonic time)
        self._on_truncated = on_truncated
        self._truncated = 0
        self._ends: tuple[float, dict[int, int]] = (0.0, {})
        self.writer = writer
        self.policies = policies or Policies()
        self.tally = Tally()  # counts for /metrics: DeliveryService hands in its subscription's
        self._txn_prefix = transactional_prefix
        self._dead_letter_senders: dict[int, TransactionalSender] = {}
        self._key_of = _record_key if ordered else None
        self._producer = producer
        self._config = kafka_config
        self._loop = asyncio.get_running_loop()
        self.states: dict[int, PartitionState[Record]] = {}
        self._folded: dict[int, set[bytes]] = {}
        self._log_applied: dict[int, int] = {}  # partition -> log offset applied up to
        # Commands the log reader met while this process was still writing them, left to their
        # writer here: (log offset, key, value) in log order (see `_settle_deferred`).
        self._deferred: dict[int, list[tuple[int, bytes, bytes]]] = {}
        self.ready = asyncio.Event()
        self.last_used = time.monotonic()  # a Pull or stream asked for messages (touch)
        self.last_taken = 0.0  # messages were leased to a client (take)
        self._wants = True
        self._checkpoint_interval = checkpoint_interval
        # Set once the group has given this member its share (maybe none): a new group waits
        # for group.initial.rebalance.delay.ms (3 s by default) before anyone owns anything.
        self.joined = asyncio.Event()
        # Kafka's authorizer refused the member its group or topic: this runner cannot serve
        # and is replaced on next use (DeliveryService), which tries again with the ACLs as
        # they are then. A refused dead-letter transaction instead holds until one succeeds.
        self.denied: PermissionDenied | None = None
        self._dead_letters_denied: dict[int, tuple[PermissionDenied, float]] = {}
        # Dead-letter topics that refused a transaction's batch as too large: each dead message
        # goes in a transaction of its own to them. Dead messages refused even alone, by
        # partition: offset -> when to try again (they stay taken meanwhile).
        self._dead_alone: set[str] = set()
        self._dead_too_large: dict[int, dict[int, float]] = {}
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
        self._log_reader = kafka_consumer.TailReader(
            kafka_config,
            f"log-{name}",
            self._on_log,
            progress_group=applied_group(group_id),
            linger_seconds=LOG_LINGER_SECONDS,
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
        self._log_reader.start({})
        self._fetcher.start()
        self._tasks.append(asyncio.create_task(self._checkpoint_loop(), name=f"checkpoint {self.name}"))
        self._tasks.append(asyncio.create_task(self._dead_letter_loop(), name=f"dead letters {self.name}"))
        self._tasks.append(asyncio.create_task(self._truncation_loop(), name=f"truncation {self.name}"))

    async def stop(self, discard: bool = False) -> None:
        """Leave the group; final checkpoints are written on revoke unless `discard` says the
        subscription is gone, and with it every reason to write. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._discard = discard
        if discard:  # before leaving the group: once it is empty, the deleter removes both groups
            self._log_reader.drop_progress()
            self.writer.drop_deferred()
        else:  # deadline changes waiting for a write go now, ahead of the final checkpoints
            self.writer.flush()
        self.ready.set()  # wake streams waiting on us: they end and their clients reconnect
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.to_thread(self._fetcher.stop)
        await asyncio.to_thread(self._log_reader.stop)
        for sender in self._dead_letter_senders.values():
            await sender.close()

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
        recovered = {p: self._recover(p, committed.get(p, 0)) for p in partitions}
        starts: dict[int, int] = {}
        for p, (state, folded, log_end) in recovered.items():
            asyncio.run_coroutine_threadsafe(self._install(p, state, folded, log_end), self._loop).result(30)
            self._log_reader.add({(self.writer.topic, p): log_end})
            starts[p] = state.watermark
        log.info("%s: owns partitions %s from offsets %s", self.name, partitions, starts)
        return starts

    def _recover(self, p: int, committed: int) -> tuple[PartitionState[Record], set[bytes], int]:
        entries = kafka_consumer.read_to_end(self._config, self.writer.topic, p)
        state, folded = fold(p, committed, ((k, v) for _, k, v in entries), now_ms(), self._key_of)
        log_end = entries[-1][0] + 1 if entries else 0
        return state, folded, log_end

    def update_policies(self, policies: Policies) -> None:
        """A changed subscription: later deliveries follow the new policies."""
        self.policies = policies
        for state in self.states.values():
            self._apply_policies(state)

    def want_epoch(self, epoch: int) -> None:
        """The subscription's record is of `epoch` (a Seek or a truncation raised it): the
        partitions of an older state deliver nothing until they adopt its checkpoint."""
        if epoch <= self._epoch_wanted:
            return
        self._epoch_wanted = epoch
        for p, state in self.states.items():
            self._check_epoch(p, state)

    def _check_epoch(self, p: int, state: PartitionState[Record]) -> None:
        if state.epoch < self._epoch_wanted:
            self._behind.setdefault(p, time.monotonic())
        else:
            self._behind.pop(p, None)

    def _wait_out_epochs(self) -> None:
        """Partitions behind the record's epoch for EPOCH_WAIT_SECONDS: no checkpoint of it will
        come (its seeker died between its writes), so they go on from their own state in it."""
        now = time.monotonic()
        for p, since in list(self._behind.items()):
            state = self.states.get(p)
            if state is None:
                del self._behind[p]
            elif now - since >= EPOCH_WAIT_SECONDS:
                log.warning(
                    "%s: no checkpoint of epoch %d came for partition %d in %.0f s; it goes on "
                    "from its own state in that epoch",
                    self.name,
                    self._epoch_wanted,
                    p,
                    now - since,
                )
                self._folded[p].add(logformat.checkpoint_key(p, state.epoch))
                state.epoch = self._epoch_wanted
                state.dirty = True
                del self._behind[p]
                self._after_change()

    def _apply_policies(self, state: PartitionState[Record]) -> None:
        state.backoff = self.policies.backoff
        state.max_attempts = self.policies.max_attempts
        state.on_expired = lambda n: self.tally.on_expired(n)

    async def _install(self, p: int, state: PartitionState[Record], folded: set[bytes], log_end: int) -> None:
        self._apply_policies(state)
        self.states[p] = state
        self._folded[p] = folded
        self._log_applied[p] = log_end
        self._deferred.pop(p, None)
        # Writes still under way from an earlier ownership applied their commands to a state
        # that is gone: the reader applies them to this one.
        prefix, writing = logformat.command_prefix(p), self.writer.writing
        writing.difference_update([k for k in writing if k.startswith(prefix)])
        self._log_reader.report_progress({(self.writer.topic, p): log_end})
        state.dirty = True
        self._check_epoch(p, state)

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
        self._log_reader.remove([(self.writer.topic, p) for p in partitions])
        log.info("%s: gave up partitions %s", self.name, partitions)
        return final

    async def _revoke(self, partitions: list[int], lost: bool) -> dict[int, int]:
        final: dict[int, int] = {}
        for p in partitions:
            self._dead_letters_denied.pop(p, None)
            self._behind.pop(p, None)
            self._fetched_to(p, 1 << 62)  # not ours to wait for any more
            sender = self._dead_letter_senders.pop(p, None)
            if sender is not None:
                await sender.close()
            if p in self.states:
                self._settle_deferred(p, now_ms())
            log_applied = self._folded_below(p)
            self._deferred.pop(p, None)
            state = self.states.pop(p, None)
            folded = self._folded.pop(p, set())
            self._log_applied.pop(p, None)
            if state is None or self._discard:
                continue
            final[p] = state.watermark
            if not lost:
                try:
                    await self._checkpoint(p, state, folded, log_applied)
                except Exception:
                    log.exception("%s: final checkpoint of partition %d failed", self.name, p)
        return final

    def on_records(self, records: list[Record]) -> None:
        self._loop.call_soon_threadsafe(self._add_records, records)

    def wants_records(self) -> bool:
        return self._wants

    # -- records and commands on the loop ---------------------------------------------------

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
                        self._truncated += len(aged)
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

    def _on_log(self, batch: list[tuple[str, int, int, bytes | None, bytes | None]]) -> None:
        self._loop.call_soon_threadsafe(self._apply_log, batch)

    def _apply_log(self, batch: list[tuple[str, int, int, bytes | None, bytes | None]]) -> None:
        now = now_ms()
        for p in list(self._deferred):
            self._settle_deferred(p, now)
        applied: dict[tuple[str, int], int] = {}
        writing = self.writer.writing
        for topic, p, offset, key, value in batch:
            state = self.states.get(p)
            if state is None:
                continue
            self._log_applied[p] = max(self._log_applied.get(p, 0), offset + 1)
            applied[(topic, p)] = self._log_applied[p]
            if key is None or value is None or key in self._folded[p]:
                continue  # a tombstone, or a command this process applied already
            if key in writing:  # read back before its write here ended: the writer applies it
                self._deferred.setdefault(p, []).append((offset, key, value))
                continue
            self._apply_logged(p, state, key, value, now)
        self._after_change()
        if applied:
            self._log_reader.report_progress(applied)

    def _apply_logged(
        self, p: int, state: PartitionState[Record], key: bytes, value: bytes, now: int
    ) -> None:
        try:
            cmd = logformat.decode(value)
        except logformat.BadLogRecord:
            log.exception("%s: skipping unreadable lease-log record %r", self.name, key)
            return
        if logformat.is_command_key(key):
            state.apply(cmd, now)
            self._folded[p].add(key)
        elif isinstance(cmd, Checkpoint) and cmd.epoch > state.epoch:
            self._adopt_seek(p, state, cmd, now)

    def _settle_deferred(self, p: int, now: int) -> None:
        """Commands read back while this process wrote them: done with once their writer has
        applied them (folded); applied now if the write ended without (it failed, as far as the
        writer knows, yet is in the log); else left for later."""
        deferred = self._deferred.pop(p, None)
        state = self.states.get(p)
        if not deferred or state is None:
            return
        folded, writing = self._folded[p], self.writer.writing
        left = []
        for offset, key, value in deferred:
            if key in writing:
                left.append((offset, key, value))
            elif key not in folded:
                self._apply_logged(p, state, key, value, now)
        if left:
            self._deferred[p] = left

    def _folded_below(self, p: int) -> int:
        """The log offset below which every command is applied here (a checkpoint's
        `log_offset`): where the reader is, or the first command it left to its writer."""
        deferred = self._deferred.get(p)
        applied = self._log_applied.get(p, -1)
        return min(applied, deferred[0][0]) if deferred else applied

    def _adopt_seek(self, p: int, state: PartitionState[Record], cp: Checkpoint, now: int) -> None:
        """A seek wrote a checkpoint of a new epoch: start over from it."""
        old = state.epoch
        state.apply(cp, now)
        self._folded[p].add(logformat.checkpoint_key(p, old))
        self._seeking[p] = state.watermark  # records fetched before the consumer moves are stale
        self._fetcher.request_seek({p: state.watermark})
        self._epoch_wanted = max(self._epoch_wanted, cp.epoch)
        self._check_epoch(p, state)
        log.info("%s: partition %d sought to offset %d (epoch %d)", self.name, p, state.watermark, cp.epoch)

    def on_seeked(self, done: dict[int, int]) -> None:
        self._loop.call_soon_threadsafe(self._sought, done)

    def _sought(self, done: dict[int, int]) -> None:
        """Records count again once the consumer has moved to the last offset asked for: the
        end of an earlier seek while a later one is pending does not."""
        for p, offset in done.items():
            if self._seeking.get(p) == offset:
                del self._seeking[p]

    def apply_local(self, p: int, cmd: Command, key: bytes | None, settles: bool = False) -> None:
        """Apply a command this process has written to the log (`key`), or is still writing
        (None: its key is folded when the write ends).

        `settles`: the command ends deliveries (an ack or a nack); streams holding them get room.
        """
        state = self.states.get(p)
        if state is not None:
            state.apply(cmd, now_ms())
        if key is not None:
            self._claim(p, (key,))
        if settles:
            self.tell_settled(p, cmd)

    def tell_settled(self, p: int, cmd: Command) -> None:
        """Tell the streams that the command (an ack or a nack) ends their deliveries: they
        have room for more."""
        if self.settle_listeners:
            offsets = _offsets_of(cmd)
            for listener in list(self.settle_listeners):
                listener(p, offsets)

    def fold(self, p: int, key: bytes) -> None:
        """A command applied here before its write ended is in the log now: its key is
        tombstoned with the next checkpoint, and the log reader skips it."""
        self._claim(p, (key,))

    def _claim(self, p: int, keys: Iterable[bytes]) -> None:
        """Commands this process wrote are in the log and applied here: their keys are
        tombstoned with the next checkpoint, and the log reader skips them. Only keys still
        being written count: one the writer let go of (`_install`) is the reader's to apply."""
        writing = self.writer.writing
        mine = [k for k in keys if k in writing]
        writing.difference_update(mine)
        folded = self._folded.get(p)
        if folded is not None:
            folded.update(mine)

    def _after_change(self) -> None:
        self._update_wants()
        if self.has_ready():
            self.ready.set()

    # -- delivery --------------------------------------------------------------------------

    def take(
        self,
        n: int,
        deadline_ms: int,
        max_bytes: int | None = None,
    ) -> list[tuple[int, int, int, Record]]:
        """Lease up to n messages across owned partitions: (partition, offset, generation, record),
        and, given `max_bytes`, no more than fit a response of that size (Record.wire_size; one
        message at least). What does not fit is not leased and spends no delivery attempt.

        PERMISSION_DENIED while Kafka's authorizer refuses what serving the subscription takes:
        the group, its topic, or a dead-letter transaction."""
        if self.denied is not None:
            raise self.denied
        if self._dead_letters_denied:
            raise next(iter(self._dead_letters_denied.values()))[0]
        now = now_ms()
        out: list[tuple[int, int, int, Record]] = []
        states = self._deliverable()
        share = max(1, n // max(1, len(states)))
        budget = None if max_bytes is None else Budget(max_bytes, _wire_size)
        for rnd in range(2):  # a fair share from each partition first, then whatever is left
            for state in states:
                want = n - len(out)
                if want <= 0:
                    break
                got = state.take(min(want, share) if rnd == 0 else want, now, deadline_ms, budget)
                out.extend((state.partition, o, g, r) for o, g, r in got)
        if out:
            self.last_taken = time.monotonic()
        self._update_wants()
        return out

    async def record_leases(
        self, taken: list[tuple[int, int, int, Record]], deadline_ms: int
    ) -> list[tuple[int, int, int, Record]]:
        """Make leases durable before the client sees the messages; returns those whose lease
        is. A partition whose write failed gives its messages back; one whose write is still
        under way after LEASE_PATIENCE_SECONDS (its log lost its leader) is left out of this
        delivery and of later takes until the write ends, and then gives them back: one dead
        broker does not hold up the partitions the others lead."""
        by_partition: dict[int, list[tuple[int, int]]] = {}
        for p, o, g, _ in taken:
            by_partition.setdefault(p, []).append((o, g))
        writes = {
            p: asyncio.ensure_future(
                self.writer.write(p, [Lease(p, tuple(entries), deadline_ms, self._epoch(p))])
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
            if error is not None:
                failed = error
                if state is not None:
                    state.release(by_partition[p])
                continue
            durable.add(p)
            self._claim(p, (k for k, _ in write.result()))
        if len(durable) < len(writes):
            self._after_change()
        if not durable and failed is not None:
            raise failed
        return [t for t in taken if t[0] in durable] if len(durable) < len(writes) else taken

    def _late_lease(
        self, p: int, entries: list[tuple[int, int]], write: asyncio.Future[list[tuple[bytes, int]]]
    ) -> None:
        """A lease write given up on by its delivery has ended: the messages go back."""
        self._stalled.discard(p)
        state = self.states.get(p)
        if not write.cancelled() and write.exception() is None:
            self._claim(p, (k for k, _ in write.result()))  # in the log: not to re-apply
        if state is not None:
            state.release(entries)
        self._after_change()

    def _epoch(self, p: int) -> int:
        state = self.states.get(p)
        return state.epoch if state is not None else 0

    async def deliver(
        self, res: StoredSubscription, taken: list[tuple[int, int, int, Record]], lease_until: int
    ) -> list[Delivery]:
        """Make the leases durable, then name each delivery by its ack id (of those whose lease
        is: see record_leases)."""
        taken = await self.record_leases(taken, lease_until)
        self.tally.on_delivered(taken, now_ms())
        tag = ackids.subscription_tag(res.name, res.meta.uid)
        ids = ackids.encode_each(tag, taken)
        if res.proto.HasField("dead_letter_policy"):  # (delivery_attempt is set only then)
            return [_new_delivery((i, r, g)) for i, (_, _, g, r) in zip(ids, taken, strict=True)]
        return [_new_delivery((i, r, 0)) for i, (_, _, _, r) in zip(ids, taken, strict=True)]

    # -- the leases, as the ack path judges them (gateway/core/acks.py) --------------------

    def owns(self, p: int) -> bool:
        return p in self.states

    def judge(
        self, p: int, entries: Iterable[tuple[int, int]], acking: bool, now_ms: int, hold_until: int | None
    ) -> list[bool | None]:
        """Which (offset, generation) of partition p name current leases: PartitionState.judge."""
        return self.states[p].judge(entries, acking, now_ms, hold_until)

    def order_acks(self, p: int, offsets: list[int]) -> list[int]:
        """Of acks of leased messages, those to write now (see PartitionState.order_acks). The
        ones held back are done for the streams that delivered them: they free their room."""
        now, held = self.states[p].order_acks(offsets)
        if held:
            for listener in list(self.settle_listeners):
                listener(p, held)
        return now

    def leased(self, p: int, offset: int) -> bool:
        """Whether a message of a partition this process owns is leased now."""
        state = self.states.get(p)
        return state is not None and state.lease_of(offset) is not None

    def give_back(self, p: int, taken: list[tuple[int, int]]) -> None:
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
        whose state is of an epoch older than the subscription's record (see want_epoch)."""
        if not self._stalled and not self._behind:
            return list(self.states.values())
        return [s for p, s in self.states.items() if p not in self._stalled and p not in self._behind]

    # -- dead letters ----------------------------------------------------------------------

    async def _dead_letter_loop(self) -> None:
        while True:
            quiet = not self._dead_letters_denied and all(s.quiet() for s in self.states.values())
            await asyncio.sleep(QUIET_SWEEP_SECONDS if quiet else SWEEP_SECONDS)
            if self._behind:
                self._wait_out_epochs()
            now = now_ms()
            for p, state in list(self.states.items()):
                # Expired leases are found here too, not only by the next pull: a message whose
                # last delivery ran out must reach the dead-letter topic even if nobody pulls.
                if state.expire(now):
                    self.ready.set()
                if freed := state.take_freed():
                    await self._ack_freed(p, freed)
                denied = self._dead_letters_denied.get(p)
                if denied is not None and time.monotonic() < denied[1]:
                    continue
                self._retry_too_large(p, state)
                dead = state.take_dead()
                if not dead:
                    continue
                try:
                    await self._forward_dead(p, dead)
                except PermissionDenied as exc:
                    state.return_dead(self._unheld(p, dead))
                    if denied is None:
                        log.error("%s: dead-lettering from partition %d: %s", self.name, p, exc.message)
                    self._dead_letters_denied[p] = (exc, time.monotonic() + DENIED_RETRY_SECONDS)
                    self.ready.set()  # waiting pulls and streams end with it (see `take`)
                except Exception as exc:  # noqa: BLE001 - retried next round; the loop must live
                    state.return_dead(self._unheld(p, dead))
                    log.warning("%s: dead-lettering from partition %d failed: %s", self.name, p, exc)
                else:
                    self._dead_letters_denied.pop(p, None)

    async def _ack_freed(self, p: int, offsets: list[int]) -> None:
        """Write the provisional acks of ordered delivery that an ack read from the log freed."""
        ack = Ack(p, tuple(to_ranges(offsets)), self._epoch(p))
        try:
            written = await self.writer.write(p, [ack])
        except Exception as exc:  # noqa: BLE001 - the loop must live; the messages come back
            log.warning(
                "%s: writing %d held acks of partition %d failed: %s", self.name, len(offsets), p, exc
            )
            return
        self.apply_local(p, ack, written[0][0], settles=True)

    async def _forward_dead(self, p: int, dead: list[tuple[int, int, Record]]) -> None:
        """Publish to the dead-letter topic and ack on this subscription, in transactions: each
        message lands in the dead-letter topic exactly once, even across crashes. All in one
        transaction, unless the topic refused one's batch as too large (an adopted topic takes
        less than the producer's batches): then one message a transaction, and one that the
        topic refuses even alone is held back (_hold_too_large)."""
        target = self.policies.dead_letter_kafka_topic
        if target is None:
            raise RuntimeError("the dead-letter topic does not exist")
        groups = [dead] if target not in self._dead_alone else [[d] for d in dead]
        for group in groups:
            try:
                await self._transact_dead(p, target, group)
            except InvalidArgument as exc:  # the only one a write raises: Kafka's "too large"
                # The refused batch used up sequence numbers the broker never saw: the next
                # transaction of this producer would fail for the gap. A new one starts clean.
                sender = self._dead_letter_senders.pop(p, None)
                if sender is not None:
                    await sender.close()
                if len(group) == 1:
                    self._hold_too_large(p, group[0][0], target, exc)
                    continue
                log.warning(
                    "%s: dead-letter topic %s refused a batch as too large; it gets one message "
                    "a transaction from now on",
                    self.name,
                    target,
                )
                self._dead_alone.add(target)
                await self._forward_dead(p, group)

    def _hold_too_large(self, p: int, offset: int, target: str, exc: InvalidArgument) -> None:
        """A dead message its dead-letter topic refuses even alone: not lost, not delivered; it
        stays taken, and is tried again after TOO_LARGE_RETRY_SECONDS (the topic's limit may be
        raised meanwhile)."""
        log.warning(
            "%s: the dead message at partition %d, offset %d, is too large for dead-letter topic "
            "%s (%s); it stays in the subscription and is tried again in %.0f s",
            self.name,
            p,
            offset,
            target,
            exc.message,
            TOO_LARGE_RETRY_SECONDS,
        )
        self._dead_too_large.setdefault(p, {})[offset] = time.monotonic() + TOO_LARGE_RETRY_SECONDS

    def _unheld(self, p: int, dead: list[tuple[int, int, Record]]) -> list[int]:
        """The offsets of `dead` not held back as too large for the dead-letter topic."""
        held = self._dead_too_large.get(p, {})
        return [o for o, _, _ in dead if o not in held]

    def _retry_too_large(self, p: int, state: PartitionState[Record]) -> None:
        held = self._dead_too_large.get(p)
        if not held:
            return
        now = time.monotonic()
        due = [offset for offset, when in held.items() if when <= now]
        for offset in due:
            del held[offset]
        state.return_dead(due)

    async def _transact_dead(self, p: int, target: str, dead: list[tuple[int, int, Record]]) -> None:
        """`dead` to `target` and their ack to the lease log, in one transaction."""
        sender = self._dead_letter_senders.get(p)
        if sender is None:
            sender = TransactionalSender(self._config, f"{self._txn_prefix}.{self.writer.topic}.{p}")
            await sender.start()
            self._dead_letter_senders[p] = sender
        ack = Ack(p, tuple(to_ranges(o for o, _, _ in dead)), self._epoch(p))
        key = self.writer.key(p)
        with self.writer.holding([key]):  # applied here, as a LogWriter.write is: not by the reader
            await sender.send(
                [
                    *(
                        (target, None, r.key, r.value, dead_letter_headers(r, self.name, n))
                        for _, n, r in dead
                    ),
                    (self.writer.topic, p, key, logformat.encode(ack), None),
                ]
            )
        self.apply_local(p, ack, key, settles=True)
        self.tally.on_dead_lettered(p, [o for o, _, _ in dead])
        log.info("%s: dead-lettered %d messages of partition %d", self.name, len(dead), p)

    # -- truncation policy (docs/truncation.md) ---------------------------------------------

    async def _truncation_loop(self) -> None:
        while True:
            await asyncio.sleep(TRUNCATION_CHECK_SECONDS)
            if not self.policies.truncates and not self._truncated:
                continue
            try:
                await self.truncate_by_policy(now_ms())
            except Exception as exc:  # noqa: BLE001 - tried again next round; the loop must live
                log.warning("%s: applying the truncation policy failed: %s", self.name, exc)

    async def truncate_by_policy(self, now: int) -> int:
        """Drop what the truncation policy says must go, from the partitions this process owns:
        acknowledged in the lease/ack log as their owner. Returns how many messages went (with
        those dropped as they were fetched since the last round); the subscription is told
        (`on_truncated`) when any did."""
        policies = self.policies
        views = {p: trim.PartitionView(trim.held(s.records), s.next_offset) for p, s in self.states.items()}
        drops: dict[int, list[int]] = {}
        if policies.truncate_max_age_ms:
            drops = trim.by_age(views, now - policies.truncate_max_age_ms)
        elif policies.truncate_max_bytes:
            ends = await self._partition_ends() if not self._wants else {}
            views = {p: dataclasses.replace(v, end=ends.get(p)) for p, v in views.items()}
            drops = trim.by_bytes(views, policies.truncate_max_bytes)
        try:
            for p, offsets in drops.items():
                state = self.states.get(p)
                if state is None:
                    continue
                ack = Ack(p, tuple(to_ranges(offsets)), state.epoch)
                written = await self.writer.write(p, [ack])
                self.apply_local(p, ack, written[0][0], settles=True)
                self._truncated += len(offsets)
        finally:
            if drops:
                self._after_change()
        # Counted until the event is raised: a write or a raise that failed is told next round.
        dropped = self._truncated
        if dropped:
            log.info("%s: truncation policy dropped %d messages", self.name, dropped)
            if self._on_truncated is not None:
                await self._on_truncated(self.name)
            self._truncated -= dropped
        return dropped

    async def _partition_ends(self) -> dict[int, int]:
        """Where the owned partitions end, asked of Kafka at most every TRUNCATION_ENDS_SECONDS."""
        asked, ends = self._ends
        if time.monotonic() - asked < TRUNCATION_ENDS_SECONDS:
            return ends

        def ask() -> dict[int, int]:
            return {
                p: kafka_consumer.end_offset(self._config, self._kafka_topic, p) for p in list(self.states)
            }

        ends = await asyncio.to_thread(ask)
        self._ends = (time.monotonic(), ends)
        return ends

    # -- checkpoints -----------------------------------------------------------------------

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self._checkpoint_interval)
            # All partitions at once: one whose log has no leader for a while must not hold up
            # the checkpoints (and the committed offsets) of the others.
            await asyncio.gather(
                *(self._checkpoint_logged(p, state) for p, state in list(self.states.items()) if state.dirty)
            )

    async def _checkpoint_logged(self, p: int, state: PartitionState[Record]) -> None:
        try:
            self._settle_deferred(p, now_ms())
            await self._checkpoint(p, state, self._folded.get(p, set()), self._folded_below(p))
        except Exception as exc:  # noqa: BLE001 - retried next round; the loop must live
            log.warning("%s: checkpoint of partition %d failed: %s", self.name, p, exc)

    async def _checkpoint(
        self, p: int, state: PartitionState[Record], folded: set[bytes], log_applied: int
    ) -> None:
        state.dirty = False
        keys = list(folded)
        folded.difference_update(keys)
        cp = dataclasses.replace(state.checkpoint(), log_offset=log_applied)
        try:
            await self._producer.send(
                self.writer.topic,
                [(logformat.checkpoint_key(p, cp.epoch), logformat.encode(cp), None)],
                partition=p,
            )
        except Exception:
            folded.update(keys)
            state.dirty = True
            raise
        if keys:
            await self._producer.send(self.writer.topic, [(k, None, None) for k in keys], partition=p)
        self._fetcher.request_commit({p: cp.watermark})


def _record_key(record: Record) -> bytes | None:
    return record.key


def _offsets_of(cmd: Command) -> list[int]:
    if isinstance(cmd, Ack):
        return [o for start, end in cmd.ranges for o in range(start, end)]
    if isinstance(cmd, SetDeadline):
        return [o for o, _ in cmd.entries]
    return []
