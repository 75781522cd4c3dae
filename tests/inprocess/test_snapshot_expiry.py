"""Snapshots expire as on Pub/Sub: 7 days after the oldest message they hold unacknowledged was
published (7 days after creation when they hold none), never later; CreateSnapshot refuses one
that would expire within the hour; once expire_time passes the snapshot is gone for every call,
and the janitor deletes its record."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from google.api_core import exceptions
from google.protobuf import field_mask_pb2, timestamp_pb2

from tests.inprocess.conftest import InProcessGateway, settings_for, wait_for

WEEK = 7 * 24 * 3600


@pytest.fixture(scope="module")
def janitored(kafka_bootstrap: str) -> Iterator[InProcessGateway]:
    """A gateway whose janitor looks every half second."""
    gateway = InProcessGateway(
        settings_for(kafka_bootstrap, f"__snapx_{uuid.uuid4().hex[:8]}", expiration_check_seconds=0.5)
    ).start()
    yield gateway
    gateway.stop()


def _setup(gw: InProcessGateway, names: Any) -> tuple[Any, Any, str, str]:
    pub, sub = gw.clients()
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    return pub, sub, topic, subscription


def _seconds(ts: Any) -> float:
    return float(ts.timestamp())


def test_a_backlog_makes_the_snapshot_expire_a_week_after_its_oldest_message(
    janitored: InProcessGateway, names: Any
) -> None:
    pub, sub, topic, subscription = _setup(janitored, names)
    empty = sub.create_snapshot(name=names("snapshots", "-empty"), subscription=subscription)
    assert abs(_seconds(empty.expire_time) - (time.time() + WEEK)) < 30
    first = time.time()
    for future in [pub.publish(topic, f"m{i}".encode()) for i in range(3)]:
        future.result(timeout=30)
    time.sleep(5)
    held = sub.create_snapshot(name=names("snapshots", "-held"), subscription=subscription)
    # the oldest unacked message was published 5 s before the snapshot: its week ends then
    assert abs(_seconds(held.expire_time) - (first + WEEK)) < 2
    assert _seconds(held.expire_time) < time.time() + WEEK - 4


def test_a_backlog_older_than_a_week_less_an_hour_is_refused(janitored: InProcessGateway, names: Any) -> None:
    _, sub, topic, subscription = _setup(janitored, names)
    kafka_topic = topic.split("/")[1] + "." + topic.split("/")[3]
    producer = confluent_kafka.Producer({"bootstrap.servers": janitored.settings.kafka_bootstrap})
    old_ms = int((time.time() - WEEK + 1800) * 1000)  # 6.5 days ago: a snapshot would have 30 min
    producer.produce(kafka_topic, b"old", timestamp=old_ms)
    assert producer.flush(30) == 0
    with pytest.raises(exceptions.FailedPrecondition, match="less than an hour"):
        sub.create_snapshot(name=names("snapshots", "-old"), subscription=subscription)
    with pytest.raises(exceptions.NotFound):
        sub.get_snapshot(snapshot=names("snapshots", "-old"))


def test_an_expired_snapshot_is_gone_and_its_record_deleted(janitored: InProcessGateway, names: Any) -> None:
    _, sub, topic, subscription = _setup(janitored, names)
    name = names("snapshots")
    sub.create_snapshot(name=name, subscription=subscription)
    store = janitored.gateway.store
    wait_for("the snapshot's record", lambda: store.get("snapshot", name) is not None)
    soon = timestamp_pb2.Timestamp()
    soon.FromDatetime(datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(seconds=3))
    updated = sub.update_snapshot(
        request={
            "snapshot": {"name": name, "expire_time": soon},
            "update_mask": field_mask_pb2.FieldMask(paths=["expire_time"]),
        }
    )
    assert _seconds(updated.expire_time) == pytest.approx(soon.seconds, abs=1)
    assert sub.get_snapshot(snapshot=name).name == name  # not yet
    time.sleep(3.5)
    with pytest.raises(exceptions.NotFound):
        sub.get_snapshot(snapshot=name)
    with pytest.raises(exceptions.NotFound):
        sub.seek(request={"subscription": subscription, "snapshot": name})
    project = "/".join(name.split("/")[:2])
    assert name not in [s.name for s in sub.list_snapshots(project=project)]
    pub, _ = janitored.clients()
    assert name not in list(pub.list_topic_snapshots(topic=topic))
    wait_for("the janitor deleting the record", lambda: store.get("snapshot", name) is None, 10)
