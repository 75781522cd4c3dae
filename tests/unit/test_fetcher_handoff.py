"""The handoff of seek and commit requests to a GroupFetcher's thread (gateway.kafka.consumer).

Writers on several threads race one drainer, as the event loop races the fetcher's thread.
A tiny GIL switch interval makes the threads switch as often as the interpreter lets them, and
half the writes pass a Mapping whose reading runs Python code, so a switch can fall in the
middle of a merge (a plain dict of ints merges without one under the GIL; not so without it).
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from collections.abc import Iterator, Mapping

import pytest

from gateway.kafka.consumer import _PendingOffsets

WRITERS = 4
PARTITIONS_EACH = 4
HAMMER_SECONDS = 1.0


class _Batch(Mapping[int, int]):
    """A request as any Mapping may be: reading it runs Python code, where threads switch."""

    def __init__(self, offsets: dict[int, int]) -> None:
        self._offsets = offsets

    def __getitem__(self, p: int) -> int:
        return self._offsets[p]

    def __iter__(self) -> Iterator[int]:
        return iter(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)


@pytest.fixture(autouse=True)
def fast_switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_later_put_wins_and_take_empties() -> None:
    pending = _PendingOffsets()
    assert pending.take() == {}
    pending.put({0: 5, 1: 7})
    pending.put({0: 9})
    pending.put({})
    assert pending.take() == {0: 9, 1: 7}
    assert pending.take() == {}


def test_retry_never_overrides_a_newer_request() -> None:
    pending = _PendingOffsets()
    pending.put({0: 3, 1: 4})
    taken = pending.take()
    pending.put({0: 10})  # a newer request arrives while the old one is being tried
    pending.retry(taken)
    assert pending.take() == {0: 10, 1: 4}


def _hammer(with_retries: bool) -> tuple[dict[int, int], list[tuple[int, int]], dict[int, int]]:
    """Writers put increasing values for partitions of their own; one drainer takes (and, with
    retries, gives some back). Returns the last value put per partition, what the drainer took
    in order, and what was left pending at the end."""
    pending = _PendingOffsets()
    last_put: dict[int, int] = {}
    last_put_lock = threading.Lock()
    taken: list[tuple[int, int]] = []
    writers_done = threading.Event()
    deadline = time.monotonic() + HAMMER_SECONDS

    def write(w: int) -> None:
        rng = random.Random(w)
        mine = list(range(w * PARTITIONS_EACH, (w + 1) * PARTITIONS_EACH))
        latest: dict[int, int] = {}
        seq = 0
        while time.monotonic() < deadline:
            seq += 1
            batch = dict.fromkeys(rng.sample(mine, rng.randint(1, len(mine))), seq)
            pending.put(_Batch(batch) if seq % 2 else batch)
            latest.update(batch)
        with last_put_lock:
            last_put.update(latest)

    def drain() -> None:
        rng = random.Random(-1)
        while not writers_done.is_set():
            got = pending.take()
            taken.extend(got.items())
            if with_retries and got and rng.random() < 0.3:
                pending.retry({p: o for p, o in got.items() if rng.random() < 0.5})

    threads = [threading.Thread(target=write, args=(w,), name=f"put-{w}") for w in range(WRITERS)]
    drainer = threading.Thread(target=drain, name="take")
    drainer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(HAMMER_SECONDS + 10)
        assert not t.is_alive(), f"{t.name} did not finish"
    writers_done.set()
    drainer.join(10)
    assert not drainer.is_alive(), "the drainer did not finish"
    return last_put, taken, pending.take()


def _first_break(values: list[int], strict: bool) -> str:
    for i, (a, b) in enumerate(itertools.pairwise(values)):
        if b < a or (strict and a == b):
            return f"took {a} then {b} (take {i + 1} of {len(values)})"
    return ""


def _by_partition(taken: list[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for p, offset in taken:
        out.setdefault(p, []).append(offset)
    return out


def test_racing_puts_and_takes_lose_nothing_and_never_repeat() -> None:
    last_put, taken, left = _hammer(with_retries=False)
    assert len(taken) > 100, "the drainer barely ran: no race was tested"
    seen = _by_partition(taken)
    for p, values in seen.items():
        # Strictly increasing: no value taken twice, no older value after a newer one.
        assert not _first_break(values, strict=True), f"partition {p}: {_first_break(values, True)}"
    for p, last in last_put.items():
        final = left.get(p, seen.get(p, [None])[-1])
        assert final == last, f"partition {p}: last put {last}, but the handoff ends at {final}"
    assert set(left) <= set(last_put)


def test_racing_puts_takes_and_retries_never_go_back() -> None:
    last_put, taken, left = _hammer(with_retries=True)
    assert len(taken) > 100, "the drainer barely ran: no race was tested"
    seen = _by_partition(taken)
    for p, values in seen.items():
        # A retry may hand the same value out again, never one older than a value taken.
        assert not _first_break(values, strict=False), f"partition {p}: {_first_break(values, False)}"
    for p, last in last_put.items():
        final = left.get(p, seen.get(p, [None])[-1])
        assert final == last, f"partition {p}: last put {last}, but the handoff ends at {final}"
