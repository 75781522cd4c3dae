"""The delivery state of one partition of one subscription, owned by one gateway process.

Pure: no I/O, time passed in. The owner feeds it records fetched from Kafka (`add_records`),
takes messages to deliver (`take`), and applies commands (`apply`), whether they came from
its own clients or from the lease/ack log. Everything below `watermark` is acknowledged; above
it, `acked` holds acknowledged (or absent) offsets, `leases` the delivered ones and `attempts`
how often each unacked offset has been delivered.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Generic, NamedTuple, TypeAlias, TypeVar

from gateway.leases.commands import Ack, Checkpoint, Command, Lease, LeaseRef, SetDeadline
from gateway.leases.ranges import Range, RangeSet

R = TypeVar("R")
V = TypeVar("V")
# Stale entries the expiry queue may hold beyond twice the leases before it is rebuilt.
STALE_SLACK = 1024

# What `take` and `take_dead` give out, one per message: plain tuples, named here only. A named
# tuple costs 2-3 times a tuple to build (and more to unpack: CPython's fast path takes exact
# tuples only), and these are made per delivered message.
Leased: TypeAlias = tuple[int, int, R]  # (offset, generation, record): a message leased by `take`
DeadLetter: TypeAlias = tuple[int, int, R]  # (offset, deliveries, record): due for the dead-letter topic


class LeaseTerm(NamedTuple):
    """A lease as `lease_of` tells it."""

    generation: int
    deadline_ms: int


class AckOrder(NamedTuple):
    """What `order_acks` makes of acks of leased messages under ordered delivery."""

    now: list[int]  # to write now (with the provisional acks this frees)
    held: list[int]  # held back until every earlier message of their key is acked


_tuple_new = tuple.__new__  # a named tuple from a tuple, without the frame of its __new__


class Budget(Generic[R]):
    """What one response may still hold, in bytes as `cost` counts them, across the takes of its
    partitions (`PartitionState.take` pays). The first message is always paid for, whatever it
    costs: a response carries at least one."""

    __slots__ = ("cost", "left", "paid")

    def __init__(self, max_bytes: int, cost: Callable[[R], int]) -> None:
        self.left = max_bytes
        self.cost = cost
        self.paid = 0


class PartitionState(Generic[R]):
    """`key_of`, when given, turns on ordered delivery: messages that share a key are delivered
    in offset order, a key's messages are leased only while none of its earlier ones is, and the
    release (nack, expiry) of one redelivers every later delivered message of that key too, in
    order, acknowledged or not: an ack of a message whose key has an earlier one still out is
    held back (`order_acks`) until that one is acked, and dropped if it comes back."""

    def __init__(
        self,
        partition: int,
        watermark: int,
        epoch: int = 0,
        key_of: Callable[[R], bytes | None] | None = None,
    ) -> None:
        # What the partition is and how it is delivered: set here only, so that a seek, which
        # starts the lease state over (`_start_over`), keeps them all.
        self.partition = partition
        self.key_of = key_of
        # Retry policy: delivery count -> delay before a nacked or expired message is redelivered.
        self.backoff: Callable[[int], int] | None = None
        # Dead-letter policy: after this many deliveries a failed message is handed over.
        self.max_attempts: int | None = None
        # Told how many leases each `expire` released (the metrics count them: core/tally.py).
        self.on_expired: Callable[[int], None] | None = None
        self._start_over(watermark, epoch)

    def _start_over(self, watermark: int, epoch: int) -> None:
        """The lease state of a partition nothing has been fetched from nor delivered of yet:
        all of it, and nothing else (a policy belongs in `__init__`)."""
        self.epoch = epoch
        self.watermark = watermark
        self.acked = RangeSet()
        # offset -> (generation, deadline_ms): a plain tuple, made per delivery (see LeaseTerm)
        self.leases: dict[int, tuple[int, int]] = {}
        self.attempts: dict[int, int] = {}  # offset -> deliveries so far, unacked offsets only
        self.records: dict[int, R] = {}  # content of unacked offsets held in memory
        self.next_offset = watermark  # the next offset the fetcher will hand over
        self.dirty = False
        self._ready: list[int] = []
        self._ready_set: set[int] = set()
        # When leases end: a heap of deadlines (ms), and the offsets leased until each. A lease
        # that ends or moves leaves a stale entry, skipped where met (the lease's deadline is no
        # longer that one) and dropped when they outnumber the leases (`_compact_expiry`).
        # Bucketed: a delivery or a deadline change gives many leases one deadline at once.
        self._expiry: list[int] = []
        self._due: dict[int, list[int]] = {}
        self._due_entries = 0  # offsets in _due, stale ones included
        self._key_leases: dict[bytes, set[int]] = {}  # ordering key -> its leased offsets
        self._deferred: dict[bytes, list[int]] = {}  # ordering key -> ready offsets held back
        self._delayed: list[tuple[int, int]] = []  # (due_ms, offset), backed off by the retry policy
        self._waiting: set[int] = set()  # offsets in _delayed
        self._dead: dict[int, bool] = {}  # offset -> being forwarded now (to the dead-letter topic)
        # Deliveries that ended only because an earlier message of the key failed: they do not
        # count as failures of their own toward max_attempts (kept in memory only).
        self._pulled_back: dict[int, int] = {}
        # Ordered delivery: acked by the client while an earlier message of the key is still
        # out. Leased still, but not expiring: written as acks once every earlier message of the
        # key is acked (`order_acks`), redelivered with it if it comes back (kept in memory only).
        self._provisional: set[int] = set()

    # -- queries ---------------------------------------------------------------------------

    @property
    def ready_count(self) -> int:
        return len(self._ready_set)

    def next_expiry(self) -> int | None:
        """When the next lease expires or the next backed-off message becomes due."""
        if self._due_entries > 2 * len(self.leases) + STALE_SLACK:
            self._compact_expiry()
        expiry, due, leases, provisional = self._expiry, self._due, self.leases, self._provisional
        dropped = 0
        while expiry:
            deadline = expiry[0]
            offsets = due[deadline]
            while offsets:
                lease = leases.get(offsets[-1])
                if lease is not None and lease[1] == deadline and offsets[-1] not in provisional:
                    break
                offsets.pop()
                dropped += 1
            if offsets:
                break
            heapq.heappop(expiry)
            del due[deadline]
        self._due_entries -= dropped
        if not self._delayed:
            return expiry[0] if expiry else None
        backed_off = self._delayed[0][0]
        return min(backed_off, expiry[0]) if expiry else backed_off

    def quiet(self) -> bool:
        """Nothing a sweep (SubscriptionRunner's) could find now: no lease to expire, no
        message for the dead-letter topic, no ordered ack held back."""
        return not self.leases and not self._dead and not self._provisional

    def take_dead(self) -> list[DeadLetter[R]]:
        """Messages due for the dead-letter topic: (offset, deliveries, record), marked in flight."""
        out = []
        for offset, flying in self._dead.items():
            if not flying and offset in self.records:
                self._dead[offset] = True
                out.append((offset, self.attempts.get(offset, 0), self.records[offset]))
        return out

    def return_dead(self, offsets: Iterable[int]) -> None:
        """Forwarding failed: try these again later."""
        for offset in offsets:
            if offset in self._dead:
                self._dead[offset] = False

    def is_acked(self, offset: int) -> bool:
        return offset < self.watermark or offset in self.acked

    def lease_of(self, offset: int) -> LeaseTerm | None:
        lease = self.leases.get(offset)
        return None if lease is None else _tuple_new(LeaseTerm, lease)

    def judge(
        self, entries: Iterable[LeaseRef], acking: bool, now_ms: int, hold_until: int | None = None
    ) -> list[bool | None]:
        """For each (offset, generation) an ack id names: True if it names the current,
        unexpired lease, False if not; with `acking`, None for an offset acked already (acking
        again succeeds; an acked offset has no lease). `hold_until`: a current lease runs at
        least that long, so that it does not expire while an ack of it is being written."""
        leases, watermark = self.leases, self.watermark
        out: list[bool | None] = []
        for offset, gen in entries:
            lease = leases.get(offset)
            if lease is not None and lease[0] == gen and lease[1] > now_ms:
                if hold_until is not None and lease[1] < hold_until:
                    self._lease(offset, gen, hold_until)
                out.append(True)
            elif acking and (offset < watermark or offset in self.acked):
                out.append(None)
            else:
                out.append(False)
        return out

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(
            partition=self.partition,
            watermark=self.watermark,
            acked=tuple(self.acked),
            leases=tuple((s, e, g, d) for s, e, (g, d) in self._runs(self.leases)),
            attempts=tuple(self._runs(self.attempts)),
            epoch=self.epoch,
        )

    def _runs(self, values: dict[int, V]) -> list[tuple[int, int, V]]:
        """(start, end, value) runs of equal values, bridging gaps that are wholly acked."""
        runs: list[tuple[int, int, V]] = []
        acked = self.acked
        start = end = -1
        current: V | None = None
        for offset, value in sorted(values.items()):
            if value == current and (offset == end or acked.first_missing_from(end) >= offset):
                end = offset + 1
                continue
            if current is not None:
                runs.append((start, end, current))
            start, end, current = offset, offset + 1, value
        if current is not None:
            runs.append((start, end, current))
        return runs

    # -- the fetcher's side ----------------------------------------------------------------

    def add_records(self, records: Iterable[tuple[int, R]]) -> None:
        """Records fetched from Kafka, in offset order; gaps between them count as acked."""
        acked = self.acked
        acked_end = acked.end
        for offset, record in records:
            if offset < self.next_offset:
                continue  # seen already (a re-fetch after a seek)
            if offset > self.next_offset:
                acked.add(self.next_offset, offset)
                acked_end = acked.end
            self.next_offset = offset + 1
            if offset < self.watermark or (offset < acked_end and offset in acked):
                continue  # acked (the common case, a new offset, lies beyond every acked range)
            self.records[offset] = record
            if offset in self.leases or offset in self._waiting or offset in self._dead:
                self._hold_key(self._key(offset), offset)
            elif self.max_attempts and self._failures(offset) >= self.max_attempts:
                # Used up its deliveries before a restart: forward it without waiting for a pull.
                self._dead[offset] = False
                self._hold_key(self._key(offset), offset)
            else:
                self._make_ready(offset)
        self._advance()

    # -- the delivery side -----------------------------------------------------------------

    def take(self, n: int, now_ms: int, deadline_ms: int, budget: Budget[R] | None = None) -> list[Leased[R]]:
        """Lease up to n messages until deadline_ms: (offset, generation, record), oldest first.

        With a `budget`, only what it can still pay for: the first message that does not fit
        stays ready, untouched (no lease, no delivery attempt), and so do all after it."""
        self.expire(now_ms)
        self._promote(now_ms)
        out: list[Leased[R]] = []
        batch_keys: set[bytes] = set()
        # Once per delivered message: what the loop reads, in locals.
        ready, ready_set, leases, records, attempts = (
            self._ready,
            self._ready_set,
            self.leases,
            self.records,
            self.attempts,
        )
        key_of, dead, max_attempts = self.key_of, self._dead, self.max_attempts
        # The budget's accounts, in locals while the loop runs (a method call per message cost
        # more than the rest of the payment): written back after it.
        if budget is not None:
            cost, left, paid = budget.cost, budget.left, budget.paid
        if self._due_entries > 2 * len(leases) + STALE_SLACK:
            self._compact_expiry()
        expiring = self._due_at(deadline_ms).append  # every lease of the take ends then: `_lease`
        while ready and len(out) < n:
            offset = heapq.heappop(ready)
            ready_set.discard(offset)
            record = records.get(offset)
            if record is None or offset in leases or offset in dead:
                continue
            key = key_of(record) if key_of is not None else None
            if max_attempts and self._failures(offset) >= max_attempts:
                dead[offset] = False  # used up its deliveries before a restart
                self._hold_key(key, offset)
                continue
            if key is not None and key not in batch_keys and self._key_leases.get(key):
                heapq.heappush(self._deferred.setdefault(key, []), offset)
                continue  # an earlier message of this key is still out
            if budget is not None:
                size = cost(record)
                if paid and size > left:  # it stays ready, unleased, and so does all after it
                    self._make_ready(offset)
                    break
                left -= size
                paid += 1
            if key is not None:
                batch_keys.add(key)
            gen = attempts.get(offset, 0) + 1
            attempts[offset] = gen
            leases[offset] = (gen, deadline_ms)
            expiring(offset)
            if key is not None:
                self._key_leases.setdefault(key, set()).add(offset)
            out.append((offset, gen, record))
        if budget is not None:
            budget.left, budget.paid = left, paid
        self._due_entries += len(out)
        if out:
            self.dirty = True
        return out

    def release(self, taken: Iterable[LeaseRef]) -> None:
        """Give back leases that never reached a client (their log write failed, or they did
        not fit a stream): the delivery did not happen, so it counts as no failure."""
        for offset, gen in taken:
            if self.leases.get(offset, (None,))[0] == gen:
                self._release(offset)
                # A new generation next time (this one may be in the log), but no failure.
                self._pulled_back[offset] = self._pulled_back.get(offset, 0) + 1

    def expire(self, now_ms: int) -> int:
        """Release every lease whose deadline has passed; returns how many."""
        n = 0
        expiry, leases = self._expiry, self.leases
        while expiry and expiry[0] <= now_ms:
            deadline = heapq.heappop(expiry)
            offsets = self._due.pop(deadline)
            self._due_entries -= len(offsets)
            for offset in sorted(set(offsets)):  # in offset order, as ordered delivery needs
                lease = leases.get(offset)
                if lease is not None and lease[1] == deadline and offset not in self._provisional:
                    self._release(offset, now_ms)
                    n += 1
        if n and self.on_expired is not None:
            self.on_expired(n)
        return n

    def _promote(self, now_ms: int) -> None:
        """Backed-off messages whose time has come become ready (first of their key again)."""
        while self._delayed and self._delayed[0][0] <= now_ms:
            _, offset = heapq.heappop(self._delayed)
            if offset not in self._waiting:
                continue
            self._waiting.discard(offset)
            key = self._key(offset)
            if offset in self.records:
                self._make_ready(offset)
            if key is not None and key in self._key_leases:
                self._key_leases[key].discard(offset)
                self._settle_key(key)

    def order_acks(self, offsets: Iterable[int]) -> AckOrder:
        """Ordered delivery: which acks of leased messages may be written now, and which are
        held back. An ack counts at once when every earlier message of its key still out is
        acked with it or before; the others become provisional (see `_provisional`). Returns
        (offsets to ack now, with the provisional ones this frees; offsets held back)."""
        acking = set(offsets)
        if self.key_of is None:
            return AckOrder(sorted(acking), [])
        now: list[int] = []
        keys: dict[bytes, set[int]] = {}
        for offset in acking:
            key = self._key(offset)
            if key is None or not self._key_leases.get(key):
                now.append(offset)
            else:
                keys.setdefault(key, set()).add(offset)
        held: list[int] = []
        for key, mine in keys.items():
            blocked = False
            for offset in sorted(self._key_leases[key] | mine):
                settled = offset in acking or offset in self._provisional
                if settled and not blocked:
                    self._unhold_ack(offset)
                    now.append(offset)
                elif offset in acking:
                    self._provisional.add(offset)
                    held.append(offset)
                elif not settled:
                    blocked = True
        return AckOrder(sorted(now), sorted(held))

    def take_freed(self) -> list[int]:
        """Provisional acks whose key has nothing earlier out any more, because that was acked
        another way (read from the log: a Spark job's ack, a checkpoint): to be written as acks
        now, as `order_acks` would have."""
        out = []
        for offset in sorted(self._provisional):
            key = self._key(offset)
            out_before = key is not None and any(
                o < offset and o not in self._provisional for o in self._key_leases.get(key, ())
            )
            if not out_before:
                out.append(offset)
        for offset in out:
            self._unhold_ack(offset)
        return out

    def _unhold_ack(self, offset: int) -> None:
        """A provisional ack is to be written: until it is applied, its lease runs as any other
        (if the write fails, the message comes back when the lease ends)."""
        if offset in self._provisional:
            self._provisional.discard(offset)
            if (lease := self.leases.get(offset)) is not None:
                self._due_at(lease[1]).append(offset)
                self._due_entries += 1

    # -- commands --------------------------------------------------------------------------

    def apply(self, cmd: Command, now_ms: int) -> None:
        if cmd.epoch < self.epoch:
            return
        match cmd:
            case Ack():
                self._apply_ack(cmd.ranges)
            case Lease():
                for offset, gen in cmd.entries:
                    self._apply_lease(offset, gen, cmd.deadline_ms)
            case SetDeadline():
                self._apply_deadline(cmd.entries, cmd.deadline_ms, now_ms)
            case Checkpoint():
                self._apply_checkpoint(cmd)
        self.dirty = True

    def _apply_ack(self, ranges: Iterable[Range]) -> None:
        rare = self._rarely_used()  # (nothing below adds to them)
        leases, attempts, records, ready = self.leases, self.attempts, self.records, self._ready_set
        for start, end in ranges:
            start = max(start, self.watermark)
            if start >= end:
                continue
            self.acked.add(start, end)
            if end - start <= 64 or end - start <= len(self.attempts) + len(self.records):
                offsets: Iterable[int] = range(start, end)
            else:
                offsets = [o for o in {*self.attempts, *self.records} if start <= o < end]
            if rare:
                for offset in offsets:
                    self._forget(offset)
                continue
            # Once per acked message, and nothing but these four hold it: _forget, inlined.
            for offset in offsets:
                leases.pop(offset, None)
                attempts.pop(offset, None)
                records.pop(offset, None)
                ready.discard(offset)
        self._advance()

    def _rarely_used(self) -> bool:
        """Whether any of the structures that are empty almost always holds something: dead
        letters, provisional acks, redeliveries pulled back, retry backoff, ordering keys."""
        return bool(
            self._dead
            or self._provisional
            or self._pulled_back
            or self._waiting
            or (self.key_of is not None and self._key_leases)
        )

    def _apply_lease(self, offset: int, gen: int, deadline_ms: int) -> None:
        if self.is_acked(offset) or gen <= self.attempts.get(offset, 0):
            return  # our own lease read back, or one already superseded
        self.attempts[offset] = gen
        self._ready_set.discard(offset)
        self._lease(offset, gen, deadline_ms)

    def _apply_deadline(self, entries: Iterable[LeaseRef], deadline_ms: int, now_ms: int) -> None:
        leases = self.leases
        if deadline_ms <= now_ms or self.key_of is not None:
            for offset, gen in entries:
                lease = leases.get(offset)
                if lease is None or lease[0] != gen:
                    continue  # stale ack id: that delivery is over
                if deadline_ms <= now_ms:
                    self._release(offset, now_ms)
                else:
                    self._lease(offset, gen, deadline_ms)
            return
        # Once per message of every receipt modack and extension: `_lease`, inlined, with the
        # one deadline's bucket looked up once (no ordering keys to keep here).
        if self._due_entries > 2 * len(leases) + STALE_SLACK:
            self._compact_expiry()
        due, moved = self._due_at(deadline_ms), 0
        for offset, gen in entries:
            lease = leases.get(offset)
            if lease is None or lease[0] != gen:
                continue  # stale ack id: that delivery is over
            leases[offset] = (gen, deadline_ms)
            due.append(offset)
            moved += 1
        self._due_entries += moved

    def _apply_checkpoint(self, cp: Checkpoint) -> None:
        if cp.epoch > self.epoch:  # a seek
            self._start_over(cp.watermark, cp.epoch)
        if cp.watermark > self.watermark:
            self._apply_ack([(self.watermark, cp.watermark)])
        self._apply_ack(cp.acked)
        for start, end, n in cp.attempts:
            for offset in range(max(start, self.watermark), end):
                if n > self.attempts.get(offset, 0) and not self.is_acked(offset):
                    self.attempts[offset] = n
        for start, end, gen, deadline in cp.leases:
            for offset in range(max(start, self.watermark), end):
                newer = gen >= self.attempts.get(offset, 0) and self.leases.get(offset, (0,))[0] < gen
                if newer and not self.is_acked(offset):
                    self.attempts[offset] = gen
                    self._ready_set.discard(offset)
                    self._lease(offset, gen, deadline)

    # -- internals -------------------------------------------------------------------------

    def _key(self, offset: int) -> bytes | None:
        if self.key_of is None:
            return None
        record = self.records.get(offset)
        return None if record is None else self.key_of(record)

    def _lease(self, offset: int, gen: int, deadline_ms: int) -> None:
        if self._due_entries > 2 * len(self.leases) + STALE_SLACK:
            self._compact_expiry()
        self.leases[offset] = (gen, deadline_ms)
        self._due_at(deadline_ms).append(offset)
        self._due_entries += 1
        if self.key_of is not None and (key := self._key(offset)) is not None:
            self._key_leases.setdefault(key, set()).add(offset)

    def _due_at(self, deadline_ms: int) -> list[int]:
        """The offsets leased until `deadline_ms`, to add to (counted in `_due_entries`)."""
        offsets = self._due.get(deadline_ms)
        if offsets is None:
            self._due[deadline_ms] = offsets = []
            heapq.heappush(self._expiry, deadline_ms)
        return offsets

    def _compact_expiry(self) -> None:
        """Rebuild the expiry queue from the leases. Its entries go stale when a lease ends or
        moves (acks, deadline changes: two or more per message), and each stale entry would
        otherwise be dropped one by one when it comes to the front, long after; a rebuild once
        they outnumber the leases costs less per entry."""
        provisional = self._provisional
        due: dict[int, list[int]] = {}
        for offset, (_, deadline) in self.leases.items():
            if offset not in provisional:
                offsets = due.get(deadline)
                if offsets is None:
                    due[deadline] = offsets = []
                offsets.append(offset)
        self._due = due
        self._expiry = list(due)
        heapq.heapify(self._expiry)
        self._due_entries = sum(map(len, due.values()))

    def _release(self, offset: int, now_ms: int | None = None) -> None:
        """End a lease. With now_ms the delivery failed (nack, expiry): the retry and
        dead-letter policies apply; without it the message simply becomes ready again."""
        del self.leases[offset]
        self._provisional.discard(offset)
        self.dirty = True
        key = self._key(offset)
        held = self._key_leases.get(key) if key is not None else None
        if held is not None:
            held.discard(offset)
        self._requeue(offset, now_ms, key)
        if key is not None and held is not None:
            for later in sorted(o for o in held if o > offset and o in self.leases):
                held.discard(later)  # the rest of the key comes back too, in order, acked or not
                del self.leases[later]
                self._provisional.discard(later)
                self._pulled_back[later] = self._pulled_back.get(later, 0) + 1
                self._requeue(later, None, key)
            self._settle_key(key)

    def _failures(self, offset: int) -> int:
        return self.attempts.get(offset, 0) - self._pulled_back.get(offset, 0)

    def _requeue(self, offset: int, now_ms: int | None, key: bytes | None) -> None:
        deliveries = self._failures(offset)
        if now_ms is not None and self.max_attempts and deliveries >= self.max_attempts:
            self._dead[offset] = False
            self._hold_key(key, offset)
            return
        delay = self.backoff(deliveries) if now_ms is not None and self.backoff else 0
        if delay > 0 and now_ms is not None:
            heapq.heappush(self._delayed, (now_ms + delay, offset))
            self._waiting.add(offset)
            self._hold_key(key, offset)
            return
        if offset in self.records:
            self._make_ready(offset)

    def _hold_key(self, key: bytes | None, offset: int) -> None:
        """A message waiting (backoff, dead letter) keeps the later messages of its key back."""
        if key is not None:
            self._key_leases.setdefault(key, set()).add(offset)

    def _settle_key(self, key: bytes) -> None:
        """When a key has nothing leased, its held-back messages may go out again."""
        if self._key_leases.get(key):
            return
        self._key_leases.pop(key, None)
        for offset in self._deferred.pop(key, []):
            self._make_ready(offset)

    def _make_ready(self, offset: int) -> None:
        if offset not in self._ready_set:
            self._ready_set.add(offset)
            heapq.heappush(self._ready, offset)

    def _forget(self, offset: int) -> None:
        # Once per acked message: the structures that are empty almost always (dead letters,
        # ordering, retry backoff) are looked into only when they are not.
        if self._dead:
            self._dead.pop(offset, None)
        if self._provisional:
            self._provisional.discard(offset)
        if self._pulled_back:
            self._pulled_back.pop(offset, None)
        if self._waiting:
            self._waiting.discard(offset)
        if self.key_of is not None and self._key_leases:
            key = self._key(offset)
            if key is not None and key in self._key_leases:
                self._key_leases[key].discard(offset)
                self._settle_key(key)
        self.leases.pop(offset, None)
        self.attempts.pop(offset, None)
        self.records.pop(offset, None)
        self._ready_set.discard(offset)

    def _advance(self) -> None:
        w = self.acked.first_missing_from(self.watermark)
        if w > self.watermark:
            self.watermark = w
            self.acked.discard_below(w)
            self.next_offset = max(self.next_offset, w)
            self.dirty = True
