"""What a truncation policy drops (the seed's TruncationPolicy, docs/truncation.md): pure.

The owner of a subscription's partitions (core/runner.py) calls these with what it holds of
each partition: the unacked records it has fetched, as (offset, timestamp_ms, size), oldest
offset first, where the fetcher stands (`next_offset`) and, when known, where the partition
ends (`end`: the records in [next_offset, end) are not fetched yet). They return, per
partition, the offsets to acknowledge as dropped.

- `max_age_ms`: every held record whose timestamp is at least that old. Records not fetched yet
  are younger than the fetched ones of their partition (Kafka's timestamps follow offsets,
  give or take clock skew between producers) and are judged when fetched.
- `max_bytes`: the backlog is estimated as the bytes of the held records plus, for records not
  fetched yet, their count times the average size of the held ones. While the estimate exceeds
  `max_bytes`, the oldest held records go (by timestamp, across partitions); if it still does
  once they all went, the oldest part of each partition's unfetched tail goes, in proportion
  to its size. Nothing held and no known end: nothing to estimate, nothing dropped.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Mapping, Sequence

from gateway.translate.records import Record

Held = tuple[int, int, int]  # (offset, timestamp_ms, size) of an unacked record held in memory


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionView:
    held: Sequence[Held]  # by offset
    next_offset: int
    end: int | None = None  # where the partition ends, if known: [next_offset, end) unfetched

    @property
    def unfetched(self) -> int:
        return max(0, (self.end or 0) - self.next_offset)


def stored_size(record: Record) -> int:
    """What a message takes stored: its data, ordering key and attributes."""
    n = len(record.value or b"") + len(record.key or b"")
    for name, value in record.headers or ():
        n += len(name) + len(value or b"")
    return n


def held(records: Mapping[int, Record]) -> list[Held]:
    """A partition's held (unacked) records as `Held` entries, by offset."""
    return [(o, r.timestamp_ms, stored_size(r)) for o, r in sorted(records.items())]


def by_age(parts: Mapping[int, PartitionView], oldest_ms: int) -> dict[int, list[int]]:
    """Offsets of held records stored at or before `oldest_ms` (now - max_age)."""
    out: dict[int, list[int]] = {}
    for p, view in parts.items():
        aged = [o for o, ts, _ in view.held if ts <= oldest_ms]
        if aged:
            out[p] = aged
    return out


def estimate(parts: Mapping[int, PartitionView]) -> int:
    """The backlog's bytes: held records exactly, unfetched ones at the held average (rounded
    up, so that what by_bytes leaves is at most max_bytes at that average)."""
    held_bytes = sum(size for view in parts.values() for _, _, size in view.held)
    count = sum(len(view.held) for view in parts.values())
    unfetched = sum(view.unfetched for view in parts.values())
    return held_bytes + (-(-held_bytes * unfetched // count) if count else 0)


def by_bytes(parts: Mapping[int, PartitionView], max_bytes: int) -> dict[int, list[int]]:
    """Offsets to drop, oldest first, until the estimated backlog is at most `max_bytes`."""
    count = sum(len(view.held) for view in parts.values())
    if count == 0:
        return {}
    total = estimate(parts)
    excess = total - max_bytes
    if excess <= 0:
        return {}
    out: dict[int, list[int]] = {}
    queue = [(ts, p, o, size) for p, view in parts.items() for o, ts, size in view.held]
    heapq.heapify(queue)
    while queue and excess > 0:
        _, p, o, size = heapq.heappop(queue)
        out.setdefault(p, []).append(o)
        excess -= size
    if excess > 0:  # every held record went: the unfetched tails' oldest parts go too
        average = sum(size for view in parts.values() for _, _, size in view.held) / count
        unfetched = sum(view.unfetched for view in parts.values())
        for p, view in parts.items():
            if view.unfetched and average > 0:
                # this partition's part of the excess, in messages of the average size
                n = min(view.unfetched, math.ceil(excess * view.unfetched / unfetched / average))
                out.setdefault(p, []).extend(range(view.next_offset, view.next_offset + n))
    for offsets in out.values():
        offsets.sort()
    return out
