"""The Spark examples of README.md and docs/spark.md, run as printed there on this suite's
session, broker and gateway. Only what belongs to the machine changes: the broker's address, the
gateway's internal prefix, the output paths, and the project (a project of the test's own, since
Kafka topic names are the project's and the suite's gateways share one broker)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from google.cloud import pubsub_v1
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from tests.doc_examples import example
from tests.e2e.clients import clients, pull_nothing
from tests.gateways import GatewayProcess
from tests.spark.conftest import SPARK_WARNINGS

pytestmark = [pytest.mark.integration, *SPARK_WARNINGS]
DATAS = [f"doc {i}".encode() for i in range(5)]


def _placed(code: str, gw: GatewayProcess, project: str, tmp_path: Path) -> str:
    for broker in ("localhost:9092", "broker:9092"):
        code = code.replace(broker, gw.bootstrap)
    for path in ("/tmp/s", "/data/s", "/chk/t"):
        code = code.replace(f'"{path}"', repr(str(tmp_path / path.strip("/").replace("/", "-"))))
    return code.replace("__pubsub_gateway", gw.prefix).replace("my-project", project)


def _backlog(gw: GatewayProcess, project: str) -> tuple[pubsub_v1.SubscriberClient, str]:
    pub, sub = clients(gw)
    topic, subscription = f"projects/{project}/topics/my-topic", f"projects/{project}/subscriptions/my-sub"
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    for future in [pub.publish(topic, d, origin="doc") for d in DATAS]:
        future.result(timeout=30)
    return sub, subscription


def _read_write_and_acknowledge(
    code: str, doc: str, gw: GatewayProcess, spark: SparkSession, tmp_path: Path
) -> None:
    """The backlog is written to Parquet, then acknowledged: subscribers get none of it again."""
    project = f"doc-{uuid.uuid4().hex[:8]}"
    sub, subscription = _backlog(gw, project)
    exec(compile(_placed(code, gw, project, tmp_path), doc, "exec"), {})
    (written,) = list(tmp_path.iterdir())
    assert sorted(r.data for r in spark.read.parquet(str(written)).select("data").collect()) == sorted(DATAS)
    assert pull_nothing(sub, subscription, 3) == []


def test_the_readme_example(spark: SparkSession, shared_gateway: GatewayProcess, tmp_path: Path) -> None:
    code = example("README.md", "readme-spark")
    _read_write_and_acknowledge(code, "README.md", shared_gateway, spark, tmp_path)


def test_the_five_lines(spark: SparkSession, shared_gateway: GatewayProcess, tmp_path: Path) -> None:
    code = example("docs/spark.md", "spark-five-lines")
    _read_write_and_acknowledge(code, "docs/spark.md", shared_gateway, spark, tmp_path)


def test_publishing_a_batch_and_a_stream(
    spark: SparkSession, shared_gateway: GatewayProcess, tmp_path: Path
) -> None:
    project = f"doc-{uuid.uuid4().hex[:8]}"
    pub, sub = clients(shared_gateway)
    topic, subscription = f"projects/{project}/topics/my-topic", f"projects/{project}/subscriptions/all"
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    schema = T.StructType([T.StructField("data", T.BinaryType())])
    spark.createDataFrame([(b"batch row",)], schema).write.parquet(str(tmp_path / "in"))
    namespace = {
        "df": spark.createDataFrame([(b"batch row",)], schema),
        "stream_df": spark.readStream.schema(schema).parquet(str(tmp_path / "in")),
    }
    code = _placed(example("docs/spark.md", "spark-write-topic"), shared_gateway, project, tmp_path)
    before = {q.id for q in spark.streams.active}
    exec(compile(code, "docs/spark.md", "exec"), namespace)
    (query,) = [q for q in spark.streams.active if q.id not in before]
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        batch = sub.pull(subscription=subscription, max_messages=10, timeout=10).received_messages
        got += [m.message.data for m in batch]
        if batch:
            sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in batch])
    assert got == [b"batch row", b"batch row"]  # one from the batch write, one from the stream
