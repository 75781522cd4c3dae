"""python -m benchmarks.spark_cluster_bench [--messages N] [--pull N] [--reps R] [--out FILE]

The Spark side at scale on a standalone cluster (benchmarks/spark_standalone.py: a master and
two workers of one core on loopback, from the pyspark package), one application with an
executor on each worker.

The backlog: N messages (100-byte data, two attributes) written into the topic by a plain Kafka
producer with the gateway's record conventions (benchmarks/spark_bench.py `produce`), then
acknowledged by both writers of the lease/ack log:

- the gateway: a Pub/Sub client pulls the first `--pull` messages (default 1,000,000) and
  acknowledges a random 10% of them, the rest stay leased (600 s deadline); the gateway folds
  it all into its checkpoints. Pulling all of 10^7 through one gateway would take 5-10 min (30k/s
  in spark_bench's run, 17k/s in this one's), and its leases would all be live at once;
- Spark: with the gateway stopped, `spark.ack()` acknowledges 10% of the whole topic (the
  records whose xxhash64(partition, offset) is 0 mod 10): ~N/10 scattered single offsets,
  N/10 ack ranges in commands that every read folds (`read_backlog` on the driver, the
  stream of the export job in each micro-batch).

Then, in one session on the cluster, as benchmarks/spark_bench.py does on local[2]: the plain
Spark Kafka read of the topic, the same with the Pub/Sub columns, and `read_backlog`, into the
`noop` sink, alternating, best of `--reps`; and last the export job (`spark.export_job.run`,
`--once`, in one micro-batch unless `--max-per-batch` is given, Parquet into a temporary directory, each batch
acknowledged) in the same session, so its figure is the job's throughput without its JVM's
start. It runs once: it acknowledges what it exports. Checked: the files hold as many rows as
`read_backlog` returned.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.processes import delete_topics, kafka_broker
from benchmarks.spark_bench import (
    PROJECT,
    create,
    gateway,
    produce,
    pull_and_ack,
    spark_reads,
    spark_session,
)
from benchmarks.spark_standalone import Standalone, await_executors
from gateway.translate import names

EXECUTORS = 2
ACK_MODULUS = 10  # Spark acknowledges the records whose xxhash64(partition, offset) % 10 == 0


def spark_acks(
    spark: Any, bootstrap: str, kafka_topic: str, subscription: str, prefix: str
) -> dict[str, Any]:
    """`spark.ack()` of a tenth of the topic, scattered: every read then folds ~N/10 ranges."""
    from pyspark.sql import functions as F

    from spark import ack

    chosen = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", kafka_topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .select("partition", "offset")
        .where(F.pmod(F.xxhash64("partition", "offset"), F.lit(ACK_MODULUS)) == 0)
    )
    rows = chosen.count()
    started = time.monotonic()
    ack(chosen, subscription, bootstrap, prefix)
    return {"acked": rows, "seconds": round(time.monotonic() - started, 1)}


def export(
    spark: Any, bootstrap: str, subscription: str, prefix: str, work: Path, per_batch: int | None
) -> dict[str, Any]:
    """The export job's own code (`spark.export_job.run`) in this session, timed to its end."""
    from spark import export_job

    out = work / "export"
    args = export_job.parse_args(
        [
            "--subscription", subscription, "--bootstrap", bootstrap, "--internal-prefix", prefix,
            "--output", str(out), "--checkpoint", str(work / "export-checkpoint"),
            "--master", spark.sparkContext.master, "--once",
            *(["--max-per-batch", str(per_batch)] if per_batch else []),
        ]
    )  # fmt: skip
    started = time.monotonic()
    export_job.run(args)  # takes this session (getOrCreate)
    seconds = time.monotonic() - started
    spark.sparkContext.setLogLevel("ERROR")  # the job sets WARN
    rows = spark.read.parquet(str(out)).count()
    return {
        "rows": rows,
        "seconds": round(seconds, 1),
        "rate_per_s": round(rows / seconds),
        "batches": sum(not f.name.startswith(".") for f in (out / "_batches").iterdir()),  # not .crc
        "max_per_batch": per_batch,
        "parquet_mb": round(sum(f.stat().st_size for f in out.rglob("*.parquet")) / 2**20, 1),
    }


class Results:
    """The figures so far, rewritten to `path` after every phase: a run cut short keeps them."""

    def __init__(self, path: Path, command: str) -> None:
        self.path = path
        self.started = time.monotonic()
        self.data: dict[str, Any] = {"command": command, "complete": False}

    def add(self, **figures: Any) -> None:
        self.data.update(figures, wall_seconds=round(time.monotonic() - self.started))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1) + "\n")


def run(bootstrap: str, args: argparse.Namespace, work: Path, results: Results) -> None:
    n = args.messages
    prefix, uid = f"sparkbench{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:8]
    topic, subscription = f"{PROJECT}/topics/t-{uid}", f"{PROJECT}/subscriptions/s-{uid}"
    kafka_topic = names.kafka_topic_for(names.topic(topic))
    cluster_conf = {
        "executors": EXECUTORS,
        "executor_cores": 1,
        "executor_memory": args.executor_memory,
        "driver_memory": args.driver_memory,
    }
    results.add(messages=n, cluster=cluster_conf)
    try:
        with gateway(bootstrap, prefix, work / "gateway.log") as (address, _):
            create(address, topic, subscription)
            results.add(produce_seconds=round(produce(bootstrap, kafka_topic, n), 1))
            results.add(gateway_pull_ack=pull_and_ack(address, subscription, min(n, args.pull)))
            time.sleep(3)  # a few checkpoint intervals: the log is folded as in steady state
        # No gateway owns the partitions now: ack() returns once Kafka has the commands, and
        # the two cores are left to the cluster.
        with Standalone(
            work / "cluster", workers=EXECUTORS, cores=1, memory=args.worker_memory,
            executor_memory=args.executor_memory,
        ) as cluster:  # fmt: skip
            os.environ["SPARK_CONF_DIR"] = str(cluster.conf_dir)
            spark = spark_session(work, cluster.master_url, args.driver_memory, "spark-cluster-bench")
            try:
                await_executors(spark, EXECUTORS)
                results.add(spark_ack=spark_acks(spark, bootstrap, kafka_topic, subscription, prefix))
                reads = spark_reads(spark, bootstrap, kafka_topic, subscription, prefix, args.reps)
                results.add(**reads)
                exported = export(spark, bootstrap, subscription, prefix, work, args.max_per_batch)
                results.add(export=exported)
            finally:
                spark.stop()
    finally:
        delete_topics(bootstrap, prefix)
        delete_topics(bootstrap, kafka_topic)
    if exported["rows"] != reads["rows"]["backlog"]:
        raise AssertionError(f"exported {exported['rows']} rows, the backlog had {reads['rows']['backlog']}")
    results.add(complete=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.spark_cluster_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--pull", type=int, default=1_000_000, help="messages pulled through the gateway")
    parser.add_argument("--reps", type=int, default=3, help="timed runs of each read (best counts)")
    parser.add_argument(
        "--max-per-batch",
        type=int,
        help="records per micro-batch of the export job (default: one batch; see docs/spark.md)",
    )
    parser.add_argument("--executor-memory", default="1g")
    parser.add_argument("--worker-memory", default="1100m", help="what each worker offers executors")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "spark-cluster.json")
    parser.add_argument("--kafka-bootstrap")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.spark_cluster_bench", *(argv or sys.argv[1:])])
    results = Results(args.out, command)
    with (
        kafka_broker(args.kafka_bootstrap) as (bootstrap, _, _),
        tempfile.TemporaryDirectory(prefix="spark-cluster-bench-") as work,
    ):
        run(bootstrap, args, Path(work), results)
    print(json.dumps(results.data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
