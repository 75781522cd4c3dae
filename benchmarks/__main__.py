"""python -m benchmarks [--quick] [--out FILE] [--kafka-bootstrap HOST:PORT] [--scenarios a,b,...]

Every figure is set against raw confluent-kafka measured in the same run on the same broker.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from benchmarks import api, harness, processes, procstats, report
from benchmarks.config import FULL, QUICK, Mode
from benchmarks.results import Row
from benchmarks.scenarios import backlog, deliver, goclient, latency, policies, publish, scaleout

Scenario = Callable[[harness.Bench, Mode], list[Row]]
SCENARIOS: dict[str, Scenario] = {
    "publish": publish.run,
    "deliver": deliver.run,
    "latency": latency.run,
    "backlog": backlog.run,
    "scaleout": scaleout.run,
    "policies": policies.run,
    "goclient": goclient.run,
}
QUICK_SKIPS = {"goclient"}  # builds a Go program: named with --scenarios when wanted in quick mode
WORKERS = 4
DEFAULT_OUT = Path(__file__).parent / "results" / "latest.json"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="every scenario, briefly (~1-2 minutes)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results (default: %(default)s)")
    parser.add_argument("--kafka-bootstrap", help="use this broker instead of starting an embedded one")
    parser.add_argument("--gateway-args", default="", help="extra `gateway serve` flags (one string)")
    parser.add_argument(
        "--scenarios", help="comma-separated subset (default: all; with --quick all but goclient)"
    )
    parser.add_argument(
        "--keep-page-cache",
        action="store_true",
        help="never empty the machine's page cache (as root, the publish scenario empties it "
        "before each of its runs: docs/benchmarks.md says why)",
    )
    args = parser.parse_args(argv)
    if args.scenarios is None:
        args.scenarios = ",".join(s for s in SCENARIOS if not (args.quick and s in QUICK_SKIPS))
    unknown = set(args.scenarios.split(",")) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {list(SCENARIOS)}")
    return args


Outcome = tuple[dict[str, list[Row]], dict[str, str]]


def run_all(bench: harness.Bench, mode: Mode, chosen: list[str]) -> Outcome:
    done: dict[str, list[Row]] = {}
    errors: dict[str, str] = {}
    for name in chosen:
        started = time.monotonic()
        print(f"-- {name} ...", file=sys.stderr, flush=True)
        try:
            done[name] = SCENARIOS[name](bench, mode)
        except Exception:
            errors[name] = traceback.format_exc() + _gateway_log_tail(bench)
            print(errors[name], file=sys.stderr)
            if not bench.gateways or bench.gateway.proc.poll() is not None:
                _restart_gateway(bench)
        print(f"-- {name} took {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    return done, errors


def _gateway_log_tail(bench: harness.Bench) -> str:
    logs = sorted(bench.log_dir.glob("gateway-*.log"))
    return "".join(f"\n--- {p.name}:\n{p.read_text()[-2000:]}" for p in logs)


def _restart_gateway(bench: harness.Bench) -> None:
    for gw in list(bench.gateways):
        bench.stop_gateway(gw)
    bench.start_gateway()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # so the gateways, the pool and the broker are stopped


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    mode = QUICK if args.quick else FULL
    chosen = args.scenarios.split(",")
    started = time.monotonic()
    background = procstats.background_cpu_pct()
    source = procstats.source_version()  # now: other people may change the tree during the run
    with (
        processes.kafka_broker(args.kafka_bootstrap) as (bootstrap, kafka_pid, kafka_version),
        tempfile.TemporaryDirectory(prefix="bench-logs-") as logs,
    ):
        bench = harness.Bench(
            bootstrap,
            kafka_pid,
            Path(logs),
            WORKERS,
            shlex.split(args.gateway_args),
            empty_cache=not args.keep_page_cache,
        )
        try:
            bench.start_gateway()
            done, errors = run_all(bench, mode, chosen)
        finally:
            bench.close()
            processes.delete_topics(bootstrap, bench.prefix)
    header = {
        "command": shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)]),
        "mode": mode.name,
        "seconds": round(time.monotonic() - started, 1),
        "machine": procstats.describe_machine(kafka_version),
        "background_cpu_pct_before_run": round(background),
        "source": source,
        "kafka_broker_pid_seen": kafka_pid is not None,
        "generator_processes": WORKERS,
        "gateway_args": args.gateway_args,
        "create_subscription_unavailable_retried": api.RETRIED,
        "page_cache_emptied_before_runs": bench.cache_drops,
    }
    print(report.table(done))
    print(report.format_targets(report.targets(done)))
    report.write_json(args.out, header, done, errors)
    print(f"\nwrote {args.out} ({header['seconds']}s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
