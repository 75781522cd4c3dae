"""What the metrics count as it happens: per subscription and per topic, in this process.

The counts that cannot be read off the delivery state when /metrics is scraped (how many
messages were delivered, acked, nacked, expired, dead-lettered; how long acks took; push
outcomes; what was published) are kept here as plain integers, the cheapest thing a hot path can
add to. gateway/observe reads them when scraped. A `Tally` outlives the runner that counts into
it (runners stop when idle and start again), so counters only ever grow while the process lives.

Cardinality is bounded: the first `cap` subscriptions (and topics) counted by this process get a
tally of their own, labelled with their name; every later one shares one tally labelled
`OTHER`. A subscription or topic that is deleted gives its place back (`forget`).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

OTHER = "_other"
# Ack latency buckets, in milliseconds (upper bounds); Cloud Monitoring's ack_latencies is in ms too.
ACK_LATENCY_BOUNDS_MS: tuple[int, ...] = (
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000,
)  # fmt: skip
# Delivery times kept for ack latency: past this many outstanding per subscription, new
# deliveries are not timed (their acks count, but add nothing to the latency histogram).
MAX_TIMED = 100_000
# A delivery not acked within this long is no longer timed (it expired, was nacked elsewhere, or
# its partition moved): its entry is dropped when the table is pruned.
TIMED_FOR_MS = 3_600_000

_partition, _offset = operator.itemgetter(0), operator.itemgetter(1)

# Push outcomes, as Cloud Monitoring's push_request_count labels them (response_class).
PUSH_CLASSES = (
    "ack",
    "deadline_exceeded",
    "invalid",
    "remote_server_4xx",
    "remote_server_5xx",
    "unreachable",
)


def push_class(ok: bool, detail: str, refused: bool) -> str:
    """The response_class of one push: its outcome as gateway/push/sender.py describes it
    ("HTTP 503", "timeout", "ClientConnectorError: ...", or refused by the destination policy)."""
    if ok:
        return "ack"
    if refused:
        return "invalid"
    if detail.startswith("HTTP "):
        return "remote_server_4xx" if detail[5:6] == "4" else "remote_server_5xx"
    if detail == "timeout":
        return "deadline_exceeded"
    return "unreachable"


class Tally:
    """One subscription's counts in this process. Only the event loop touches it."""

    __slots__ = (
        "ack_latency_buckets",
        "ack_latency_sum_ms",
        "acked",
        "dead_lettered",
        "delivered",
        "expired",
        "nacked",
        "push",
        "sent_ms",
        "timed",
    )

    def __init__(self) -> None:
        self.delivered = 0
        self.acked = 0
        self.nacked = 0
        self.expired = 0
        self.dead_lettered = 0
        # Ack latency: a count per bucket of ACK_LATENCY_BOUNDS_MS (and one past the last).
        self.ack_latency_buckets = [0] * (len(ACK_LATENCY_BOUNDS_MS) + 1)
        self.ack_latency_sum_ms = 0
        self.push = dict.fromkeys(PUSH_CLASSES, 0)
        # Delivery times: partition -> {offset: delivered at}, by partition so that an offset,
        # an int, is the key (no tuple built and hashed per message), with their count.
        self.sent_ms: dict[int, dict[int, int]] = {}
        self.timed = 0

    def on_delivered(self, taken: Sequence[tuple[int, int, int, object]], now_ms: int) -> None:
        """Messages handed to a client: (partition, offset, generation, record) each."""
        self.delivered += len(taken)
        if self.timed >= MAX_TIMED:
            self.prune(now_ms)
            if self.timed >= MAX_TIMED:
                return
        sent, at = self.sent_ms, itertools.repeat(now_ms)
        for p, run in itertools.groupby(taken, _partition):  # (a delivery's messages come by partition)
            times = sent.get(p)
            if times is None:
                times = sent[p] = {}
            before = len(times)
            times.update(zip(map(_offset, run), at, strict=False))  # (`at` repeats)
            self.timed += len(times) - before

    def _forget(self, p: int, offsets: Sequence[int]) -> list[int | None]:
        """The delivery time of each offset (None: not timed here), forgotten."""
        times = self.sent_ms.get(p)
        if times is None:
            return [None] * len(offsets)
        before = len(times)
        found = list(map(times.pop, offsets, itertools.repeat(None)))
        self.timed -= before - len(times)
        return found

    def on_acked(self, p: int, offsets: Sequence[int], now_ms: int) -> None:
        """Acks the owner accepted, of these offsets of partition p: counted, and timed when
        their delivery was. The messages of one delivery share its time: each time is placed
        in a bucket once."""
        delivered = self._forget(p, offsets)
        self.acked += len(delivered)
        buckets, total = self.ack_latency_buckets, 0
        for at, n in collections.Counter(delivered).items():
            if at is not None:
                ms = now_ms - at
                total += ms * n
                buckets[bisect.bisect_left(ACK_LATENCY_BOUNDS_MS, ms)] += n
        self.ack_latency_sum_ms += total

    def on_nacked(self, p: int, offsets: Sequence[int]) -> None:
        self._forget(p, offsets)
        self.nacked += len(offsets)

    def on_expired(self, n: int) -> None:
        self.expired += n

    def on_dead_lettered(self, p: int, offsets: Sequence[int]) -> None:
        self._forget(p, offsets)
        self.dead_lettered += len(offsets)

    def on_pushed(self, ok: bool, detail: str, refused: bool) -> None:
        self.push[push_class(ok, detail, refused)] += 1

    def prune(self, now_ms: int) -> None:
        """Forget delivery times older than TIMED_FOR_MS."""
        limit = now_ms - TIMED_FOR_MS
        for p, times in list(self.sent_ms.items()):
            for offset in [o for o, at in times.items() if at < limit]:
                del times[offset]
            if not times:
                del self.sent_ms[p]
        self.timed = sum(map(len, self.sent_ms.values()))


class TopicTally:
    """One topic's publishes in this process."""

    __slots__ = ("bytes", "messages", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.messages = 0
        self.bytes = 0

    def on_published(self, messages: int, size: int) -> None:
        """A publish Kafka confirmed: `messages` of `size` bytes in all, as the request gave
        them (limits.check_publish sizes them)."""
        self.requests += 1
        self.messages += messages
        self.bytes += size


T = TypeVar("T")


class Tallies(Generic[T]):
    """The tallies of one kind (subscriptions or topics), at most `cap` labelled by name."""

    def __init__(self, kind: Callable[[], T], cap: int) -> None:
        self._kind = kind
        self.cap = cap
        self._named: dict[str, T] = {}
        self.other: T = kind()  # of every name past the cap
        self._unnamed: set[str] = set()  # names counted into `other`

    def of(self, name: str) -> T:
        tally = self._named.get(name)
        if tally is not None:
            return tally
        if len(self._named) < self.cap:
            made = self._named[name] = self._kind()
            return made
        self._unnamed.add(name)
        return self.other

    def label(self, name: str) -> str:
        """The label `name`'s series carry: its own name, or OTHER past the cap."""
        if name in self._named:
            return name
        return name if len(self._named) < self.cap and name not in self._unnamed else OTHER

    def items(self) -> list[tuple[str, T]]:
        """(label, tally) of every labelled name, and OTHER's if any name was counted there."""
        out = list(self._named.items())
        if self._unnamed:
            out.append((OTHER, self.other))
        return out

    def forget(self, exists: Callable[[str], object]) -> None:
        """Drop the tallies of names that no longer exist (deleted): their places are free
        again. Counts folded into OTHER stay there."""
        for name in [n for n in self._named if not exists(n)]:
            del self._named[name]
        self._unnamed = {n for n in self._unnamed if exists(n)}
