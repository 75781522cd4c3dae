"""Spark reads subscriptions through its Kafka source and honours (and writes) the ack log.

The gateway runs as a subprocess; the official client publishes, pulls and acks.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from google.cloud import pubsub_v1
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from gateway.leases import logformat
from gateway.leases.commands import Ack
from gateway.leases.ranges import to_ranges
from gateway.translate.records import parse_message_id
from spark import ack, driver, read_backlog
from spark.options import connection
from spark.subscription import load
from tests.e2e.clients import clients, pull_nothing, pull_until
from tests.gateways import GatewayProcess, emulator_env
from tests.spark.conftest import SPARK_WARNINGS

pytestmark = [pytest.mark.integration, *SPARK_WARNINGS]
REPO = Path(__file__).resolve().parents[2]
Names = Callable[..., str]


def _setup(
    gw: GatewayProcess, names: Names, **topic: object
) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient, str, str]:
    with emulator_env(gw.address):
        pub = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
        )
    sub = clients(gw)[1]
    t, s = names("topics"), names("subscriptions")
    pub.create_topic(request={"name": t, **topic})
    sub.create_subscription(name=s, topic=t)
    return pub, sub, t, s


def _publish(pub: pubsub_v1.PublisherClient, topic: str, n: int) -> dict[str, int]:
    futures = {
        i: pub.publish(topic, f"m{i}".encode(), ordering_key=f"k{i % 3}" if i % 2 else "", n=str(i))
        for i in range(n)
    }
    return {f.result(timeout=30): i for i, f in futures.items()}


def test_messages_acked_through_the_gateway_never_appear(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    gw = shared_gateway
    pub, sub, topic, subscription = _setup(gw, names)
    ids = _publish(pub, topic, 40)
    pulled = pull_until(sub, subscription, 20, max_messages=20)
    acked, leased = pulled[:10], pulled[10:]
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in acked])

    rows = {r["message_id"]: r for r in read_backlog(spark, subscription, gw.bootstrap, gw.prefix).collect()}

    assert set(rows) == set(ids) - {m.message.message_id for m in acked}
    for m in leased:  # delivered but not acknowledged: still owed, and seen as Pub/Sub sees it
        row = rows[m.message.message_id]
        assert bytes(row["data"]) == m.message.data
        assert row["attributes"] == dict(m.message.attributes)
        assert row["ordering_key"] == m.message.ordering_key
        assert abs(row["publish_time"].timestamp() - m.message.publish_time.timestamp()) < 0.001


def test_messages_spark_acknowledged_are_not_delivered(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    gw = shared_gateway
    pub, sub, topic, subscription = _setup(gw, names)
    ids = _publish(pub, topic, 30)
    backlog = read_backlog(spark, subscription, gw.bootstrap, gw.prefix)

    ack(backlog.where(F.col("attributes")["n"].cast("int") % 2 == 0), subscription, gw.bootstrap, gw.prefix)

    odd = {mid for mid, i in ids.items() if i % 2}
    again = read_backlog(spark, subscription, gw.bootstrap, gw.prefix).select("message_id").collect()
    assert {r["message_id"] for r in again} == odd
    got = pull_until(sub, subscription, len(odd))
    assert {m.message.message_id for m in got} == odd
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])
    assert pull_nothing(sub, subscription, 3) == []


def test_a_pull_right_after_spark_acks_delivers_none_of_them(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    """ack() returns only once the partitions' owner has applied the acks: the messages it
    already fetched and holds ready must not go out to the very next Pull."""
    gw = shared_gateway
    pub, sub, topic, subscription = _setup(gw, names)
    ids = _publish(pub, topic, 600)
    first = pull_until(sub, subscription, 1, max_messages=1)  # the owner now holds the rest ready
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in first])
    backlog = read_backlog(spark, subscription, gw.bootstrap, gw.prefix)
    ack(backlog.where(F.col("attributes")["n"].cast("int") < 300), subscription, gw.bootstrap, gw.prefix)

    acked = {mid for mid, i in ids.items() if i < 300}
    got = sub.pull(subscription=subscription, max_messages=1000, timeout=30).received_messages
    assert got, "the owner delivered nothing at all"
    assert {m.message.message_id for m in got} & acked == set()
    rest = pull_until(sub, subscription, 600 - len(acked | {first[0].message.message_id}) - len(got))
    delivered = {m.message.message_id for m in [*got, *rest]}
    assert delivered & acked == set()
    assert delivered == set(ids) - acked - {first[0].message.message_id}


@pytest.mark.parametrize("wait", [True])
def test_acks_written_to_the_log_hold_once_applied(
    shared_gateway: GatewayProcess, names: Names, wait: bool
) -> None:
    """The mechanism under ack(), without Spark's own latency: ack commands produced straight
    into the log, then `await_applied`, then at once a Pull. (Without the wait this test failed
    2 runs of 2: the owner handed out acked messages it had not yet read the commands of.)"""
    gw = shared_gateway
    pub, sub, topic, subscription = _setup(gw, names)
    ids = _publish(pub, topic, 600)
    first = pull_until(sub, subscription, 1, max_messages=1)
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in first])
    conn = connection(gw.bootstrap)
    meta = load(subscription, conn, gw.prefix).meta
    acked = {mid for mid, i in ids.items() if i < 300}
    by_partition: dict[int, list[int]] = {}
    for mid in acked:
        p, o = parse_message_id(mid)
        by_partition.setdefault(p, []).append(o)
    producer = Producer({"bootstrap.servers": gw.bootstrap})
    for p, offsets in by_partition.items():
        cmd = Ack(p, tuple(to_ranges(sorted(offsets))), meta.epoch)
        producer.produce(
            meta.log_topic, logformat.encode(cmd), logformat.command_key(p, "test", 0), partition=p
        )
    producer.flush(10)
    if wait:
        driver.await_applied(conn, meta.log_topic, meta.partitions, meta.group_id, meta.applied_group, 30)

    got = sub.pull(subscription=subscription, max_messages=1000, timeout=30).received_messages
    assert got
    assert {m.message.message_id for m in got} & acked == set()


def test_seek_starts_a_new_epoch(spark: SparkSession, shared_gateway: GatewayProcess, names: Names) -> None:
    gw = shared_gateway
    pub, sub, topic, subscription = _setup(gw, names)
    start = datetime.datetime.now(tz=datetime.UTC) - datetime.timedelta(seconds=1)
    ids = _publish(pub, topic, 10)
    got = pull_until(sub, subscription, 10)
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])

    sub.seek(request={"subscription": subscription, "time": start})  # epoch 1: all owed again

    backlog = read_backlog(spark, subscription, gw.bootstrap, gw.prefix)
    assert {r["message_id"] for r in backlog.select("message_id").collect()} == set(ids)
    ack(backlog, subscription, gw.bootstrap, gw.prefix)  # written in epoch 1
    assert read_backlog(spark, subscription, gw.bootstrap, gw.prefix).count() == 0
    assert pull_nothing(sub, subscription, 3) == []


def test_adopted_kafka_topic_reads_like_pubsub(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    gw = shared_gateway
    plain = f"plain-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(plain, 2, 1)])[plain].result(30)
    _, sub, _, subscription = _setup(gw, names, labels={"kafka-topic": plain})
    producer = Producer({"bootstrap.servers": gw.bootstrap})
    records: list[tuple[bytes | None, list[tuple[str, bytes | None]]]] = [
        (None, []),
        (b"key", [("a", b"1")]),
        (b"\xff", [("bin", b"\x00\xff"), ("none", None)]),
        (b"k" * 1025, [("a", b"1"), ("a", b"2")]),
        (b"", [("x", "é".encode())]),
    ]
    for i, (key, headers) in enumerate(records):
        producer.produce(plain, f"r{i}".encode(), key=key, headers=headers, partition=i % 2)
    assert producer.flush(30) == 0

    rows = {r["message_id"]: r for r in read_backlog(spark, subscription, gw.bootstrap, gw.prefix).collect()}
    pulled = pull_until(sub, subscription, len(records))

    assert len(rows) == len(pulled) == len(records)
    for m in pulled:
        row = rows[m.message.message_id]
        assert bytes(row["data"]) == m.message.data
        assert row["attributes"] == dict(m.message.attributes)
        assert row["ordering_key"] == m.message.ordering_key


def _export(gw: GatewayProcess, subscription: str, work: Path, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "spark.export_job",
        "--subscription",
        subscription,
        "--bootstrap",
        gw.bootstrap,
        "--internal-prefix",
        gw.prefix,
        "--output",
        str(work / "out"),
        "--checkpoint",
        str(work / "checkpoint"),
        "--driver-memory",
        "768m",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(work / "export.log", "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _committed_batches(work: Path) -> int:
    return len([p for p in (work / "out" / "_batches").glob("*") if not p.name.startswith(".")])


def test_export_job_survives_kill_9(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names, tmp_path: Path
) -> None:
    gw = shared_gateway
    pub, sub, topic, subscription = _setup(gw, names)
    ids = _publish(pub, topic, 600)
    job = _export(gw, subscription, tmp_path, "--trigger-seconds", "1", "--max-per-batch", "200")
    try:
        deadline = time.monotonic() + 120
        while _committed_batches(tmp_path) < 2:
            assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "export.log").read_text()[
                -3000:
            ]
            time.sleep(0.2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver and its JVM, mid-run
        job.wait(30)
    assert _committed_batches(tmp_path) < 3  # killed mid-run: a batch remains at least

    rerun = _export(gw, subscription, tmp_path, "--once")  # replays the batch cut short, then the rest
    assert rerun.wait(180) == 0, (tmp_path / "export.log").read_text()[-3000:]

    files = (
        spark.read.parquet(str(tmp_path / "out"))
        .groupBy("message_id")
        .agg(F.count("*").alias("copies"))
        .collect()
    )
    assert {r["message_id"] for r in files} == set(ids)
    assert {r["copies"] for r in files} == {1}
    assert pull_nothing(sub, subscription, 3) == []
