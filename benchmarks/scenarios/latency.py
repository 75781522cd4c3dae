"""latency: publish-to-receive p50/p99/max at fixed rates, raw producer->consumer vs gateway
Publish -> StreamingPull (one stream, as the official subscriber) and Publish -> Pull loops.
The ratio is gateway p99 / raw p99 (lower is better; 1 = as raw)."""

from __future__ import annotations

from benchmarks.api import Api
from benchmarks.config import Mode
from benchmarks.gen import latency
from benchmarks.harness import Bench, GenResult
from benchmarks.results import NOTHING_SATURATED, Row, build, ratio
from benchmarks.sampling import Samples
from benchmarks.scenarios.common import api_for, kafka_topic

NAME = "latency"
RECEIVER_THREADS = 4
STREAM_LABEL = "StreamingPull"
OFFERED_RATE = "the offered rate (fixed); no CPU saturated"


def run(bench: Bench, mode: Mode) -> list[Row]:
    raw_topic, gw_topic = bench.name("topics", "lat-raw"), bench.name("topics", "lat-gw")
    sub = bench.name("subscriptions", "lat-gw")
    with api_for(bench.gateway) as api:
        api.create_topic(raw_topic)
        api.create_topic(gw_topic)
        api.create_subscription(sub, gw_topic)
        try:
            _warm(api, gw_topic, sub)
            rows: list[Row] = []
            for rate in mode.latency_rates:
                raw = _raw(bench, mode, rate, raw_topic)
                rows += [
                    raw,
                    _gateway(bench, mode, rate, gw_topic, sub, raw, streaming=True),
                    _gateway(bench, mode, rate, gw_topic, sub, raw, streaming=False),
                ]
            return rows
        finally:
            api.delete(raw_topic, [])
            api.delete(gw_topic, [sub])


def _warm(api: Api, topic: str, sub: str) -> None:
    """Start the subscription's runner and let it own its partitions before anything is timed."""
    api.publish_one(topic)
    api.take_one(sub)


def _raw(bench: Bench, mode: Mode, rate: int, topic: str) -> Row:
    common = {
        "bootstrap": bench.bootstrap,
        "topic": kafka_topic(topic),
        "rate": rate,
        "seconds": mode.latency_seconds,
    }
    receiver = {**common, "group": f"{bench.prefix}-raw-lat", "expected": int(rate * mode.latency_seconds)}
    results, win = bench.run([(latency.raw_sender, common), (latency.raw_receiver, receiver)])
    return pair_row(f"raw producer -> consumer @ {rate}/s", "raw", results, win)


def _gateway(bench: Bench, mode: Mode, rate: int, topic: str, sub: str, raw: Row, streaming: bool) -> Row:
    common = {"address": bench.gateway.address, "rate": rate, "seconds": mode.latency_seconds}
    receiver = {
        **common,
        "subscription": sub,
        "expected": int(rate * mode.latency_seconds),
        "threads": RECEIVER_THREADS,
    }
    sender = {**common, "topic": topic}
    receive, label = (
        (latency.gw_stream_receiver, STREAM_LABEL)
        if streaming
        else (latency.gw_receiver, f"Pull x{RECEIVER_THREADS}")
    )
    results, win = bench.run([(latency.gw_sender, sender), (receive, receiver)])
    row = pair_row(f"Publish -> {label} @ {rate}/s", "gateway", results, win)
    row.ratio = ratio(row.extra["p99_ms"], raw.extra["p99_ms"])
    row.extra["p50_ratio"] = ratio(row.extra["p50_ms"], raw.extra["p50_ms"])
    return row


def pair_row(case: str, kind: str, results: list[GenResult], win: Samples) -> Row:
    """Rates and latencies are the receiver's; CPU counts both generator processes."""
    sender, receiver = results
    row = build(NAME, case, kind, [receiver], win)
    row.gen_procs = 2
    sender_pct = 100.0 * float(sender["cpu_s"]) / max(row.seconds, 1e-6)
    row.gen_cpu_pct += sender_pct
    row.other_cpu_pct = max(0.0, row.other_cpu_pct - sender_pct)
    row.extra.update({k: round(float(receiver[k]), 2) for k in ("p50_ms", "p99_ms", "max_ms")})
    row.extra["sent"] = sender["count"]
    if row.limits == [NOTHING_SATURATED]:
        row.limits = [OFFERED_RATE]
    return row
