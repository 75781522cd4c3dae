"""python -m benchmarks.spark_bench [--messages N] [--out FILE] [--kafka-bootstrap HOST:PORT]

Spark batch read of a subscription's backlog: N messages (100-byte data, two attributes) are
written into the topic by a plain Kafka producer; a Pub/Sub client pulls all of them through the
gateway and acknowledges a random 10%, the rest stay leased (600 s deadline), and the gateway
folds it all into checkpoints. Then, in one local[2] SparkSession, alternately:

- "plain": Spark's Kafka source over the whole topic, every column (what any Spark job pays);
- "pubsub view": the same plus the Pub/Sub columns (message_id, attributes map, ...);
- "backlog": `spark.read_backlog` (finds the subscription, reads the ack log, anti-joins),
  timed from the call, so the ack-log reading is included; `backlog_planning_seconds` is the
  call alone (subscription, ack log snapshot, offsets), `ack_log` what the log holds.

Each read is executed with the `noop` sink (all rows produced, nothing written), after one
untimed warm-up. The best of the repetitions counts;
`filter_overhead` = backlog seconds / plain seconds - 1 (target <= 0.30).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.processes import GatewayProc, delete_topics, kafka_broker
from gateway.translate import names

PROJECT = "projects/bench"
ACK_RATIO = 0.10
PULLERS = 4


@contextlib.contextmanager
def gateway(bootstrap: str, prefix: str, log_path: Path, *extra: str) -> Iterator[tuple[str, int]]:
    """`python -m gateway serve` as a subprocess (benchmarks.processes.GatewayProc); yields its
    gRPC address and its pid."""
    proc = GatewayProc(bootstrap, prefix, log_path, *extra)
    try:
        yield proc.address, proc.pid
    finally:
        proc.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    data = os.urandom(50).hex().encode()
    started = time.monotonic()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, data, headers=[("seq", str(i).encode()), ("source", b"bench")])
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.monotonic() - started


def pull_and_ack(address: str, subscription: str, n: int) -> dict[str, Any]:
    """Pull until all n messages were delivered; acknowledge a random ACK_RATIO of them."""
    os.environ["PUBSUB_EMULATOR_HOST"] = address
    from google.cloud import pubsub_v1

    client = pubsub_v1.SubscriberClient()
    seen: set[str] = set()
    acked: set[str] = set()
    rng = random.Random(1)
    started = time.monotonic()

    def pull_once() -> list[tuple[str, str]]:
        resp = client.pull(subscription=subscription, max_messages=1000, timeout=30)
        return [(m.message.message_id, m.ack_id) for m in resp.received_messages]

    with ThreadPoolExecutor(PULLERS) as pool:
        while len(seen) < n and time.monotonic() - started < 900:
            batch = [m for got in pool.map(lambda _: pull_once(), range(PULLERS)) for m in got]
            fresh = [(mid, aid) for mid, aid in batch if mid not in seen]
            seen.update(mid for mid, _ in fresh)
            chosen = [(mid, aid) for mid, aid in fresh if rng.random() < ACK_RATIO]
            if chosen:
                client.acknowledge(subscription=subscription, ack_ids=[aid for _, aid in chosen])
                acked.update(mid for mid, _ in chosen)
    return {"delivered": len(seen), "acked": len(acked), "seconds": round(time.monotonic() - started, 1)}


def timed(action: Any) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def spark_session(
    workdir: Path, master: str = "local[2]", driver_memory: str = "1g", name: str = "spark-bench"
) -> Any:
    from spark import connector

    cwd = Path.cwd()
    os.chdir(workdir)  # Spark 4.0.0 keeps an `artifacts` directory in the JVM's working directory
    try:
        spark = connector.builder(name, master, driver_memory).getOrCreate()
    finally:
        os.chdir(cwd)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def create(address: str, topic: str, subscription: str) -> None:
    """The topic and a subscription with a 600 s ack deadline (what is pulled stays leased)."""
    from google.cloud import pubsub_v1

    os.environ["PUBSUB_EMULATOR_HOST"] = address
    pubsub_v1.PublisherClient().create_topic(name=topic)
    pubsub_v1.SubscriberClient().create_subscription(
        request={"name": subscription, "topic": topic, "ack_deadline_seconds": 600}
    )


def ack_log_size(spark: Any, bootstrap: str, subscription: str, prefix: str) -> dict[str, Any]:
    """What `read_backlog` has to scan: the log topic as Kafka holds it now (not yet compacted)."""
    from pyspark.sql import functions as F

    from spark import KafkaConnection, load

    sub = load(subscription, KafkaConnection(bootstrap), prefix)
    log = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", sub.meta.log_topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    row = log.agg(
        F.count("*").alias("n"),
        F.sum(F.length("value")).alias("b"),
        F.sum(F.col("key").cast("string").startswith("s.").cast("int")).alias("cp"),
    ).collect()[0]
    return {"records": row["n"], "checkpoint_versions": row["cp"], "mb": round((row["b"] or 0) / 2**20, 1)}


def spark_reads(
    spark: Any, bootstrap: str, kafka_topic: str, subscription: str, prefix: str, reps: int
) -> dict[str, Any]:
    """The three reads, alternating, in `spark` (local or on a cluster); the caller stops it."""
    from spark import read_backlog
    from spark.messages import pubsub_view

    def plain() -> Any:
        return (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", kafka_topic)
            .option("includeHeaders", "true")
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )

    actions: dict[str, Callable[[], Any]] = {
        "plain": lambda: plain(),
        "pubsub view": lambda: pubsub_view(plain()),
        "backlog": lambda: read_backlog(spark, subscription, bootstrap, prefix),
    }
    rows = {label: make().count() for label, make in actions.items()}  # also warms the JVM up
    runs: dict[str, list[float]] = {label: [] for label in actions}
    planning: list[float] = []
    for _ in range(reps):
        for label, make in actions.items():
            runs[label].append(timed(lambda make=make: make().write.format("noop").mode("overwrite").save()))
        planning.append(timed(actions["backlog"]))
    log = ack_log_size(spark, bootstrap, subscription, prefix)
    best = {k: min(v) for k, v in runs.items()}
    return {
        "rows": rows,
        "seconds": {k: [round(x, 2) for x in v] for k, v in runs.items()},
        "best_seconds": {k: round(v, 2) for k, v in best.items()},
        "rate_per_s": {k: round(rows[k] / best[k]) for k in best},
        "backlog_planning_seconds": round(min(planning), 2),
        "ack_log": log,
        "filter_overhead": round(best["backlog"] / best["plain"] - 1, 3),
        "filter_overhead_vs_view": round(best["backlog"] / best["pubsub view"] - 1, 3),
    }


def run(bootstrap: str, n: int, reps: int, logs: Path, gateway_args: list[str]) -> dict[str, Any]:
    prefix, uid = f"sparkbench{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:8]
    topic, subscription = f"{PROJECT}/topics/t-{uid}", f"{PROJECT}/subscriptions/s-{uid}"
    kafka_topic = names.kafka_topic_for(names.topic(topic))
    try:
        with gateway(bootstrap, prefix, logs / "gateway.log", *gateway_args) as (address, pid):
            create(address, topic, subscription)
            produced = produce(bootstrap, kafka_topic, n)
            acks = pull_and_ack(address, subscription, n)
            before = cpu_seconds(pid)
            time.sleep(5)  # a few checkpoint intervals: the log is folded as in steady state
            acks["gateway_cpu_after_acks"] = round((cpu_seconds(pid) - before) / 5, 2)
        # Spark needs no gateway; stopping it keeps the two cores for the reads.
        spark = spark_session(logs)
        try:
            reads = spark_reads(spark, bootstrap, kafka_topic, subscription, prefix, reps)
        finally:
            spark.stop()
    finally:
        delete_topics(bootstrap, prefix)
        delete_topics(bootstrap, kafka_topic)
    return {"messages": n, "produce_seconds": round(produced, 1), "gateway_pull_ack": acks, **reads}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.spark_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3, help="timed runs of each read (best counts)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "spark.json")
    parser.add_argument("--kafka-bootstrap")
    parser.add_argument(
        "--checkpoint-interval",
        type=float,
        help="the gateway's --checkpoint-interval-seconds (default: its default)",
    )
    args = parser.parse_args(argv)
    with (
        kafka_broker(args.kafka_bootstrap) as (bootstrap, _, _),
        tempfile.TemporaryDirectory(prefix="spark-bench-") as logs,
    ):
        extra = (
            []
            if args.checkpoint_interval is None
            else ["--checkpoint-interval-seconds", str(args.checkpoint_interval)]
        )
        result = run(bootstrap, args.messages, args.reps, Path(logs), extra)
    result = {"command": " ".join(["python -m benchmarks.spark_bench", *(argv or sys.argv[1:])]), **result}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
