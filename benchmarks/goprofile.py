"""python -m benchmarks.goprofile [--cases raised,default,stream] [--messages N] [--out DIR]

Where the gateway's time goes while the official Go client receives: a backlog of 1 KiB messages,
read by the Go generator (benchmarks/gen/go) with raised settings (NumGoroutines=4,
MaxOutstandingMessages=5000), with the defaults, or by raw StreamingPull streams for comparison,
while py-spy samples the gateway process without stopping it (`--nonblocking`), by default only
the thread holding the GIL (`--gil`): the shares are then of the Python CPU time, not of
threads waiting in librdkafka or gRPC's C core. Writes py-spy's collapsed stacks (`<case>.txt`) and a
summary (`<case>.json`: the run's figures, the client's RPC counts, and the share of samples
per function, self and total) to --out, and prints the summary's top lines.

py-spy (`pip install py-spy`) is not a dependency of the project: this is a diagnosis tool.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import harness, processes, procstats
from benchmarks.gen import goclient, subscribe
from benchmarks.results import build
from benchmarks.scenarios.common import api_for, fill

CASES = {"raised": {"goroutines": 4, "max_outstanding": 5000}, "default": {}, "stream": {}}
STREAMS = 4
TOP = 25
# Where a sample's time belongs: the first of these frames from the outside in (so an ack inside
# a stream's reader counts as a stream ack, not as delivery); the rest by the innermost frame.
PATHS = (
    ("unary Acknowledge", "Subscriber.Acknowledge"),
    ("unary ModifyAckDeadline", "Subscriber.ModifyAckDeadline"),
    ("acks/modacks on the stream", "Subscriber._read_stream"),
    ("delivery on streams", "Subscriber.StreamingPull"),
    ("fetcher thread (Kafka records)", "GroupFetcher._run"),
    ("lease-log read-back", "LeaseLog._apply_log"),
    ("lease-log read-back", "TailReader._run"),
    ("checkpoints", "LeaseLog._checkpoint"),
    ("producer poll thread", "Producer._poll"),
)
LOOP = "event loop, gRPC and I/O (no Python frame of ours)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.goprofile", description=__doc__)
    parser.add_argument("--cases", default="raised", help=f"comma-separated, of {sorted(CASES)}")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument(
        "--all-threads",
        action="store_true",
        help="sample every thread, not only the one holding the GIL (blocking C calls then count)",
    )
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    parser.add_argument("--out", type=Path, default=Path(".cache/goprofile"))
    parser.add_argument("--kafka-bootstrap", help="use this broker instead of starting one")
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    if set(cases) - set(CASES):
        parser.error(f"unknown cases {sorted(set(cases) - set(CASES))}")
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        parser.error("py-spy is not installed (pip install py-spy)")
    binary = str(goclient.build())
    args.out.mkdir(parents=True, exist_ok=True)
    with (
        processes.kafka_broker(args.kafka_bootstrap) as (bootstrap, kafka_pid, _),
        tempfile.TemporaryDirectory(prefix="goprofile-") as logs,
    ):
        bench = harness.Bench(bootstrap, kafka_pid, Path(logs), STREAMS)
        try:
            gw = bench.start_gateway()
            for case in cases:
                _report(args.out, _profile(bench, args, case, spy, binary, gw.pid))
        finally:
            bench.close()
            processes.delete_topics(bootstrap, bench.prefix)
    return 0


def _report(out: Path, summary: dict[str, Any]) -> None:
    (out / f"{summary['case']}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("self", "total")}, indent=2))
    us = summary.get("gw_cpu_us_per_msg") or 0.0
    print(
        f"\n== {summary['case']}: % of samples by path, and us of gateway CPU per message if shared alike =="
    )
    for name, pct in summary["paths"].items():
        print(f"{pct:6.1f}  {pct * us / 100:5.1f} us  {name}")
    for kind in ("self", "total"):
        print(f"\n== {summary['case']}: {kind} % of samples ==")
        for name, pct in list(summary[kind].items())[:TOP]:
            print(f"{pct:6.1f}  {name}")


def _profile(
    bench: harness.Bench, args: argparse.Namespace, case: str, spy: str, binary: str, pid: int
) -> dict[str, Any]:
    topic, sub = bench.name("topics", f"goprofile-{case}"), bench.name("subscriptions", f"goprofile-{case}")
    stacks = args.out / f"{case}.txt"
    with api_for(bench.gateway) as api:
        api.create_topic(topic)
        api.create_subscription(sub, topic)
        fill(bench, topic, args.messages)
        api.take_one(sub)
        cmd = [spy, "record", "--pid", str(pid), "--rate", str(args.rate), "--format", "raw"]
        # (py-spy reads C frames only of a stopped process: --native pauses it at each sample)
        cmd += ["--output", str(stacks), *(["--native"] if args.native else ["--nonblocking"])]
        cmd += [] if args.all_threads else ["--gil"]
        recorder = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attaches
        common = {"address": bench.gateway.address, "subscription": sub, "expected": args.messages - 1}
        if case == "stream":
            tasks: list[harness.Task] = [(subscribe.gw_streaming, {**common, "deadline_s": 600.0})] * STREAMS
        else:
            tasks = [(goclient.go_receive, {**common, "binary": binary, "deadline": 600, **CASES[case]})]
        before = procstats.threads(pid)
        results, win = bench.run(tasks, lead=1.5)
        after = procstats.threads(pid)
        recorder.send_signal(signal.SIGINT)
        _, err = recorder.communicate(timeout=60)
        api.delete(topic, [sub])
    row = build("goprofile", case, "gateway", results, win)
    self_pct, total_pct, samples = _shares(stacks)
    paths = _paths(stacks)
    return {
        "case": case,
        "messages": row.messages,
        "msgs_per_s": round(row.msgs_per_s),
        "gw_cpu_pct": round(row.gw_cpu_pct or 0.0),
        "gw_cpu_us_per_msg": row.extra.get("gw_cpu_us_per_msg"),
        "machine_cpu_pct": round(row.machine_cpu_pct),
        "duplicates": results[0].get("duplicates"),
        "rpcs": results[0].get("rpcs"),
        "samples": samples,
        "paths": paths,
        "threads": _thread_use(before, after, row.messages),
        "py_spy_stderr": err.decode(errors="replace")[-500:],
        "self": self_pct,
        "total": total_pct,
    }


def _thread_use(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], messages: int
) -> dict[str, dict[str, float]]:
    """Per thread over the run: CPU us and context switches per 1,000 messages, busiest first.
    Threads are matched by name, so one that started or ended during the run counts whole."""
    per = 1000 / max(messages, 1)
    rows = {}
    for name, (ns, switches) in after.items():
        t0, s0 = before.get(name, (0, 0))
        rows[name] = {
            "cpu_us_per_1k": round((ns - t0) / 1e3 * per, 1),
            "switches_per_1k": round((switches - s0) * per, 1),
        }
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]["cpu_us_per_1k"]))


def _shares(path: Path) -> tuple[dict[str, float], dict[str, float], int]:
    """Per function (`name (file)`), the % of samples where it is the innermost frame (self)
    and where it is anywhere on the stack (total), from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    anywhere: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in path.read_text().splitlines() if path.exists() else []:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [_function(f) for f in stack.split(";")[1:]]  # the first is the thread
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        for name in set(frames):
            anywhere[name] += n

    def pct(c: collections.Counter[str]) -> dict[str, float]:
        return {k: round(100.0 * v / max(samples, 1), 2) for k, v in c.most_common(200)}

    return pct(own), pct(anywhere), samples


def _paths(path: Path) -> dict[str, float]:
    """% of samples per PATHS entry (the outermost matching frame), LOOP, and "other"."""
    found: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines() if path.exists() else []:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        names = [f.partition(" (")[0] for f in stack.split(";")]
        where = next((label for label, fn in PATHS if fn in names), None)
        if where is None:
            where = LOOP if names and names[-1] in ("Runner.run", "run") else "other"
        found[where] += int(count)
    total = max(sum(found.values()), 1)
    return {k: round(100.0 * v / total, 1) for k, v in found.most_common()}


def _function(frame: str) -> str:
    """`fn (path/file.py:123)` -> `fn (file.py)`: lines of one function counted together."""
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(file.split('/')[-2:])})" if file else name


if __name__ == "__main__":
    sys.exit(main())
