"""publish: raw acks=all idempotent producer vs the gateway's Publish with batches of 1, 100, 1000."""

from __future__ import annotations

from benchmarks.config import Mode
from benchmarks.gen import publish
from benchmarks.harness import Bench
from benchmarks.results import Row, build, ratio
from benchmarks.scenarios.common import api_for, kafka_topic

NAME = "publish"


def run(bench: Bench, mode: Mode) -> list[Row]:
    topic = bench.name("topics", "publish")
    with api_for(bench.gateway) as api:
        api.create_topic(topic)
        try:
            return _measure(bench, mode, topic)
        finally:
            api.delete(topic, [])


def _measure(bench: Bench, mode: Mode, topic: str) -> list[Row]:
    raw_args = {"bootstrap": bench.bootstrap, "topic": kafka_topic(topic), "seconds": mode.publish_seconds}
    results, win = bench.run([(publish.raw_produce, raw_args)])
    raw = build(NAME, "raw producer, 1 process", "raw", results, win)
    rows = [raw]
    for case in mode.publish_cases:
        args = {
            "address": bench.gateway.address,
            "topic": topic,
            "batch": case.batch,
            "window": case.window,
            "seconds": mode.publish_seconds,
        }
        results, win = bench.run([(publish.gw_publish, args)] * case.procs)
        label = f"Publish batch={case.batch}, {case.procs} proc x {case.window} in flight"
        row = build(NAME, label, "gateway", results, win)
        row.ratio = ratio(row.msgs_per_s, raw.msgs_per_s)
        row.extra["rpcs_per_s"] = round(row.msgs_per_s / case.batch)
        errors = sum(int(r.get("errors", 0)) for r in results)
        if errors:
            row.extra["errors"] = errors
        rows.append(row)
    rows += _rest(bench, mode, topic, raw, rows)
    return rows


def _rest(bench: Bench, mode: Mode, topic: str, raw: Row, rows: list[Row]) -> list[Row]:
    """REST publish of 100 x 1 KiB per request, next to gRPC with the same batch in this run."""
    if not bench.gateway.rest_address:
        return []
    grpc_row = next((r for r in rows if r.case.startswith("Publish batch=100,")), None)
    procs = next((c.procs for c in mode.publish_cases if c.batch == 100), 2)
    args = {
        "rest_address": bench.gateway.rest_address,
        "topic": topic,
        "batch": 100,
        "window": 2,
        "seconds": mode.publish_seconds,
    }
    results, win = bench.run([(publish.rest_publish, args)] * procs)
    row = build(NAME, f"REST publish batch=100, {procs} proc x 2 in flight", "gateway", results, win)
    row.ratio = ratio(row.msgs_per_s, raw.msgs_per_s)
    if grpc_row is not None:
        row.extra["vs_grpc_batch_100"] = round(row.msgs_per_s / grpc_row.msgs_per_s, 3)
    errors = sum(int(r.get("errors", 0)) for r in results)
    if errors:
        row.extra["errors"] = errors
    return [row]
