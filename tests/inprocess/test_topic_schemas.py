"""Topics with a schema, through the official client: schema_settings checked on CreateTopic and
UpdateTopic, every published message validated against the allowed revisions, the schema
attributes on what is delivered, and a deleted schema or revision."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.pubsub_v1.services.publisher import PublisherClient as PublisherGapic
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.types import Encoding, Schema

from tests.inprocess.conftest import InProcessGateway

# Two revisions that accept different messages: {"a": 1, "b": 2} only the first, {"a": 1, "c": "x"}
# only the second. Each field the other lacks has a default, so that the second may follow the
# first (CommitSchema checks compatibility: docs/schemas.md).
V1 = json.dumps(
    {
        "type": "record",
        "name": "Rec",
        "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}],
    }
)
V2 = json.dumps(
    {
        "type": "record",
        "name": "Rec",
        "fields": [{"name": "a", "type": "int"}, {"name": "c", "type": "string", "default": ""}],
    }
)
OLD, NEW = b'{"a": 1, "b": 2}', b'{"a": 1, "c": "x"}'
PROTO = 'syntax = "proto3";\nmessage M { int32 a = 1; }\n'


@pytest.fixture
def project() -> str:
    return f"projects/topic-schemas-{uuid.uuid4().hex[:10]}"


def _schema(
    gw: InProcessGateway, project: str, *definitions: str, kind: Any = Schema.Type.AVRO
) -> list[Schema]:
    """A schema with one revision per definition, oldest first."""
    client = gw.schema_client()
    name = f"{project}/schemas/s-{uuid.uuid4().hex[:6]}"
    made = [
        client.create_schema(
            parent=project,
            schema=Schema(type_=kind, definition=definitions[0]),
            schema_id=name.rsplit("/", 1)[1],
        )
    ]
    for text in definitions[1:]:
        made.append(client.commit_schema(name=name, schema=Schema(type_=kind, definition=text)))
    return made


def _topic(gw: InProcessGateway, project: str, **settings: Any) -> str:
    publisher, subscriber = gw.clients()
    topic = f"{project}/topics/t-{uuid.uuid4().hex[:6]}"
    publisher.create_topic(request={"name": topic, **({"schema_settings": settings} if settings else {})})
    subscriber.create_subscription(name=topic.replace("/topics/", "/subscriptions/"), topic=topic)
    return topic


def _publish(gw: InProcessGateway, topic: str, *payloads: bytes) -> list[str]:
    """One Publish request of all `payloads` (the batching client could split them)."""
    publisher = PublisherGapic(transport=PublisherGrpcTransport(channel=grpc.insecure_channel(gw.address)))
    response = publisher.publish(topic=topic, messages=[{"data": p} for p in payloads])
    return list(response.message_ids)


def _delivered(gw: InProcessGateway, topic: str, count: int) -> list[Any]:
    _, subscriber = gw.clients()
    sub = topic.replace("/topics/", "/subscriptions/")
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        response = subscriber.pull(subscription=sub, max_messages=10, timeout=10)
        got.extend(m.message for m in response.received_messages)
        if response.received_messages:
            subscriber.acknowledge(subscription=sub, ack_ids=[m.ack_id for m in response.received_messages])
    return got


def test_published_messages_are_validated_and_carry_the_schema_attributes(
    gw: InProcessGateway, project: str
) -> None:
    v1, v2 = _schema(gw, project, V1, V2)
    topic = _topic(gw, project, schema=v1.name, encoding=Encoding.JSON)
    assert len(_publish(gw, topic, OLD, NEW)) == 2  # any revision will do
    with pytest.raises(exceptions.InvalidArgument, match="failed schema validation"):
        _publish(gw, topic, NEW, b'{"a": "not a number"}')  # one bad message refuses the request
    got = {m.data: dict(m.attributes) for m in _delivered(gw, topic, 2)}
    assert set(got) == {OLD, NEW}
    _, subscriber = gw.clients()
    sub = topic.replace("/topics/", "/subscriptions/")
    assert (
        subscriber.pull(subscription=sub, max_messages=10, timeout=10).received_messages == []
    )  # none refused
    for data, revision in ((OLD, v1), (NEW, v2)):
        assert got[data] == {
            "googclient_schemaname": v1.name,
            "googclient_schemaencoding": "JSON",
            "googclient_schemarevisionid": revision.revision_id,
        }


def test_a_request_validated_partly_on_the_loop_partly_in_a_thread(
    gw: InProcessGateway, project: str
) -> None:
    """Small messages are validated on the event loop, the rest of the request from the first
    one past 4 KiB in a worker thread (core/topic_schemas.py): every message is still stamped
    with the revision it matches, and a bad one is named by its place in the whole request."""
    v1, v2 = _schema(gw, project, V1, V2)
    topic = _topic(gw, project, schema=v1.name, encoding=Encoding.JSON)
    big = json.dumps({"a": 2, "c": "y" * 5000}).encode()
    assert len(_publish(gw, topic, OLD, big, NEW, OLD)) == 4
    got = {m.data: m.attributes["googclient_schemarevisionid"] for m in _delivered(gw, topic, 4)}
    assert got == {OLD: v1.revision_id, big: v2.revision_id, NEW: v2.revision_id}
    with pytest.raises(exceptions.InvalidArgument, match=r"\(message 3, JSON of "):
        _publish(gw, topic, OLD, big, NEW, b'{"a": "x"}')


def test_the_revision_range_bounds_what_validates(gw: InProcessGateway, project: str) -> None:
    v1, v2 = _schema(gw, project, V1, V2)
    only_new = _topic(gw, project, schema=v1.name, encoding=Encoding.JSON, first_revision_id=v2.revision_id)
    only_old = _topic(gw, project, schema=v1.name, encoding=Encoding.JSON, last_revision_id=v1.revision_id)
    _publish(gw, only_new, NEW)
    _publish(gw, only_old, OLD)
    with pytest.raises(exceptions.InvalidArgument):
        _publish(gw, only_new, OLD)
    with pytest.raises(exceptions.InvalidArgument):
        _publish(gw, only_old, NEW)
    # A bound whose revision is deleted still bounds: the revision after the first one takes its
    # place, and none is left before the last one.
    client = gw.schema_client()
    v3 = client.commit_schema(name=v1.name, schema=Schema(type_=Schema.Type.AVRO, definition=V1))
    client.delete_schema_revision(name=f"{v1.name}@{v2.revision_id}")
    _publish(gw, only_new, OLD)  # v3 accepts it
    matched = {m.data: m.attributes["googclient_schemarevisionid"] for m in _delivered(gw, only_new, 2)}
    assert matched == {NEW: "_deleted-schema-revision_", OLD: v3.revision_id}  # v2 is gone
    client.delete_schema_revision(name=f"{v1.name}@{v1.revision_id}")
    with pytest.raises(exceptions.FailedPrecondition, match="No revision"):
        _publish(gw, only_old, OLD)


def test_schema_settings_that_cannot_apply_are_refused(gw: InProcessGateway, project: str) -> None:
    v1, v2 = _schema(gw, project, V1, V2)
    publisher, _ = gw.clients()

    def create(**settings: Any) -> None:
        publisher.create_topic(
            request={"name": f"{project}/topics/r-{uuid.uuid4().hex[:6]}", "schema_settings": settings}
        )

    for settings, error in (
        ({"schema": f"{project}/schemas/missing", "encoding": Encoding.JSON}, exceptions.NotFound),
        ({"schema": "not-a-schema", "encoding": Encoding.JSON}, exceptions.InvalidArgument),
        ({"schema": v1.name}, exceptions.InvalidArgument),  # no encoding
        (
            {"schema": v1.name, "encoding": Encoding.JSON, "first_revision_id": "00000000"},
            exceptions.NotFound,
        ),
        (
            {
                "schema": v1.name,
                "encoding": Encoding.JSON,
                "first_revision_id": v2.revision_id,
                "last_revision_id": v1.revision_id,
            },
            exceptions.InvalidArgument,
        ),
    ):
        with pytest.raises(error):
            create(**settings)
    assert list(publisher.list_topics(project=project)) == []


def test_a_schema_added_by_update_and_a_deleted_schema(gw: InProcessGateway, project: str) -> None:
    (made,) = _schema(gw, project, PROTO, kind=Schema.Type.PROTOCOL_BUFFER)
    topic = _topic(gw, project)
    _publish(gw, topic, b"anything")
    publisher, _ = gw.clients()
    publisher.update_topic(
        request={
            "topic": {"name": topic, "schema_settings": {"schema": made.name, "encoding": Encoding.BINARY}},
            "update_mask": {"paths": ["schema_settings"]},
        }
    )
    _publish(gw, topic, b"\x08\x01")
    with pytest.raises(exceptions.InvalidArgument):
        _publish(gw, topic, b"\xff\xff")
    gw.schema_client().delete_schema(name=made.name)
    assert publisher.get_topic(topic=topic).schema_settings.schema == "_deleted-schema_"
    with pytest.raises(exceptions.FailedPrecondition, match="deleted"):
        _publish(gw, topic, b"\x08\x01")
    encodings = {m.data: m.attributes.get("googclient_schemaencoding") for m in _delivered(gw, topic, 2)}
    assert encodings == {b"anything": None, b"\x08\x01": "BINARY"}


def test_delivered_messages_show_a_deleted_revision_and_schema(gw: InProcessGateway, project: str) -> None:
    v1, v2 = _schema(gw, project, V1, V2)
    topic = _topic(gw, project, schema=v1.name, encoding=Encoding.JSON)
    _publish(gw, topic, OLD, NEW)
    client = gw.schema_client()
    client.delete_schema_revision(name=f"{v1.name}@{v1.revision_id}")
    shown = {m.data: dict(m.attributes) for m in _delivered(gw, topic, 2)}
    assert shown[OLD]["googclient_schemarevisionid"] == "_deleted-schema-revision_"
    assert shown[NEW]["googclient_schemarevisionid"] == v2.revision_id
    assert shown[NEW]["googclient_schemaname"] == v1.name

    _publish(gw, topic, NEW)
    client.delete_schema(name=v1.name)
    (last,) = _delivered(gw, topic, 1)
    assert dict(last.attributes) == {
        "googclient_schemaname": "_deleted-schema_",
        "googclient_schemaencoding": "JSON",
        "googclient_schemarevisionid": "_deleted-schema-revision_",
    }


def test_revision_bounds_changed_by_their_own_paths_as_googles_samples_do(
    gw: InProcessGateway, project: str
) -> None:
    """Google's update-topic-schema samples (every language) name the bounds' own paths,
    `schema_settings.first_revision_id` and `.last_revision_id`: those change, the schema and
    encoding stay. They were refused as unknown fields."""
    v1, v2 = _schema(gw, project, V1, V2)
    topic = _topic(gw, project, schema=v1.name, encoding=Encoding.JSON)
    _publish(gw, topic, OLD)
    _publish(gw, topic, NEW)
    publisher, _ = gw.clients()
    paths = ["schema_settings.first_revision_id", "schema_settings.last_revision_id"]
    bounds = {"first_revision_id": v2.revision_id, "last_revision_id": v2.revision_id}
    updated = publisher.update_topic(
        request={"topic": {"name": topic, "schema_settings": bounds}, "update_mask": {"paths": paths}}
    )
    settings = updated.schema_settings
    assert (settings.schema, settings.encoding) == (v1.name, Encoding.JSON)
    assert (settings.first_revision_id, settings.last_revision_id) == (v2.revision_id, v2.revision_id)
    assert publisher.get_topic(topic=topic).schema_settings == settings
    _publish(gw, topic, NEW)
    with pytest.raises(exceptions.InvalidArgument):
        _publish(gw, topic, OLD)
    # A path whose value in the request is empty clears it: OLD is accepted again.
    publisher.update_topic(
        request={"topic": {"name": topic}, "update_mask": {"paths": ["schema_settings.first_revision_id"]}}
    )
    assert publisher.get_topic(topic=topic).schema_settings.first_revision_id == ""
    _publish(gw, topic, OLD)
    # Only v1, then no upper bound again: NEW refused, then accepted.
    publisher.update_topic(
        request={
            "topic": {"name": topic, "schema_settings": {"last_revision_id": v1.revision_id}},
            "update_mask": {"paths": ["schema_settings.last_revision_id"]},
        }
    )
    with pytest.raises(exceptions.InvalidArgument):
        _publish(gw, topic, NEW)
    publisher.update_topic(
        request={"topic": {"name": topic}, "update_mask": {"paths": ["schema_settings.last_revision_id"]}}
    )
    _publish(gw, topic, NEW)
    # A bound naming no revision is refused, and nothing changes.
    with pytest.raises(exceptions.NotFound):
        publisher.update_topic(
            request={
                "topic": {"name": topic, "schema_settings": {"first_revision_id": "00000000"}},
                "update_mask": {"paths": ["schema_settings.first_revision_id"]},
            }
        )
    assert publisher.get_topic(topic=topic).schema_settings.first_revision_id == ""
