"""Helpers the scenarios share."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from benchmarks.api import Api
from benchmarks.gen import publish
from benchmarks.harness import Bench
from benchmarks.processes import GatewayProc
from gateway.translate import names

FILL_PROCS = 2


@contextlib.contextmanager
def api_for(gw: GatewayProc) -> Iterator[Api]:
    api = Api(gw.address)
    try:
        yield api
    finally:
        api.close()


def kafka_topic(topic: str) -> str:
    return names.kafka_topic_for(names.TopicName(topic))


def fill(bench: Bench, topic: str, count: int) -> float:
    """Write `count` 1 KiB records straight into the Kafka topic of Pub/Sub `topic` with raw
    producers; returns the rate (records/s)."""
    per = [count // FILL_PROCS + (1 if i < count % FILL_PROCS else 0) for i in range(FILL_PROCS)]
    tasks = [
        (publish.raw_fill, {"bootstrap": bench.bootstrap, "topic": kafka_topic(topic), "count": n})
        for n in per
        if n
    ]
    results, _ = bench.run(tasks, lead=0.2)
    done = sum(int(r["count"]) for r in results)
    if done != count:
        raise RuntimeError(f"filling {topic}: {done} of {count} records confirmed")
    seconds = max(float(r["t1"]) for r in results) - min(float(r["t0"]) for r in results)
    return done / max(seconds, 1e-6)
