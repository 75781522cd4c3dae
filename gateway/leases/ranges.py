"""A set of integers kept as sorted, disjoint, half-open ranges [start, end)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

# (start, end) of a half-open range. A plain tuple, not a named one: ranges go into the lease
# log's commands as they are (Ack.ranges, Checkpoint.acked), and orjson, which encodes those,
# refuses a NamedTuple (a tuple subclass) outright.
Range = tuple[int, int]


class RangeSet:
    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: Iterable[Range] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for start, end in ranges:
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        """Add [start, end), merging with every range it touches."""
        if start >= end:
            return
        starts, ends = self._starts, self._ends
        # Fast path: appending at or after the last range, the common case for acks in order.
        if not starts or start > ends[-1]:
            starts.append(start)
            ends.append(end)
            return
        i = bisect.bisect_left(ends, start)  # first range whose end >= start
        j = bisect.bisect_right(starts, end)  # ranges [i, j) touch [start, end]
        if i == j:
            starts.insert(i, start)
            ends.insert(i, end)
            return
        new_start, new_end = min(start, starts[i]), max(end, ends[j - 1])
        starts[i:j] = [new_start]
        ends[i:j] = [new_end]

    @property
    def end(self) -> int:
        """One past the largest integer in the set (0 when empty): nothing from it on is in it."""
        return self._ends[-1] if self._ends else 0

    def add_one(self, value: int) -> None:
        self.add(value, value + 1)

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        i = bisect.bisect_right(self._starts, value) - 1
        return i >= 0 and value < self._ends[i]

    def first_missing_from(self, value: int) -> int:
        """The smallest integer >= value that is not in the set."""
        i = bisect.bisect_right(self._starts, value) - 1
        if i >= 0 and value < self._ends[i]:
            return self._ends[i]
        return value

    def discard_below(self, value: int) -> None:
        """Forget everything below `value`."""
        i = bisect.bisect_right(self._ends, value)
        del self._starts[:i]
        del self._ends[:i]
        if self._starts and self._starts[0] < value:
            self._starts[0] = value

    def __iter__(self) -> Iterator[Range]:
        return zip(self._starts, self._ends, strict=True)

    def __len__(self) -> int:
        """The number of ranges (not of integers)."""
        return len(self._starts)

    def count(self) -> int:
        return sum(e - s for s, e in self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"RangeSet({list(self)!r})"


def to_ranges(values: Iterable[int]) -> list[Range]:
    """Compress integers into sorted half-open ranges."""
    out: list[Range] = []
    ordered = iter(sorted(set(values)))
    first = next(ordered, None)
    if first is None:
        return out
    start = end = first
    for v in ordered:  # once per acked message: no tuple until a range ends
        end += 1
        if v != end:
            out.append((start, end))
            start = end = v
    out.append((start, end + 1))
    return out
