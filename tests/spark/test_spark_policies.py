"""Spark reads deliver what the gateway delivers: filters, retention, dead letters.

A gateway subprocess and the official client on one side, `read_backlog` / `read_stream` on the
other, the same subscription.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import grpc
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from gateway._pb.tech.pubsub import pubsub_pb2 as lpb
from gateway._pb.tech.pubsub import pubsub_pb2_grpc as lgrpc
from spark import UnsupportedSubscription, read_backlog, read_stream
from spark.options import connection
from spark.subscription import load
from tests.e2e.clients import clients, pull_nothing, pull_until
from tests.gateways import GatewayProcess
from tests.spark.conftest import SPARK_WARNINGS

pytestmark = [pytest.mark.integration, *SPARK_WARNINGS]
Names = Callable[..., str]
FILTER = 'attributes.kind = "keep" OR (hasPrefix(attributes."ü x", "é") AND NOT attributes:skip)'


def _attributes(i: int) -> dict[str, str]:
    return [
        {"kind": "keep"},
        {"kind": "drop"},
        {"ü x": "éa"},
        {"ü x": "éa", "skip": ""},
        {"ü x": "a"},
        {},
    ][i % 6]


def _stream_ids(spark: SparkSession, gw: GatewayProcess, subscription: str) -> set[str]:
    name = f"q{uuid.uuid4().hex[:8]}"
    query = (
        read_stream(spark, subscription, gw.bootstrap, gw.prefix)
        .select("message_id")
        .writeStream.format("memory")
        .queryName(name)
        .start()
    )
    try:
        query.processAllAvailable()
        return {r["message_id"] for r in spark.table(name).collect()}
    finally:
        query.stop()


def test_a_filtered_subscription_reads_as_its_subscribers_receive(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    gw = shared_gateway
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(request={"name": subscription, "topic": topic, "filter": FILTER})
    futures = {pub.publish(topic, f"m{i}".encode(), **_attributes(i)): i for i in range(60)}
    ids = {f.result(timeout=30): i for f, i in futures.items()}
    wanted = {mid for mid, i in ids.items() if i % 6 in (0, 2)}

    backlog = {r["message_id"] for r in read_backlog(spark, subscription, gw.bootstrap, gw.prefix).collect()}
    streamed = _stream_ids(spark, gw, subscription)
    pulled = pull_until(sub, subscription, len(wanted))

    assert backlog == streamed == {m.message.message_id for m in pulled} == wanted
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in pulled])
    assert pull_nothing(sub, subscription, 2) == []


def test_messages_past_the_retention_are_not_read(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    """Records older than the subscription's message_retention_duration (here the minimum, 10
    minutes), written with old CreateTime timestamps, are skipped by the gateway and by Spark."""
    gw = shared_gateway
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(
        request={"name": subscription, "topic": topic, "message_retention_duration": {"seconds": 600}}
    )
    meta = load(subscription, connection(gw.bootstrap), gw.prefix).meta
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": gw.bootstrap})
    ages = [0, 20 * 60_000, 5 * 60_000, 11 * 60_000, 60_000]  # ms before now
    for i, age in enumerate(ages):
        producer.produce(meta.kafka_topic, f"r{i}".encode(), timestamp=now - age, partition=0)
    assert producer.flush(30) == 0

    rows = read_backlog(spark, subscription, gw.bootstrap, gw.prefix).collect()
    streamed = _stream_ids(spark, gw, subscription)
    pulled = pull_until(sub, subscription, 3)

    fresh = {f"r{i}".encode() for i, age in enumerate(ages) if age < 600_000}
    assert {bytes(r["data"]) for r in rows} == {m.message.data for m in pulled} == fresh
    assert streamed == {r["message_id"] for r in rows}


def test_dead_lettered_messages_are_not_read(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    """A message nacked max_delivery_attempts times goes to the dead-letter topic with its ack
    in the same transaction: Spark's reads (read_committed) see it acknowledged."""
    gw = shared_gateway
    pub, sub = clients(gw)
    topic, dead = names("topics"), names("topics", "-dead")
    subscription, dead_sub = names("subscriptions"), names("subscriptions", "-dead")
    pub.create_topic(name=topic)
    pub.create_topic(name=dead)
    sub.create_subscription(name=dead_sub, topic=dead)
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "dead_letter_policy": {"dead_letter_topic": dead, "max_delivery_attempts": 5},
        }
    )
    doomed = pub.publish(topic, b"doomed").result(timeout=30)
    kept = pub.publish(topic, b"kept").result(timeout=30)
    for _ in range(5):
        got = [m for m in pull_until(sub, subscription, 1, max_messages=10) if m.message.message_id == doomed]
        if got:
            sub.modify_ack_deadline(
                subscription=subscription, ack_ids=[got[0].ack_id], ack_deadline_seconds=0
            )
    dead_letters = pull_until(sub, dead_sub, 1)
    assert [m.message.data for m in dead_letters] == [b"doomed"]

    backlog = {r["message_id"] for r in read_backlog(spark, subscription, gw.bootstrap, gw.prefix).collect()}
    assert backlog == {kept}
    assert _stream_ids(spark, gw, subscription) == {kept}


def test_a_subscription_with_a_truncation_policy_is_refused_with_its_reason(
    spark: SparkSession, shared_gateway: GatewayProcess
) -> None:
    """The seed API's TruncationPolicy is applied by the partitions' owners as they hold the
    messages; Spark cannot follow it, so it refuses to read such a subscription."""
    gw = shared_gateway
    tag = uuid.uuid4().hex[:8]
    with grpc.insecure_channel(gw.address) as channel:
        lgrpc.PublisherServiceStub(channel).CreateTopic(lpb.Topic(name=f"t-{tag}"))
        policy = lpb.Subscription.TruncationPolicy(max_age_seconds=60)
        lgrpc.SubscriberServiceStub(channel).CreateSubscription(
            lpb.Subscription(name=f"s-{tag}", topic=f"t-{tag}", truncation_policy=policy)
        )
    name = f"projects/legacy/subscriptions/s-{tag}"
    with pytest.raises(UnsupportedSubscription, match="truncation policy \\(max_age_seconds 60\\)"):
        read_backlog(spark, name, gw.bootstrap, gw.prefix)
    with pytest.raises(UnsupportedSubscription, match="truncation policy"):
        read_stream(spark, name, gw.bootstrap, gw.prefix)
