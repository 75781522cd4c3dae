"""Seek to a time and to a snapshot replay exactly the expected messages; snapshot CRUD."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import pytest
from google.api_core import exceptions
from google.protobuf import field_mask_pb2

from tests.e2e.clients import clients, pull_nothing, pull_until
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration


def _ack_all(sub: object, subscription: str, n: int) -> list[bytes]:
    got = pull_until(sub, subscription, n)  # type: ignore[arg-type]
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])  # type: ignore[attr-defined]
    return sorted(m.message.data for m in got)


def test_seek_to_time(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    pub, sub = clients(shared_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    start = datetime.datetime.now(tz=datetime.UTC) - datetime.timedelta(seconds=1)
    for i in range(5):
        pub.publish(topic, f"a{i}".encode()).result(timeout=30)
    assert len(_ack_all(sub, subscription, 5)) == 5
    time.sleep(0.3)
    middle = datetime.datetime.now(tz=datetime.UTC)
    time.sleep(0.3)
    for i in range(5):
        pub.publish(topic, f"b{i}".encode()).result(timeout=30)
    assert len(_ack_all(sub, subscription, 5)) == 5

    sub.seek(request={"subscription": subscription, "time": middle})
    assert _ack_all(sub, subscription, 5) == [f"b{i}".encode() for i in range(5)]
    assert pull_nothing(sub, subscription, 2.0) == []

    sub.seek(request={"subscription": subscription, "time": start})
    assert len(_ack_all(sub, subscription, 10)) == 10
    assert pull_nothing(sub, subscription, 2.0) == []


@pytest.mark.parametrize("partitions", [1, 4])
def test_seek_to_snapshot_restores_the_exact_ack_state(
    shared_gateway: GatewayProcess, names: Callable[[str], str], partitions: int
) -> None:
    """On one partition the ack of m2, above the unacked m1, is a range of the snapshot, not
    its watermark; on four the messages mostly land on partitions of their own."""
    pub, sub = clients(shared_gateway)
    topic, subscription, snapshot = names("topics"), names("subscriptions"), names("snapshots")
    pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": str(partitions)}})
    sub.create_subscription(name=subscription, topic=topic)
    for i in range(4):
        pub.publish(topic, f"m{i}".encode()).result(timeout=30)
    got = {m.message.data: m for m in pull_until(sub, subscription, 4)}
    sub.acknowledge(subscription=subscription, ack_ids=[got[b"m0"].ack_id, got[b"m2"].ack_id])
    snap = sub.create_snapshot(request={"name": snapshot, "subscription": subscription, "labels": {"k": "v"}})
    assert snap.topic == topic
    assert snap.expire_time.timestamp() > time.time() + 6 * 24 * 3600
    sub.acknowledge(subscription=subscription, ack_ids=[got[b"m1"].ack_id, got[b"m3"].ack_id])
    pub.publish(topic, b"later").result(timeout=30)
    assert _ack_all(sub, subscription, 1) == [b"later"]

    sub.seek(request={"subscription": subscription, "snapshot": snapshot})
    assert _ack_all(sub, subscription, 3) == [b"later", b"m1", b"m3"]
    assert pull_nothing(sub, subscription, 2.0) == []


def test_snapshot_administration(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    pub, sub = clients(shared_gateway)
    topic, other, subscription = names("topics"), names("topics", "-other"), names("subscriptions")
    other_sub, snapshot = names("subscriptions", "-other"), names("snapshots")
    pub.create_topic(name=topic)
    pub.create_topic(name=other)
    sub.create_subscription(name=subscription, topic=topic)
    sub.create_subscription(name=other_sub, topic=other)
    sub.create_snapshot(request={"name": snapshot, "subscription": subscription})
    with pytest.raises(exceptions.AlreadyExists):
        sub.create_snapshot(request={"name": snapshot, "subscription": subscription})
    with pytest.raises(exceptions.NotFound):
        sub.create_snapshot(
            request={"name": names("snapshots", "-x"), "subscription": names("subscriptions", "-x")}
        )
    assert sub.get_snapshot(request={"snapshot": snapshot}).topic == topic
    assert snapshot in [s.name for s in sub.list_snapshots(request={"project": "projects/test-project"})]
    assert list(pub.list_topic_snapshots(request={"topic": topic})) == [snapshot]
    updated = sub.update_snapshot(
        request={
            "snapshot": {"name": snapshot, "labels": {"a": "b"}},
            "update_mask": field_mask_pb2.FieldMask(paths=["labels"]),
        }
    )
    assert dict(updated.labels) == {"a": "b"}
    with pytest.raises(exceptions.FailedPrecondition):
        sub.seek(request={"subscription": other_sub, "snapshot": snapshot})
    with pytest.raises(exceptions.InvalidArgument):
        sub.seek(request={"subscription": subscription})
    sub.delete_snapshot(request={"snapshot": snapshot})
    with pytest.raises(exceptions.NotFound):
        sub.get_snapshot(request={"snapshot": snapshot})
    with pytest.raises(exceptions.NotFound):
        sub.seek(request={"subscription": subscription, "snapshot": snapshot})
