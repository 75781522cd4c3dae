"""The Spark side on a standalone cluster: executors in JVMs of their own read subscriptions,
acknowledge, stream and export, against a gateway subprocess and the official client.

Figures (times) are printed: `make test-spark-cluster` shows them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from google.cloud import pubsub_v1
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from benchmarks.spark_standalone import Standalone, executors
from gateway.translate.records import message_id
from spark import ack, read_backlog, read_stream
from tests.e2e.clients import clients, pull_nothing, pull_until
from tests.gateways import GatewayProcess
from tests.spark.conftest import SPARK_WARNINGS
from tests.spark_cluster.conftest import EXECUTORS, repo

pytestmark = [pytest.mark.integration, pytest.mark.spark_cluster, *SPARK_WARNINGS]
Names = Callable[..., str]


def _figure(what: str, seconds: float, rows: int | None = None) -> None:
    rate = f", {rows / seconds:,.0f} rows/s" if rows else ""
    print(f"\nFIGURE {what}: {seconds:.2f} s{f' ({rows:,} rows{rate})' if rows else ''}", flush=True)


def _setup(
    gw: GatewayProcess, names: Names
) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient, str, str]:
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    return pub, sub, topic, subscription


def _publish(pub: pubsub_v1.PublisherClient, topic: str, n: int, first: int = 0) -> dict[str, int]:
    futures = {pub.publish(topic, f"m{i}".encode(), n=str(i)): i for i in range(first, first + n)}
    return {f.result(timeout=60): i for f, i in futures.items()}


def test_executors_are_other_jvms_that_load_our_python(spark: SparkSession, cluster: Standalone) -> None:
    assert spark.sparkContext.master == cluster.master_url
    assert executors(spark) == EXECUTORS
    # a Python function on the executors, importing the gateway's package: spark.pyspark.python
    # and the executors' PYTHONPATH reach it
    got = (
        spark.sparkContext.parallelize(range(8), 4)
        .map(
            lambda i: (
                __import__("gateway.translate.records").translate.records.message_id(i, 7),
                os.getpid(),
            )
        )
        .collect()
    )
    assert [mid for mid, _ in got] == [message_id(i, 7) for i in range(8)]
    assert os.getpid() not in {pid for _, pid in got}


def test_backlog_ack_and_stream_on_the_cluster(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    gw = shared_gateway
    pub, sub, topic, subscription = _setup(gw, names)
    ids = _publish(pub, topic, 2000)
    pulled = pull_until(sub, subscription, 500, max_messages=500)[:500]
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in pulled])
    acked = {m.message.message_id for m in pulled}

    start = time.monotonic()
    backlog = read_backlog(spark, subscription, gw.bootstrap, gw.prefix)
    rows = {r["message_id"]: r for r in backlog.collect()}
    _figure(
        "read_backlog, 2,000 published, 500 acked through the gateway", time.monotonic() - start, len(rows)
    )
    assert set(rows) == set(ids) - acked
    assert all(int(r["attributes"]["n"]) == ids[mid] for mid, r in rows.items())

    by_spark = {mid for mid in rows if ids[mid] % 2 == 0}
    start = time.monotonic()
    ack(backlog.where(F.col("attributes")["n"].cast("int") % 2 == 0), subscription, gw.bootstrap, gw.prefix)
    _figure("ack() of the even half, until the owner applied it", time.monotonic() - start, len(by_spark))
    got = sub.pull(subscription=subscription, max_messages=1000, timeout=30).received_messages
    assert got
    assert {m.message.message_id for m in got} & by_spark == set()

    owed = set(rows) - by_spark
    query = (
        read_stream(spark, subscription, gw.bootstrap, gw.prefix)
        .select("message_id")
        .writeStream.format("memory")
        .queryName("cluster_stream")
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        start = time.monotonic()
        query.processAllAvailable()
        first = {r["message_id"] for r in spark.table("cluster_stream").collect()}
        _figure("read_stream, first micro-batches", time.monotonic() - start, len(first))
        assert first == owed
        new = _publish(pub, topic, 100, first=2000)
        start = time.monotonic()
        while not set(new) <= {r["message_id"] for r in spark.table("cluster_stream").collect()}:
            assert time.monotonic() - start < 60, "the stream did not see the new messages"
            time.sleep(0.2)
        _figure("read_stream, 100 new messages seen after", time.monotonic() - start, 100)
    finally:
        query.stop()


@pytest.mark.timeout(420)  # a Spark application of its own: 143 s measured on 2 loaded cores
def test_export_job_on_the_cluster(
    spark: SparkSession, cluster: Standalone, shared_gateway: GatewayProcess, names: Names, tmp_path: Path
) -> None:
    gw = shared_gateway
    pub, sub, topic, subscription = _setup(gw, names)
    ids = _publish(pub, topic, 1000)
    cmd = [
        sys.executable, "-m", "spark.export_job", "--subscription", subscription, "--bootstrap",
        gw.bootstrap, "--internal-prefix", gw.prefix, "--output", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "checkpoint"), "--master", cluster.master_url,
        "--driver-memory", "768m", "--max-per-batch", "400", "--once",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(repo())}  # SPARK_CONF_DIR: the cluster's defaults
    start = time.monotonic()
    with open(tmp_path / "export.log", "wb") as log:
        job = subprocess.run(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=400)
    _figure("export job --once on the cluster (process start to exit)", time.monotonic() - start, len(ids))
    assert job.returncode == 0, (tmp_path / "export.log").read_text()[-3000:]
    assert "Registering app pubsub-export" in (cluster.work / "master.log").read_text()

    files = spark.read.parquet(str(tmp_path / "out")).groupBy("message_id").agg(F.count("*").alias("copies"))
    got = files.collect()
    assert {r["message_id"] for r in got} == set(ids)
    assert {r["copies"] for r in got} == {1}
    assert pull_nothing(sub, subscription, 3) == []
