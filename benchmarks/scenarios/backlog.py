"""backlog: with 10^4..10^6 unacked 1 KiB messages waiting, the gateway's RSS before and after
pulling a fixed number, the Pull+Ack rate (vs a raw consumer reading as many), the cost per
message, and the lease log's live keys once everything pulled is acked."""

from __future__ import annotations

import time

from benchmarks import leaselog, procstats
from benchmarks.config import Mode
from benchmarks.gen import subscribe
from benchmarks.harness import Bench
from benchmarks.results import Row, build, ratio
from benchmarks.scenarios.common import api_for, fill, kafka_topic

NAME = "backlog"
PROCS = 2
SETTLE_S = 2.5  # a checkpoint (every 1 s by default) with its tombstones, and a margin


def run(bench: Bench, mode: Mode) -> list[Row]:
    rows: list[Row] = []
    for size in mode.backlog_sizes:
        rows += _one(bench, mode, size)
    return rows


def _one(bench: Bench, mode: Mode, size: int) -> list[Row]:
    topic = bench.name("topics", f"backlog-{size}")
    sub = bench.name("subscriptions", f"backlog-{size}")
    with api_for(bench.gateway) as api:
        api.create_topic(topic)
        api.create_subscription(sub, topic)
        try:
            fill_rate = fill(bench, topic, size)
            before = procstats.proc_sample(bench.gateway.pid)
            first_s = api.take_one(sub)
            row = _pull(bench, mode, sub, size)
            after = procstats.proc_sample(bench.gateway.pid)
            acked_at = time.monotonic()
            raw = _raw(bench, mode, topic, size)  # while the gateway checkpoints
            time.sleep(max(0.0, acked_at + SETTLE_S - time.monotonic()))
            log_topic = leaselog.find_log_topic(bench.bootstrap, bench.prefix, sub)
            log = leaselog.live_keys(bench.bootstrap, log_topic)
        finally:
            api.delete(topic, [sub])
    assert before is not None and after is not None
    row.ratio = ratio(row.msgs_per_s, raw.msgs_per_s)
    row.extra = {
        "backlog": size,
        "fill_msgs_per_s": round(fill_rate),
        "first_pull_s": round(first_s, 2),
        "rss_before_mb": round(before.rss_mb),
        "rss_after_mb": round(after.rss_mb),
        **{k: log[k] for k in ("partitions", "records", "live_keys", "live_bytes")},
        **row.extra,
    }
    return [raw, row]


def _pull(bench: Bench, mode: Mode, sub: str, size: int) -> Row:
    args = {
        "address": bench.gateway.address,
        "subscription": sub,
        "deadline_s": 600.0,
        "expected": mode.backlog_pull - 1,  # one went to the first pull
        "cancel": False,
    }  # a cancelled Pull's messages would stay leased: the log would show them
    results, win = bench.run([(subscribe.gw_pull_ack, args)] * PROCS)
    case = f"Pull+Ack {mode.backlog_pull:,} of {size:,}, {PROCS} procs"
    return build(NAME, case, "gateway", results, win)


def _raw(bench: Bench, mode: Mode, topic: str, size: int) -> Row:
    args = {
        "bootstrap": bench.bootstrap,
        "topic": kafka_topic(topic),
        "max_count": mode.backlog_pull,
        "group": f"{bench.prefix}-raw-backlog-{size}",
    }
    results, win = bench.run([(subscribe.raw_consume, args)])
    return build(NAME, f"raw consumer, first {mode.backlog_pull:,} of {size:,}", "raw", results, win)
