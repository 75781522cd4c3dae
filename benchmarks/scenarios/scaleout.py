"""scaleout: one vs two gateway processes (same --internal-prefix) serving one subscription of a
4-partition topic, Pull+Ack rate; raw baseline: one vs two consumers in one group."""

from __future__ import annotations

from benchmarks.api import Api
from benchmarks.config import Mode
from benchmarks.gen import subscribe
from benchmarks.harness import Bench
from benchmarks.processes import GatewayProc
from benchmarks.results import Row, build, ratio
from benchmarks.scenarios.common import api_for, fill, kafka_topic

NAME = "scaleout"
PARTITIONS = 4


def run(bench: Bench, mode: Mode) -> list[Row]:
    topic = bench.name("topics", "scaleout")
    subs = [bench.name("subscriptions", f"scaleout-{n}") for n in (1, 2)]
    with api_for(bench.gateway) as api:
        api.create_topic(topic, partitions=PARTITIONS)
        for sub in subs:
            api.create_subscription(sub, topic)
        try:
            fill(bench, topic, mode.scaleout_messages)
            raw1, raw2 = _raw(bench, mode, topic, 1), _raw(bench, mode, topic, 2)
            api.take_one(subs[0])
            one = _pull(bench, mode, subs[0], [bench.gateway], raw1, mode.scaleout_messages - 1)
            two = _with_second(bench, mode, api, subs[1], raw2)
            two.extra["speedup_vs_one_gateway"] = ratio(two.msgs_per_s, one.msgs_per_s)
            return [raw1, raw2, one, two]
        finally:
            api.delete(topic, subs)


def _with_second(bench: Bench, mode: Mode, api: Api, sub: str, raw: Row) -> Row:
    second = bench.start_gateway()
    try:
        api.take_one(sub)
        with api_for(second) as api2:
            api2.take_one(sub)  # returns once the second process owns partitions with messages
        return _pull(bench, mode, sub, [bench.gateway, second], raw, mode.scaleout_messages - 2)
    finally:
        bench.stop_gateway(second)


def _raw(bench: Bench, mode: Mode, topic: str, procs: int) -> Row:
    args = {
        "bootstrap": bench.bootstrap,
        "topic": kafka_topic(topic),
        "procs": procs,
        "group": f"{bench.prefix}-raw-scaleout-{procs}",
    }
    results, win = bench.run([(subscribe.raw_consume, {**args, "index": i}) for i in range(procs)])
    return build(NAME, f"raw consumers, partitions split over {procs} proc", "raw", results, win)


def _pull(bench: Bench, mode: Mode, sub: str, gateways: list[GatewayProc], raw: Row, expected: int) -> Row:
    args = {"subscription": sub, "deadline_s": 600.0, "expected": expected}
    tasks = [
        (subscribe.gw_pull_ack, {**args, "address": gateways[i % len(gateways)].address})
        for i in range(mode.scaleout_procs)
    ]
    results, win = bench.run(tasks, gateways=gateways)
    label = f"Pull+Ack via {len(gateways)} gateway proc, {mode.scaleout_procs} clients"
    row = build(NAME, label, "gateway", results, win)
    row.ratio = ratio(row.msgs_per_s, raw.msgs_per_s)
    return row
