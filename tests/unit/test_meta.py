"""The typed resource records and their JSON form, which older gateways wrote and read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway._pb.google.pubsub.v1 import pubsub_pb2, schema_pb2
from gateway.core.resources import Resource, subscription_or_none
from gateway.translate import meta
from gateway.translate.meta import (
    SchemaMeta,
    SchemaRevisionMeta,
    SnapshotMeta,
    SubscriptionMeta,
    TopicMeta,
)

# Records as earlier gateway versions wrote them (core/topics.py, subscriptions.py, snapshots.py,
# expiration.py and access.py before the records were typed).
OLD_TOPIC = {"kafka_topic": "p.t", "partitions": 4, "adopted": False}
OLD_SUBSCRIPTION = {
    "uid": "1a2b3c4d",
    "kafka_topic": "p.t",
    "partitions": 4,
    "log_topic": "__pubsub_gateway_gacks.p.s.1a2b3c4d",
    "group_id": "__pubsub_gateway.projects/p/subscriptions/s.1a2b3c4d",
    "created_ms": 1_700_000_000_000,
    "last_active_ms": 1_700_000_500_000,
    "epoch": 2,
    "detached": True,
    "iam_policy": "CgA=",
}
OLD_SNAPSHOT = {
    "kafka_topic": "p.t",
    "partitions": {"0": {"w": 5, "acked": [[7, 9]]}, "1": {"w": 0, "acked": []}},
}


def test_old_records_read_as_typed_values() -> None:
    topic = meta.from_json("topic", OLD_TOPIC)
    assert topic == TopicMeta("p.t", 4, adopted=False)
    sub = meta.from_json("subscription", OLD_SUBSCRIPTION)
    assert isinstance(sub, SubscriptionMeta)
    assert (sub.uid, sub.partitions, sub.epoch, sub.detached, sub.topic_deleted) == (
        "1a2b3c4d",
        4,
        2,
        True,
        False,
    )
    assert sub.active_ms == 1_700_000_500_000
    assert not sub.delivers
    snap = meta.from_json("snapshot", OLD_SNAPSHOT)
    assert isinstance(snap, SnapshotMeta)
    assert snap.acks["0"] == {"w": 5, "acked": [[7, 9]]}


def test_written_form_is_the_old_one() -> None:
    """Every key an older gateway reads is written under its old name; defaults may be left out
    (older readers take a missing key as the default)."""
    assert meta.to_json(meta.from_json("subscription", OLD_SUBSCRIPTION)) == OLD_SUBSCRIPTION
    assert meta.to_json(meta.from_json("snapshot", OLD_SNAPSHOT)) == OLD_SNAPSHOT
    assert meta.to_json(meta.from_json("topic", OLD_TOPIC)) == {"kafka_topic": "p.t", "partitions": 4}


def test_defaults_for_keys_older_records_lack() -> None:
    sub = meta.parse(
        SubscriptionMeta,
        {k: OLD_SUBSCRIPTION[k] for k in ("uid", "kafka_topic", "partitions", "log_topic", "group_id")},
    )
    assert (sub.epoch, sub.detached, sub.topic_deleted, sub.iam_policy, sub.created_ms) == (
        0,
        False,
        False,
        "",
        0,
    )
    assert sub.active_ms == 0
    assert sub.delivers


def test_unknown_keys_survive_a_rewrite() -> None:
    """A key a newer gateway wrote is kept and written back by this one."""
    raw = {**OLD_TOPIC, "future_field": {"x": [1, 2]}}
    topic = meta.from_json("topic", raw)
    assert topic.extra == {"future_field": {"x": [1, 2]}}
    assert meta.to_json(topic)["future_field"] == {"x": [1, 2]}


@pytest.mark.parametrize(
    ("kind", "raw", "error"),
    [
        ("topic", {"partitions": 1}, KeyError),
        ("subscription", {k: v for k, v in OLD_SUBSCRIPTION.items() if k != "log_topic"}, KeyError),
        ("topic", {"kafka_topic": 7, "partitions": 1}, ValueError),
        ("topic", {"kafka_topic": "t", "partitions": True}, ValueError),
        ("topic", {"kafka_topic": "t", "partitions": "many"}, ValueError),
        ("snapshot", {"kafka_topic": "t", "partitions": [1]}, ValueError),
        ("widget", {}, ValueError),  # a kind nobody knows
        ("schema", {"uid": "u"}, KeyError),
        ("schema", {"uid": "u", "revisions": "abc"}, ValueError),
        ("schema", {"uid": "u", "revisions": [1, 2]}, ValueError),
        ("schema_revision", {"schema_uid": "u"}, KeyError),
    ],
)
def test_malformed_records_are_refused(kind: str, raw: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        meta.from_json(kind, raw)


def test_numbers_written_as_strings_are_read() -> None:
    assert meta.from_json("topic", {"kafka_topic": "t", "partitions": "4"}) == TopicMeta("t", 4)


names = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), min_size=1, max_size=20)


@given(
    st.builds(
        SubscriptionMeta,
        uid=names,
        kafka_topic=names,
        partitions=st.integers(1, 64),
        log_topic=names,
        group_id=names,
        created_ms=st.integers(0, 2**53),
        last_active_ms=st.integers(0, 2**53),
        epoch=st.integers(0, 1000),
        detached=st.booleans(),
        topic_deleted=st.booleans(),
        iam_policy=st.text(max_size=10),
    )
)
def test_subscription_round_trip(sub: SubscriptionMeta) -> None:
    assert meta.from_json("subscription", json.loads(json.dumps(meta.to_json(sub)))) == sub


def test_resource_record_round_trip_keeps_kind_and_types() -> None:
    sub = Resource(
        "projects/p/subscriptions/s",
        pubsub_pb2.Subscription(topic="projects/p/topics/t"),
        meta.parse(SubscriptionMeta, OLD_SUBSCRIPTION),
        op="o1",
    )
    decoded, create = Resource.decode(sub.encode(create=True))
    assert create
    assert decoded == sub
    assert decoded.kind == "subscription"
    assert subscription_or_none(decoded) is decoded
    topic = Resource(
        "projects/p/topics/t", pubsub_pb2.Topic(name="projects/p/topics/t"), TopicMeta("p.t", 2), op="o2"
    )
    decoded_topic, _ = Resource.decode(topic.encode(create=False))
    assert isinstance(decoded_topic.proto, pubsub_pb2.Topic)
    assert subscription_or_none(decoded_topic) is None
    stored = json.loads(topic.encode(create=False))
    assert stored["kind"] == "topic"
    assert stored["meta"] == {"kafka_topic": "p.t", "partitions": 2}


def test_with_iam_policy_changes_only_the_policy() -> None:
    topic = Resource("projects/p/topics/t", pubsub_pb2.Topic(), TopicMeta("p.t", 2, adopted=True), op="o")
    changed = topic.with_iam_policy("abc")
    assert changed.meta == TopicMeta("p.t", 2, adopted=True, iam_policy="abc")
    assert (changed.name, changed.op, changed.proto) == (topic.name, topic.op, topic.proto)


@given(
    st.builds(
        SchemaMeta,
        uid=names,
        revisions=st.lists(names, max_size=20).map(tuple),
        commits=st.integers(0, 2**31),
        iam_policy=st.text(max_size=10),
    )
)
def test_schema_round_trip(schema: SchemaMeta) -> None:
    assert meta.from_json("schema", json.loads(json.dumps(meta.to_json(schema)))) == schema


def test_schema_records_round_trip_as_their_own_kinds() -> None:
    """A schema's record and a revision's carry the same proto type and tell apart by kind; the
    revision ids are a JSON list, read back as a tuple."""
    head = Resource(
        "projects/p/schemas/s",
        schema_pb2.Schema(name="projects/p/schemas/s", type=schema_pb2.Schema.AVRO),
        SchemaMeta("u1", ("0a0b0c0d", "1a2b3c4d"), commits=2),
        op="o1",
    )
    stored = json.loads(head.encode(create=True))
    assert stored["kind"] == "schema"
    assert stored["meta"] == {"uid": "u1", "revisions": ["0a0b0c0d", "1a2b3c4d"], "commits": 2}
    assert Resource.decode(head.encode(create=True)) == (head, True)
    rev = Resource(
        "projects/p/schemas/s@1a2b3c4d",
        schema_pb2.Schema(name="projects/p/schemas/s", definition="{}", revision_id="1a2b3c4d"),
        SchemaRevisionMeta("u1", 2),
        op="o2",
    )
    decoded, _ = Resource.decode(rev.encode(create=False))
    assert decoded == rev and decoded.kind == "schema_revision"
    assert rev.key() == b"schema_revision/projects/p/schemas/s@1a2b3c4d"
