"""Export a subscription to Parquet continuously, acknowledging only what is committed to files.

    python -m spark.export_job --subscription projects/p/subscriptions/s \\
        --bootstrap HOST:PORT --output DIR --checkpoint DIR [--trigger-seconds N] [--once]

A structured stream (`read_stream`) of the subscription; each micro-batch is written as Parquet
under `DIR/publish_date=YYYY-MM-DD/batch-<id>-<n>.parquet` (UTC dates), committed by a marker
`DIR/_batches/<id>`, and only then acknowledged in the lease/ack log. A batch re-run after a
crash (same id, same offsets, from the streaming checkpoint) either finds its marker and only
acknowledges again, or removes its partial files and writes them anew: every message lands in
exactly one file, and is acknowledged only once it is there.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark import connector
from spark.acks import ack
from spark.options import KafkaConnection
from spark.reader import read_stream
from spark.subscription import DEFAULT_PREFIX

log = logging.getLogger("spark.export_job")


class BatchFiles:
    """Per-batch Parquet files with an idempotent commit, through Hadoop's FileSystem API (so
    the output may be local, HDFS, S3A, ...)."""

    def __init__(self, spark: SparkSession, output: str) -> None:
        jvm: Any = spark._jvm  # py4j: the way to Hadoop's FileSystem
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._root = self._Path(output)
        self._fs = self._root.getFileSystem(spark._jsc.hadoopConfiguration())
        self.output = str(self._root)

    def _path(self, *parts: str) -> Any:
        return self._Path(self._root, "/".join(parts))

    def committed(self, batch_id: int) -> bool:
        return bool(self._fs.exists(self._path("_batches", str(batch_id))))

    def write(self, df: DataFrame, batch_id: int) -> int:
        """Write the batch's files and commit them; returns how many files."""
        staging = self._path("_staging", f"batch-{batch_id}")
        (df.write.mode("overwrite").partitionBy("publish_date").parquet(str(staging.toString())))
        self._remove_final(batch_id)
        files = self._fs.globStatus(self._Path(staging, "publish_date=*/*.parquet")) or []
        paths = sorted((f.getPath() for f in files), key=lambda p: str(p.toString()))
        for n, src in enumerate(paths):
            day = self._Path(self._root, src.getParent().getName())
            self._fs.mkdirs(day)
            if not self._fs.rename(src, self._Path(day, f"batch-{batch_id:010d}-{n:04d}.parquet")):
                raise OSError(f"cannot move {src.toString()} into {day.toString()}")
        self._fs.delete(staging, True)
        self._fs.create(self._path("_batches", str(batch_id)), True).close()
        return len(paths)

    def _remove_final(self, batch_id: int) -> None:
        """Files of an earlier attempt at this batch that crashed before its marker."""
        pattern = self._path("publish_date=*", f"batch-{batch_id:010d}-*.parquet")
        for f in self._fs.globStatus(pattern) or []:
            self._fs.delete(f.getPath(), False)


class Exporter:
    """The foreachBatch function: write and commit, then acknowledge."""

    def __init__(self, files: BatchFiles, subscription: str, conn: KafkaConnection, prefix: str) -> None:
        self.files = files
        self.subscription = subscription
        self.conn = conn
        self.prefix = prefix

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.withColumn("publish_date", F.to_date("publish_time")).persist()
        try:
            rows = batch.count()
            if rows == 0:
                return
            done = self.files.committed(batch_id)
            files = 0 if done else self.files.write(batch, batch_id)
            ack(batch, self.subscription, self.conn, self.prefix)
            log.info(
                "batch %d: %d messages, %d files%s, acknowledged",
                batch_id,
                rows,
                files,
                " (committed before)" if done else "",
            )
            print(f"BATCH {batch_id} rows={rows} files={files}", flush=True)
        finally:
            batch.unpersist()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m spark.export_job", description=__doc__.split("\n")[0])
    p.add_argument("--subscription", required=True, help="projects/P/subscriptions/S")
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, HOST:PORT[,...]")
    p.add_argument("--output", required=True, help="Parquet output directory (any Hadoop path)")
    p.add_argument("--checkpoint", required=True, help="the streaming query's checkpoint directory")
    p.add_argument("--trigger-seconds", type=float, default=10.0, help="micro-batch interval (default 10)")
    p.add_argument("--once", action="store_true", help="export what is there now, then stop")
    p.add_argument("--internal-prefix", default=DEFAULT_PREFIX, help="the gateway's --internal-prefix")
    p.add_argument("--max-per-batch", type=int, help="at most this many records per micro-batch")
    p.add_argument(
        "--kafka-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Kafka client setting for Spark (repeatable), e.g. security.protocol=SSL",
    )
    p.add_argument(
        "--librdkafka-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the driver's own reads (librdkafka; repeatable), if any is "
        "given; else the --kafka-setting ones. SASL logins need them: Java's "
        "sasl.jaas.config is librdkafka's sasl.username and sasl.password",
    )
    p.add_argument(
        "--master",
        default="local[2]",
        help="Spark master when run with python -m (ignored under spark-submit)",
    )
    p.add_argument("--driver-memory", default="1g")
    return p.parse_args(argv)


def session(args: argparse.Namespace) -> SparkSession:
    """Under spark-submit (the JVM is already up), take its session as configured (--packages,
    --master); run directly, start a local one with the connector from the project's cache."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return SparkSession.builder.appName("pubsub-export").getOrCreate()
    spark: SparkSession = connector.builder("pubsub-export", args.master, args.driver_memory).getOrCreate()
    return spark


def run(args: argparse.Namespace) -> None:
    spark = session(args)
    spark.sparkContext.setLogLevel("WARN")
    driver = dict(s.split("=", 1) for s in args.librdkafka_setting)
    conn = KafkaConnection(args.bootstrap, dict(s.split("=", 1) for s in args.kafka_setting), driver or None)
    options = {"maxOffsetsPerTrigger": str(args.max_per_batch)} if args.max_per_batch else {}
    stream = read_stream(spark, args.subscription, conn, args.internal_prefix, options=options)
    exporter = Exporter(BatchFiles(spark, args.output), args.subscription, conn, args.internal_prefix)
    writer = (
        stream.writeStream.foreachBatch(exporter)
        .option("checkpointLocation", args.checkpoint)
        .queryName("pubsub-export")
    )
    if args.once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()  # no JVM call from a signal handler: the main thread may be inside one

    signal.signal(signal.SIGTERM, stop)
    query = writer.start()
    while not query.awaitTermination(1):
        if stopping.is_set():
            query.stop()  # a batch cut short is replayed (idempotently) on the next start


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
