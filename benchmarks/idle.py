"""python -m benchmarks.idle [--subscriptions 0,10] [--seconds 30] [--out FILE]

What a gateway with nothing to do costs: the CPU one process uses per second with no resources,
then with N subscriptions served (each had one message delivered, so its runner runs: a consumer
in its group, a lease-log reader, its timers) and no traffic. Per thread: CPU ms and context
switches per second (Python's threads all show as `python`; the first, `python`, is the event
loop's). Writes the figures to --out as JSON and prints them.

At a steady rate, what an idle process spends is part of every message's CPU too: 5 ms/s is
0.5 us per message at 10,000 msg/s.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import processes, procstats
from benchmarks.api import Api
from benchmarks.processes import GatewayProc

SETTLE_SECONDS = 10.0  # after the subscriptions' first delivery, before measuring
TOP = 15


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.idle", description=__doc__)
    parser.add_argument("--subscriptions", default="0,10", help="comma-separated counts, ascending")
    parser.add_argument("--seconds", type=float, default=30.0, help="each measurement's length")
    parser.add_argument("--out", type=Path, default=Path(".cache/idle.json"))
    parser.add_argument("--kafka-bootstrap", help="use this broker instead of starting one")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.subscriptions.split(",")]
    if counts != sorted(counts) or min(counts) < 0:
        parser.error("--subscriptions must be ascending counts >= 0")
    rows = []
    with (
        processes.kafka_broker(args.kafka_bootstrap) as (bootstrap, _, version),
        tempfile.TemporaryDirectory(prefix="idle-") as logs,
    ):
        prefix = f"idle{int(time.time())}"
        gw = GatewayProc(bootstrap, prefix, Path(logs) / "gateway.log")
        api = Api(gw.address)
        served: list[tuple[str, str]] = []
        try:
            for count in counts:
                while len(served) < count:
                    served.append(_serve(api, f"{prefix}-{len(served)}"))
                time.sleep(SETTLE_SECONDS)
                rows.append(_measure(gw.pid, count, args.seconds))
                _print(rows[-1])
        finally:
            for topic, sub in served:
                api.delete(topic, [sub])
            api.close()
            gw.stop()
            processes.delete_topics(bootstrap, prefix)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"kafka": version, "rows": rows}, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


def _serve(api: Api, label: str) -> tuple[str, str]:
    """A topic and a subscription whose runner is up: one message published and taken."""
    topic, sub = f"projects/bench/topics/{label}", f"projects/bench/subscriptions/{label}"
    api.create_topic(topic)
    api.create_subscription(sub, topic)
    api.publish_one(topic)
    api.take_one(sub)
    return topic, sub


def _measure(pid: int, subscriptions: int, seconds: float) -> dict[str, Any]:
    before, t0 = procstats.threads(pid), time.monotonic()
    time.sleep(seconds)
    after, elapsed = procstats.threads(pid), time.monotonic() - t0
    threads = {}
    for name, (ns, switches) in after.items():
        ns0, s0 = before.get(name, (0, 0))  # a thread started meanwhile counts whole
        threads[name] = {
            "cpu_ms_per_s": round((ns - ns0) / 1e6 / elapsed, 3),
            "switches_per_s": round((switches - s0) / elapsed, 1),
        }
    busiest = dict(sorted(threads.items(), key=lambda kv: -kv[1]["cpu_ms_per_s"]))
    total = sum(t["cpu_ms_per_s"] for t in threads.values())
    return {
        "subscriptions": subscriptions,
        "seconds": round(elapsed, 1),
        "cpu_ms_per_s": round(total, 2),
        "switches_per_s": round(sum(t["switches_per_s"] for t in threads.values()), 1),
        "threads": busiest,
    }


def _print(row: dict[str, Any]) -> None:
    print(
        f"{row['subscriptions']} subscriptions served: {row['cpu_ms_per_s']:.2f} ms CPU per s, "
        f"{row['switches_per_s']:.0f} context switches per s"
    )
    for name, t in list(row["threads"].items())[:TOP]:
        print(f"    {name:24} {t['cpu_ms_per_s']:6.2f} ms/s {t['switches_per_s']:7.1f} switches/s")


if __name__ == "__main__":
    raise SystemExit(main())
