"""benchmarks.idle's reading of a process's threads, on this test's own process (no broker)."""

from __future__ import annotations

import os
import threading

from benchmarks import idle, procstats


def test_threads_are_named_once_each_with_their_cpu_time() -> None:
    stop = threading.Event()
    extra = [threading.Thread(target=stop.wait) for _ in range(2)]
    for t in extra:
        t.start()
    try:
        found = procstats.threads(os.getpid())
    finally:
        stop.set()
        for t in extra:
            t.join()
    assert len(found) >= 3  # this thread and the two waiting ones, each under a name of its own
    assert all(ns >= 0 and switches >= 0 for ns, switches in found.values())
    assert max(ns for ns, _ in found.values()) > 0  # this one has run


def test_a_measurement_sums_its_threads_and_counts_busy_time() -> None:
    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            pass

    busy = threading.Thread(target=spin)
    busy.start()
    try:
        row = idle._measure(os.getpid(), 3, 0.3)
    finally:
        done.set()
        busy.join()
    assert row["subscriptions"] == 3
    assert row["cpu_ms_per_s"] == round(sum(t["cpu_ms_per_s"] for t in row["threads"].values()), 2)
    assert row["cpu_ms_per_s"] > 100  # a thread spinning throughout: far above an idle process
    shares = [t["cpu_ms_per_s"] for t in row["threads"].values()]
    assert shares == sorted(shares, reverse=True)  # busiest first
