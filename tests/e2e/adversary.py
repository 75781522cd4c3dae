"""What the adversarial suite (test_adversarial.py) needs: raw gRPC calls, the state a call must
not change, and requests built from the API's own message descriptors.

Raw calls, not the official clients: a hostile client sends any bytes, and the probes must see
the status the gateway answers, not one the client library made up or retried into something
else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import string
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import confluent_kafka
import grpc
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from google.protobuf import descriptor as pb_descriptor
from google.protobuf import message as pb_message
from google.protobuf import message_factory
from google.pubsub_v1 import types as pubsub_types
from hypothesis import strategies as st

from gateway.leases.logformat import is_checkpoint_key
from gateway.translate.unsupported import MARK as REFUSED_SETTING

# How long the observer asks again for the end offset of a partition that has no leader yet.
LEADER_WAIT = 10.0
_NO_LEADER_YET = {
    confluent_kafka.KafkaError.NOT_LEADER_FOR_PARTITION,
    confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE,
    confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART,
}


class _Raw:
    """The official client's message classes as plain protobuf (the gateway's generated ones
    share their names in protobuf's default pool, so a test process imports only these)."""

    def __getattr__(self, name: str) -> type[pb_message.Message]:
        cls: type[pb_message.Message] = getattr(pubsub_types, name).pb()
        return cls


pb = _Raw()


@dataclasses.dataclass(frozen=True)
class Method:
    service: str
    name: str
    input_type: pb_descriptor.Descriptor
    client_streaming: bool = False


_METHODS = {
    "Publisher": [
        "CreateTopic:Topic",
        "UpdateTopic",
        "Publish",
        "GetTopic",
        "ListTopics",
        "ListTopicSubscriptions",
        "ListTopicSnapshots",
        "DeleteTopic",
        "DetachSubscription",
    ],
    "Subscriber": [
        "CreateSubscription:Subscription",
        "GetSubscription",
        "UpdateSubscription",
        "ListSubscriptions",
        "DeleteSubscription",
        "ModifyAckDeadline",
        "Acknowledge",
        "Pull",
        "StreamingPull",
        "ModifyPushConfig",
        "GetSnapshot",
        "ListSnapshots",
        "CreateSnapshot",
        "UpdateSnapshot",
        "DeleteSnapshot",
        "Seek",
    ],
    "SchemaService": [
        "CreateSchema",
        "GetSchema",
        "ListSchemas",
        "ListSchemaRevisions",
        "CommitSchema",
        "RollbackSchema",
        "DeleteSchemaRevision",
        "DeleteSchema",
        "ValidateSchema",
        "ValidateMessage",
    ],
}
# Statuses no request may ever get: a client mistake is never the server's fault (UNKNOWN,
# INTERNAL), never worth retrying (UNAVAILABLE, DEADLINE_EXCEEDED: the official clients retry
# those for a minute), and every method of the three services is served.
FORBIDDEN = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.CANCELLED,
    }
)


def forbidden(code: grpc.StatusCode, details: str) -> bool:
    """Whether a status is one no request may get. One UNIMPLEMENTED is a served method's own
    answer: a setting the gateway cannot act on, refused naming it (docs/fields.md), which
    random Create/Update/ModifyPushConfig requests draw."""
    if code == grpc.StatusCode.UNIMPLEMENTED and REFUSED_SETTING in details:
        return False
    return code in FORBIDDEN


CALL_TIMEOUT = 30.0
STREAM_WAIT = 2.0  # a refused stream ends sooner than this
MAX_DETAILS = 4096  # a status message longer than this would echo the request back


def methods() -> list[Method]:
    """Every method of Publisher, Subscriber and SchemaService, listed by hand with its request
    type (all 35; test_adversarial checks each against what the gateway answers)."""
    out = []
    for service, entries in _METHODS.items():
        for entry in entries:
            name, _, request = entry.partition(":")
            desc = getattr(pb, request or f"{name}Request").DESCRIPTOR
            out.append(Method(service, name, desc, client_streaming=name == "StreamingPull"))
    return out


def message_class(desc: pb_descriptor.Descriptor) -> type[pb_message.Message]:
    cls: type[pb_message.Message] = message_factory.GetMessageClass(desc)
    return cls


def path(method: Method) -> str:
    return f"/google.pubsub.v1.{method.service}/{method.name}"


@dataclasses.dataclass(frozen=True)
class Outcome:
    code: grpc.StatusCode
    details: str
    seconds: float


def call(channel: grpc.Channel, method: Method, body: bytes) -> Outcome:
    """One request of raw bytes (for StreamingPull: the first of a stream)."""
    started = time.monotonic()
    if method.client_streaming:
        return _stream(channel, method, body, started)
    identity: Callable[[bytes], bytes] = lambda b: b  # noqa: E731 - a serializer of raw bytes
    unary = channel.unary_unary(path(method), request_serializer=identity, response_deserializer=identity)
    try:
        unary(body, timeout=CALL_TIMEOUT)
    except grpc.RpcError as exc:
        return Outcome(exc.code(), exc.details() or "", time.monotonic() - started)
    return Outcome(grpc.StatusCode.OK, "", time.monotonic() - started)


def _stream(channel: grpc.Channel, method: Method, body: bytes, started: float) -> Outcome:
    """A stream whose first request is `body`, held open as the official clients do (a client
    that closes its side ends the stream): its status if it ends within STREAM_WAIT, else OK."""
    identity: Callable[[bytes], bytes] = lambda b: b  # noqa: E731 - a serializer of raw bytes
    done = threading.Event()

    def requests() -> Iterator[bytes]:
        yield body
        done.wait(CALL_TIMEOUT)

    stream = channel.stream_stream(path(method), request_serializer=identity, response_deserializer=identity)
    responses = stream(requests(), timeout=CALL_TIMEOUT)

    def read_first() -> None:
        with contextlib.suppress(grpc.RpcError):  # its status is read below
            next(responses, None)

    first = threading.Thread(target=read_first, daemon=True)
    first.start()
    first.join(STREAM_WAIT)
    running = responses.running()
    responses.cancel()
    done.set()
    first.join(CALL_TIMEOUT)
    if running:  # answered, or still waiting for messages: alive and accepted
        return Outcome(grpc.StatusCode.OK, "", time.monotonic() - started)
    return Outcome(responses.code(), responses.details() or "", time.monotonic() - started)


# -- the state a refused request must leave as it was --------------------------------------------


@dataclasses.dataclass(frozen=True)
class World:
    """Resources of the probe's project, end offsets of the Kafka topics behind them and the
    gateway's own, and the offsets committed by the gateway's groups."""

    resources: Mapping[str, bytes]
    ends: Mapping[tuple[str, int], int]
    committed: Mapping[tuple[str, int], int]

    def difference(
        self, other: World, background: Callable[[str, int, int, int], bool] | None = None
    ) -> list[str]:
        """What changed. `background(topic, partition, start, end)` may say that the records an end
        offset moved over are the gateway's own bookkeeping, which goes on whatever a client does."""
        quiet: set[object] = set()
        if background is not None:
            for (topic, partition), end in self.ends.items():
                now = other.ends.get((topic, partition))
                if now is not None and now != end and background(topic, partition, end, now):
                    quiet.add((topic, partition))
        out = []
        for label, mine, theirs in (
            ("resource", self.resources, other.resources),
            ("end offset", self.ends, other.ends),
            ("committed offset", self.committed, other.committed),
        ):
            for key in sorted(set(mine) | set(theirs), key=str):
                if mine is self.ends and key in quiet:
                    continue
                if mine.get(key) != theirs.get(key):  # type: ignore[call-overload]
                    out.append(f"{label} {key}: {mine.get(key)!r:.60} -> {theirs.get(key)!r:.60}")  # type: ignore[call-overload]
        return out


class Observer:
    """Reads the World over the gateway's list calls and plain Kafka clients (metadata requests
    only for topics that exist: no client here creates one)."""

    def __init__(
        self,
        channel: grpc.Channel,
        bootstrap: str,
        project: str,
        kafka_prefixes: tuple[str, ...],
        group_prefix: str,
    ) -> None:
        self._channel = channel
        self._bootstrap = bootstrap
        self._project = project
        self._kafka_prefixes = kafka_prefixes
        self._group_prefix = group_prefix
        base = {"bootstrap.servers": bootstrap, "allow.auto.create.topics": False}
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._consumer = confluent_kafka.Consumer(
            {**base, "group.id": "adversary-observer", "enable.auto.commit": False}
        )

    def close(self) -> None:
        self._consumer.close()

    def _list(
        self, method: str, request: pb_message.Message, reply: type[pb_message.Message], field: str
    ) -> Iterator[tuple[str, bytes]]:
        unary = self._channel.unary_unary(
            method, request_serializer=lambda m: m.SerializeToString(), response_deserializer=reply.FromString
        )
        while True:
            page = unary(request, timeout=CALL_TIMEOUT)
            for item in getattr(page, field):
                yield item.name, item.SerializeToString(deterministic=True)
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token  # type: ignore[attr-defined]

    def _end_offset(self, topic: str, p: int) -> int:
        """A partition's end offset, asked again while it has no leader yet: a topic the
        gateway has just made, or a broker busy with two test workers' load."""
        deadline = time.monotonic() + LEADER_WAIT
        while True:
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=CALL_TIMEOUT, cached=False
                )
                return int(high)
            except confluent_kafka.KafkaException as exc:
                if exc.args[0].code() not in _NO_LEADER_YET or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def world(self) -> World:
        project = f"projects/{self._project}"
        resources = dict(
            self._list(
                "/google.pubsub.v1.Publisher/ListTopics",
                pb.ListTopicsRequest(project=project),
                pb.ListTopicsResponse,
                "topics",
            )
        )
        resources.update(
            self._list(
                "/google.pubsub.v1.Subscriber/ListSubscriptions",
                pb.ListSubscriptionsRequest(project=project),
                pb.ListSubscriptionsResponse,
                "subscriptions",
            )
        )
        resources.update(
            self._list(
                "/google.pubsub.v1.Subscriber/ListSnapshots",
                pb.ListSnapshotsRequest(project=project),
                pb.ListSnapshotsResponse,
                "snapshots",
            )
        )
        schemas = dict(
            self._list(
                "/google.pubsub.v1.SchemaService/ListSchemas",
                pb.ListSchemasRequest(parent=project, view=pubsub_types.SchemaView.FULL),
                pb.ListSchemasResponse,
                "schemas",
            )
        )
        resources.update(schemas)
        for schema in schemas:  # every revision, not only the latest
            revisions = self._list(
                "/google.pubsub.v1.SchemaService/ListSchemaRevisions",
                pb.ListSchemaRevisionsRequest(name=schema, view=pubsub_types.SchemaView.FULL),
                pb.ListSchemaRevisionsResponse,
                "schemas",
            )
            resources.update((f"{schema} revision {i}", body) for i, (_, body) in enumerate(revisions))
        metadata = self._consumer.list_topics(timeout=CALL_TIMEOUT)
        ends: dict[tuple[str, int], int] = {}
        for topic, meta in metadata.topics.items():
            if topic.startswith(self._kafka_prefixes):
                for p in meta.partitions:
                    ends[(topic, p)] = self._end_offset(topic, p)
        committed: dict[tuple[str, int], int] = {}
        groups = self._admin.list_consumer_groups().result(timeout=CALL_TIMEOUT)
        for listing in groups.valid:
            if not listing.group_id.startswith(self._group_prefix) or listing.group_id.endswith(".applied"):
                continue  # the latter: how far owners applied the log, which `ends` already covers
            request = confluent_kafka.ConsumerGroupTopicPartitions(listing.group_id)
            result = self._admin.list_consumer_group_offsets([request])[listing.group_id]
            for tp in result.result(timeout=CALL_TIMEOUT).topic_partitions or []:
                committed[(f"{listing.group_id}:{tp.topic}", tp.partition)] = tp.offset
        return World(resources, ends, committed)

    def only_checkpoints(self, topic: str, partition: int, start: int, end: int) -> bool:
        """Whether records [start, end) of a lease/ack log are all checkpoints or tombstones: what a
        runner writes on its own, on a timer, as leases expire (never a command a request wrote)."""
        if end <= start:
            return end == start
        reader = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self._bootstrap,
                "group.id": "adversary-reader",
                "enable.auto.commit": False,
            }
        )
        try:
            reader.assign([TopicPartition(topic, partition, start)])
            seen = start
            deadline = time.monotonic() + CALL_TIMEOUT
            while seen < end and time.monotonic() < deadline:
                msg = reader.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                key, offset = msg.key() or b"", msg.offset() or 0
                if offset >= end:
                    break
                if msg.value() is not None and not is_checkpoint_key(key):
                    return False
                seen = offset + 1
            return seen >= end
        finally:
            reader.close()

    def settled(self, seconds: float = 6.0, calm: float = 1.5) -> World:
        """The World once nothing has changed for `calm` seconds (a call that succeeded may go
        on writing for a while: leases, then a checkpoint and a commit a second later)."""
        deadline = time.monotonic() + seconds
        last, since = self.world(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.3)
            now = self.world()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= calm:
                break
        return last


# -- requests made from the descriptors -------------------------------------------------------

INT_RANGES = {
    pb_descriptor.FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    pb_descriptor.FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    pb_descriptor.FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    pb_descriptor.FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    pb_descriptor.FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    pb_descriptor.FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
}
# Strings a careless or hostile client sends in any field.
HOSTILE_TEXT = (
    "",
    " ",
    "x",
    "projects/",
    "projects//topics/",
    "projects/p/topics/../../x",
    "projects/p/topics/goog-reserved",
    "projects/p/topics/__consumer_offsets",
    "projects/p/subscriptions/a\x00b",
    "%2e%2e",
    "\u202e\u0000\ufffd",
    "💥" * 40,
    "a" * 300,
    "projects/" + "p" * 1000 + "/topics/t",
)


def text() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=40))


@dataclasses.dataclass(frozen=True)
class Refs:
    """Names that exist, for requests to reach beyond name checks; `fresh` makes names that do
    not yet (creates may succeed: the suite then takes the new state as its baseline)."""

    project: str
    topic: str
    subscription: str
    snapshot: str
    fresh: Callable[[str], str]
    schema: str = ""
    revision: str = ""  # of `schema`

    def names(self, field: str, method: str) -> st.SearchStrategy[str]:
        destructive = method.startswith(("Delete", "Detach"))
        absent = st.builds(self.fresh, st.sampled_from(["topics", "subscriptions", "snapshots", "schemas"]))
        existing = {
            "topic": self.topic,
            "dead_letter_topic": self.topic,
            "subscription": self.subscription,
            "snapshot": self.snapshot,
            "project": f"projects/{self.project}",
            "parent": f"projects/{self.project}",
            "revision_id": self.revision,
        }
        if method.endswith(("Schema", "Schemas", "SchemaRevisions", "Message")) and field == "name":
            existing["name"] = self.schema
        if field == "name" and method in ("CreateTopic", "CreateSubscription", "CreateSnapshot"):
            kind = {
                "CreateTopic": "topics",
                "CreateSubscription": "subscriptions",
                "CreateSnapshot": "snapshots",
            }[method]
            return st.one_of(st.just(self.fresh(kind)), text())
        if field in existing and not destructive:
            return st.one_of(st.just(existing[field]), absent, text())
        if field in existing or field == "name":
            return st.one_of(absent, text())
        return text()


def request(method: Method, refs: Refs) -> st.SearchStrategy[bytes]:
    return _message(method.input_type, refs, method.name, depth=0).map(lambda m: m.SerializeToString())


NAME_FIELDS = frozenset(
    {"name", "topic", "subscription", "snapshot", "project", "dead_letter_topic", "parent"}
)


def _field(
    field: pb_descriptor.FieldDescriptor, refs: Refs, method: str, depth: int
) -> st.SearchStrategy[Any]:
    t = pb_descriptor.FieldDescriptor
    if field.type == t.TYPE_MESSAGE:
        return _message(field.message_type, refs, method, depth + 1)
    if field.type == t.TYPE_STRING:
        named = field.name in NAME_FIELDS or field.name == "revision_id"
        return refs.names(field.name, method) if named else text()
    if field.type == t.TYPE_BYTES:
        return st.binary(max_size=64)
    if field.type == t.TYPE_BOOL:
        return st.booleans()
    if field.type == t.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.sampled_from([*numbers, max(numbers) + 7])
    if field.type in (t.TYPE_DOUBLE, t.TYPE_FLOAT):
        return st.floats(allow_nan=True)
    low, high = INT_RANGES.get(field.type, (-(2**31), 2**31 - 1))
    return st.one_of(st.sampled_from([low, -1, 0, 1, high]), st.integers(low, high))


def _message(
    desc: pb_descriptor.Descriptor, refs: Refs, method: str, depth: int
) -> st.SearchStrategy[pb_message.Message]:
    @st.composite
    def build(draw: st.DrawFn) -> pb_message.Message:
        msg = message_class(desc)()
        for field in desc.fields:
            if depth > 2 or not draw(st.booleans()):
                continue
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                if value_field.type != pb_descriptor.FieldDescriptor.TYPE_STRING:
                    continue
                entries = draw(st.dictionaries(text(), text(), max_size=4))
                getattr(msg, field.name).update(entries)
                continue
            if field.is_repeated:
                values = draw(st.lists(_field(field, refs, method, depth), max_size=4))
                target = getattr(msg, field.name)
                if field.type == pb_descriptor.FieldDescriptor.TYPE_MESSAGE:
                    for v in values:
                        target.add().CopyFrom(v)
                else:
                    target.extend(values)
                continue
            value = draw(_field(field, refs, method, depth))
            if field.type == pb_descriptor.FieldDescriptor.TYPE_MESSAGE:
                getattr(msg, field.name).CopyFrom(value)
            else:
                setattr(msg, field.name, value)
        return msg

    return build()


# -- table-driven mutations of one valid request ----------------------------------------------

PLACEHOLDER = "\x01" * 12  # swapped for invalid UTF-8 of the same length after serializing
INVALID_UTF8 = b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x28\x8c"
assert len(INVALID_UTF8) == len(PLACEHOLDER.encode())
UNDECODABLE = (
    b"\xff\xff\xff\xff",  # a field number 0 / wire type 7: not protobuf
    b"\x0a\xff\xff\xff\xff\x0f",  # a string whose length runs far past the end
    b"\x0a\x05ab",  # truncated
)
LETTERS = string.ascii_lowercase


def invalid_utf8(body: bytes) -> bytes:
    return body.replace(PLACEHOLDER.encode(), INVALID_UTF8)
