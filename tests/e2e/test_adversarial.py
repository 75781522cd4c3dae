"""The standing adversarial suite: every RPC of Publisher, Subscriber and SchemaService, called the way a careless
or hostile client can, over gRPC (raw bytes) and REST.

Every probe checks three things:
- the status: never one that blames the server or invites a retry (adversary.forbidden), never
  a message that echoes an unbounded request back, and exactly INVALID_ARGUMENT where the input
  can never be valid (undecodable bytes, invalid UTF-8, an empty or 1 MB name);
- liveness: the gateway still answers a plain GetTopic;
- "no state changed" after every refusal: the project's resources, the end offsets of every
  Kafka topic behind them and of the gateway's own, and the offsets its groups committed.
A probe that succeeds (random requests can be valid ones) makes the state after it, once
settled, the new baseline.

Findings are collected per test and reported together; the counts of probes are written to
`adversary-probes.json` in the run's log directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf import descriptor as pb_descriptor
from google.protobuf import message as pb_message
from hypothesis import HealthCheck, Phase, given, settings

from gateway.translate import names as gw_names
from tests.e2e import adversary
from tests.e2e.adversary import MAX_DETAILS, Method, Observer, Outcome, Refs, World, pb
from tests.e2e.clients import clients
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration
RANDOM_PER_METHOD = 20  # 35 methods: 700 random requests, ~3 minutes with the state checks
TOPIC_ID, SUBSCRIPTION_ID, SNAPSHOT_ID, SCHEMA_ID = "topic", "subscription", "snapshot", "schema"
AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})


@dataclasses.dataclass
class Arena:
    gw: GatewayProcess
    refs: Refs
    channel: grpc.Channel
    observer: Observer
    log_dir: Path
    probes: dict[str, int] = dataclasses.field(default_factory=dict)


@pytest.fixture(scope="module")
def arena(kafka_bootstrap: str, log_dir: Path) -> Iterator[Arena]:
    uid = uuid.uuid4().hex[:8]
    prefix, project = f"adv{uid}", f"adversary-{uid}"
    gw = GatewayProcess(kafka_bootstrap, prefix, log_dir, "--pull-max-wait-seconds", "0.5").start()
    try:
        arena = _arena(gw, kafka_bootstrap, log_dir, prefix, project)
    except BaseException:
        gw.kill()
        raise
    try:
        yield arena
    finally:
        report = log_dir / "adversary-probes.json"
        report.write_text(json.dumps({**arena.probes, "total": sum(arena.probes.values())}, indent=2))
        arena.observer.close()
        arena.channel.close()
        gw.terminate()


def _arena(gw: GatewayProcess, kafka_bootstrap: str, log_dir: Path, prefix: str, project: str) -> Arena:
    """A topic of 20 messages, a subscription of it, a snapshot and an Avro schema: what requests
    reach for."""
    pub, sub = clients(gw)
    topic = f"projects/{project}/topics/{TOPIC_ID}"
    subscription = f"projects/{project}/subscriptions/{SUBSCRIPTION_ID}"
    snapshot = f"projects/{project}/snapshots/{SNAPSHOT_ID}"
    pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "2"}})
    sub.create_subscription(request={"name": subscription, "topic": topic, "ack_deadline_seconds": 600})
    for i in range(20):
        pub.publish(topic, f"m{i}".encode(), k="v").result(timeout=30)
    sub.create_snapshot(request={"name": snapshot, "subscription": subscription})
    counter = iter(range(10**6))

    def fresh(kind: str) -> str:
        return f"projects/{project}/{kind}/fresh-{next(counter)}"

    project_topics = gw_names.kafka_topic_for(gw_names.TopicName(topic))[: -len(TOPIC_ID)]
    channel = grpc.insecure_channel(gw.address, options=[("grpc.max_receive_message_length", -1)])
    create_schema = channel.unary_unary(
        "/google.pubsub.v1.SchemaService/CreateSchema",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.Schema.FromString,
    )
    schema = create_schema(
        pb.CreateSchemaRequest(
            parent=f"projects/{project}",
            schema_id=SCHEMA_ID,
            schema=pb.Schema(type_=pb.Schema.Type.AVRO, definition=AVRO),
        ),
        timeout=30,
    )
    observer = Observer(channel, kafka_bootstrap, project, (prefix, project_topics), f"{prefix}.")
    refs = Refs(project, topic, subscription, snapshot, fresh, schema.name, schema.revision_id)
    return Arena(gw, refs, channel, observer, log_dir)


class Prober:
    """Runs probes against the arena and keeps what they found."""

    def __init__(self, arena: Arena, kind: str) -> None:
        self.arena = arena
        self.kind = kind
        self.count = 0
        self.found: list[str] = []
        self.before: World = arena.observer.settled()

    def __enter__(self) -> Prober:
        return self

    def __exit__(self, *exc: object) -> None:
        self.arena.probes[self.kind] = self.arena.probes.get(self.kind, 0) + self.count

    def grpc(self, method: Method, body: bytes, label: str, expect: grpc.StatusCode | None = None) -> Outcome:
        out = adversary.call(self.arena.channel, method, body)
        self.judge(
            f"{method.name} {label}",
            out.code.name,
            out.details,
            out.code == grpc.StatusCode.OK,
            forbidden=adversary.forbidden(out.code, out.details),
            expected=expect is None or out.code == expect,
            want=expect.name if expect else "",
        )
        return out

    def judge(
        self, what: str, status: str, details: str, ok: bool, forbidden: bool, expected: bool, want: str = ""
    ) -> None:
        self.count += 1
        problems = []
        if forbidden:
            problems.append(f"status {status}: {details[:200]}")
        elif not expected:
            problems.append(f"status {status}, want {want}: {details[:200]}")
        if len(details) > MAX_DETAILS:
            problems.append(f"a {len(details):,}-character error message")
        if not self._alive():
            problems.append("the gateway stopped answering")
        if ok:
            self.before = self.arena.observer.settled()
        else:
            after = self.arena.observer.world()
            changed = self.before.difference(after, self.arena.observer.only_checkpoints)
            if changed:
                problems.append("refused, yet the state changed: " + "; ".join(changed[:5]))
                self.before = self.arena.observer.settled()
        self.found.extend(f"{what}: {p}" for p in problems)

    def _alive(self) -> bool:
        get = self.arena.channel.unary_unary(
            "/google.pubsub.v1.Publisher/GetTopic",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.Topic.FromString,
        )
        try:
            get(pb.GetTopicRequest(topic=self.arena.refs.topic), timeout=10)
        except grpc.RpcError:
            return False
        return True

    def verdict(self, floor: int) -> None:
        assert not self.found, f"{len(self.found)} of {self.count} probes found:\n" + "\n".join(self.found)
        assert self.count >= floor, f"only {self.count} probes ran"


# -- a valid request per method, for the table's mutations ------------------------------------


def valid_request(method: str, refs: Refs) -> pb_message.Message:
    """A request the API accepts (for destructive methods: one naming what does not exist, so
    that no mutation of it can destroy the arena)."""
    t, s, n, schema = refs.topic, refs.subscription, refs.snapshot, refs.schema
    gone = {k: refs.fresh(k) for k in ("topics", "subscriptions", "snapshots", "schemas")}
    parent = f"projects/{refs.project}"
    avro = pb.Schema(type_=pb.Schema.Type.AVRO, definition=AVRO)
    requests: dict[str, pb_message.Message] = {
        "CreateTopic": pb.Topic(name=refs.fresh("topics"), labels={"team": "a"}),
        "UpdateTopic": pb.UpdateTopicRequest(
            topic=pb.Topic(name=t, labels={"k": "v"}), update_mask={"paths": ["labels"]}
        ),
        "Publish": pb.PublishRequest(
            topic=t, messages=[pb.PubsubMessage(data=b"x", attributes={"key": "value"}, ordering_key="")]
        ),
        "GetTopic": pb.GetTopicRequest(topic=t),
        "ListTopics": pb.ListTopicsRequest(project=f"projects/{refs.project}", page_size=5),
        "ListTopicSubscriptions": pb.ListTopicSubscriptionsRequest(topic=t),
        "ListTopicSnapshots": pb.ListTopicSnapshotsRequest(topic=t),
        "DeleteTopic": pb.DeleteTopicRequest(topic=gone["topics"]),
        "DetachSubscription": pb.DetachSubscriptionRequest(subscription=gone["subscriptions"]),
        "CreateSubscription": pb.Subscription(
            name=refs.fresh("subscriptions"), topic=t, filter='attributes.k = "v"'
        ),
        "GetSubscription": pb.GetSubscriptionRequest(subscription=s),
        "UpdateSubscription": pb.UpdateSubscriptionRequest(
            subscription=pb.Subscription(name=s, ack_deadline_seconds=600),
            update_mask={"paths": ["ack_deadline_seconds"]},
        ),
        "ListSubscriptions": pb.ListSubscriptionsRequest(project=f"projects/{refs.project}"),
        "DeleteSubscription": pb.DeleteSubscriptionRequest(subscription=gone["subscriptions"]),
        "ModifyAckDeadline": pb.ModifyAckDeadlineRequest(
            subscription=s, ack_ids=["ack-id"], ack_deadline_seconds=30
        ),
        "Acknowledge": pb.AcknowledgeRequest(subscription=s, ack_ids=["ack-id"]),
        "Pull": pb.PullRequest(subscription=s, max_messages=1, return_immediately=True),
        "StreamingPull": pb.StreamingPullRequest(
            subscription=s, stream_ack_deadline_seconds=60, client_id="adversary"
        ),
        "ModifyPushConfig": pb.ModifyPushConfigRequest(subscription=s, push_config=pb.PushConfig()),
        "GetSnapshot": pb.GetSnapshotRequest(snapshot=n),
        "ListSnapshots": pb.ListSnapshotsRequest(project=f"projects/{refs.project}"),
        "CreateSnapshot": pb.CreateSnapshotRequest(name=refs.fresh("snapshots"), subscription=s),
        "UpdateSnapshot": pb.UpdateSnapshotRequest(
            snapshot=pb.Snapshot(name=n, labels={"a": "b"}), update_mask={"paths": ["labels"]}
        ),
        "DeleteSnapshot": pb.DeleteSnapshotRequest(snapshot=gone["snapshots"]),
        "Seek": pb.SeekRequest(subscription=s, snapshot=gone["snapshots"]),
        "CreateSchema": pb.CreateSchemaRequest(
            parent=parent, schema_id=gone["schemas"].rsplit("/", 1)[1], schema=avro
        ),
        "GetSchema": pb.GetSchemaRequest(name=f"{schema}@{refs.revision}", view=2),  # FULL
        "ListSchemas": pb.ListSchemasRequest(parent=parent, view=1, page_size=5),  # BASIC
        "ListSchemaRevisions": pb.ListSchemaRevisionsRequest(name=schema, page_size=5),
        "CommitSchema": pb.CommitSchemaRequest(name=schema, schema=avro),
        "RollbackSchema": pb.RollbackSchemaRequest(name=schema, revision_id=refs.revision),
        "DeleteSchemaRevision": pb.DeleteSchemaRevisionRequest(name=f"{gone['schemas']}@0a0b0c0d"),
        "DeleteSchema": pb.DeleteSchemaRequest(name=gone["schemas"]),
        "ValidateSchema": pb.ValidateSchemaRequest(parent=parent, schema=avro),
        "ValidateMessage": pb.ValidateMessageRequest(
            parent=parent,
            name=schema,
            message=b'{"a": 1}',
            encoding=1,  # JSON
        ),
    }
    return requests[method]


NAME_FIELDS = adversary.NAME_FIELDS


def string_slots(msg: pb_message.Message, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths to every string set in `msg`: (field, ...), (field, index) in a list, (field,
    "key", k) / (field, "value", k) in a map."""
    for field, value in msg.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key in value:
                yield (*path, field.name, "key", key)
                if isinstance(value[key], str):
                    yield (*path, field.name, "value", key)
        elif field.is_repeated:
            for i, item in enumerate(value):
                if field.type == pb_descriptor.FieldDescriptor.TYPE_STRING:
                    yield (*path, field.name, i)
                elif field.type == pb_descriptor.FieldDescriptor.TYPE_MESSAGE:
                    yield from string_slots(item, (*path, field.name, i))
        elif field.type == pb_descriptor.FieldDescriptor.TYPE_STRING:
            yield (*path, field.name)
        elif field.type == pb_descriptor.FieldDescriptor.TYPE_MESSAGE:
            yield from string_slots(value, (*path, field.name))


def replaced(msg: pb_message.Message, slot: tuple[Any, ...], text: str) -> pb_message.Message:
    out = type(msg)()
    out.CopyFrom(msg)
    target: Any = out
    for i, step in enumerate(slot):
        rest = slot[i + 1 :]
        if len(rest) == 2 and rest[0] in ("key", "value"):  # a map entry
            entries = getattr(target, step)
            key = rest[1]
            if rest[0] == "key":
                value = entries[key]
                del entries[key]
                entries[text] = value
            else:
                entries[key] = text
            return out
        if not rest:
            if isinstance(step, int):
                target[step] = text
            else:
                setattr(target, step, text)
            return out
        target = target[step] if isinstance(step, int) else getattr(target, step)
    return out


def is_name(slot: tuple[Any, ...]) -> bool:
    last = slot[-1]
    return isinstance(last, str) and last in NAME_FIELDS and len(slot) <= 2


# -- the probes -------------------------------------------------------------------------------


def test_requests_that_can_never_be_valid_are_invalid_argument(arena: Arena) -> None:
    """Every method: undecodable bytes; invalid UTF-8 in every string it takes (names, ack ids,
    attribute keys and values, labels, filters, masks); an empty and a 1 MB name."""
    with Prober(arena, "never valid (gRPC)") as probe:
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        for method in adversary.methods():
            for i, body in enumerate(adversary.UNDECODABLE):
                probe.grpc(method, body, f"undecodable #{i}", invalid)
            base = valid_request(method.name, arena.refs)
            for slot in string_slots(base):
                bad = replaced(base, slot, adversary.PLACEHOLDER).SerializeToString()
                probe.grpc(method, adversary.invalid_utf8(bad), f"invalid UTF-8 in {slot}", invalid)
                if is_name(slot):
                    for label, name in (("empty", ""), ("1 MB", "projects/p/topics/" + "a" * 1_000_000)):
                        probe.grpc(
                            method,
                            replaced(base, slot, name).SerializeToString(),
                            f"{label} name in {slot}",
                            invalid,
                        )
        probe.verdict(floor=150)


def test_hostile_text_in_every_string_of_every_method(arena: Arena) -> None:
    with Prober(arena, "hostile text (gRPC)") as probe:
        for method in adversary.methods():
            base = valid_request(method.name, arena.refs)
            for slot in string_slots(base):
                for text in adversary.HOSTILE_TEXT:
                    probe.grpc(
                        method, replaced(base, slot, text).SerializeToString(), f"{text[:20]!r} in {slot}"
                    )
        probe.verdict(floor=500)


@pytest.mark.parametrize("method", adversary.methods(), ids=lambda m: m.name)
def test_random_requests(arena: Arena, method: Method) -> None:
    """Requests drawn from the method's descriptor: any field set or not, names that exist and
    names that do not, hostile and random text, extreme numbers, undefined enum values."""
    with Prober(arena, "random (gRPC)") as probe:

        @settings(
            max_examples=RANDOM_PER_METHOD,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(body=adversary.request(method, arena.refs))
        def run(body: bytes) -> None:
            probe.grpc(method, body, f"random {body[:60]!r}")

        run()
        probe.verdict(floor=RANDOM_PER_METHOD // 2)


# -- REST -------------------------------------------------------------------------------------


def _rest_probes(refs: Refs) -> list[tuple[str, str, str, dict[str, str], bytes]]:
    """(label, HTTP method, path, headers, body) of requests REST must refuse with a 4xx."""
    t = refs.topic.split("/", 1)[1]
    s = refs.subscription.split("/", 1)[1]
    j = {"Content-Type": "application/json"}
    publish = json.dumps({"messages": [{"data": "eA=="}]}).encode()
    return [
        ("malformed JSON", "POST", f"/v1/projects/{t}:publish", j, b'{"messages": [}'),
        ("invalid UTF-8 JSON", "POST", f"/v1/projects/{t}:publish", j, b'{"messages": [{"data": "\xff"}]}'),
        (
            "invalid UTF-8 attribute",
            "POST",
            f"/v1/projects/{t}:publish",
            j,
            b'{"messages": [{"data": "eA==", "attributes": {"k": "\xff\xfe"}}]}',
        ),
        ("a JSON array", "POST", f"/v1/projects/{t}:publish", j, b"[1, 2]"),
        (
            "gzip header, plain body",
            "POST",
            f"/v1/projects/{t}:publish",
            {**j, "Content-Encoding": "gzip"},
            publish,
        ),
        (
            "gzip bomb",
            "POST",
            f"/v1/projects/{t}:publish",
            {**j, "Content-Encoding": "gzip"},
            gzip.compress(b'{"messages": [{"data": "' + b"A" * 40_000_000 + b'"}]}'),
        ),
        ("unknown encoding", "POST", f"/v1/projects/{t}:publish", {**j, "Content-Encoding": "br"}, publish),
        ("string for a number", "POST", f"/v1/projects/{s}:pull", j, b'{"maxMessages": "many"}'),
        ("number out of range", "POST", f"/v1/projects/{s}:pull", j, b'{"maxMessages": 99999999999999}'),
        ("unknown field", "PUT", f"/v1/projects/{refs.project}/topics/f-unknown", j, b'{"nonsense": 1}'),
        ("invalid base64", "POST", f"/v1/projects/{t}:publish", j, b'{"messages": [{"data": "!!"}]}'),
        ("1 MB name", "GET", f"/v1/projects/{refs.project}/topics/{'a' * 1_000_000}", {}, b""),
        ("invalid UTF-8 in the path", "GET", f"/v1/projects/{refs.project}/topics/%FF%FE", {}, b""),
        ("made-up ack id", "POST", f"/v1/projects/{s}:acknowledge", j, b'{"ackIds": ["x-0-5-1"]}'),
        ("seek to year 1", "POST", f"/v1/projects/{s}:seek", j, b'{"time": "0001-01-01T00:00:00Z"}'),
        ("seek before 1970", "POST", f"/v1/projects/{s}:seek", j, b'{"time": "1969-12-31T23:59:59.999Z"}'),
        ("no body", "POST", f"/v1/projects/{t}:publish", j, b""),
        (
            "schema of an unknown type",
            "POST",
            f"/v1/projects/{refs.project}/schemas?schemaId=f-type",
            j,
            b'{"type": "XML", "definition": "<a/>"}',
        ),
        (
            "schema definition not a string",
            "POST",
            f"/v1/projects/{refs.project}/schemas:validate",
            j,
            b'{"schema": {"type": "AVRO", "definition": {"type": "int"}}}',
        ),
        (
            "invalid base64 message",
            "POST",
            f"/v1/projects/{refs.project}/schemas:validateMessage",
            j,
            b'{"name": "' + refs.schema.encode() + b'", "message": "!!", "encoding": "JSON"}',
        ),
        (
            "26 MB body",
            "POST",
            f"/v1/projects/{t}:publish",
            j,
            b'{"messages": [{"data": "' + b"A" * 26_000_000 + b'"}]}',
        ),
    ]


async def test_hostile_rest_requests(arena: Arena) -> None:
    with Prober(arena, "hostile (REST)") as probe:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
            for label, verb, path, headers, body in _rest_probes(arena.refs):
                url = f"http://{arena.gw.rest_address}{path}"
                details, status = "", 0
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.request(verb, url, data=io.BytesIO(body), headers=headers) as resp:
                        status, details = resp.status, (await resp.read()).decode("utf-8", "replace")
                ok = 200 <= status < 300
                # A URL past the HTTP parser's limit never reaches the API: like Google's front
                # end (an HTML 414), the parser answers in plain text.
                refused = 400 <= status < 500 and (_google_error(details) or label in TRANSPORT_LEVEL)
                probe.judge(
                    f"REST {label}",
                    str(status or "no answer"),
                    details,
                    ok,
                    forbidden=not (ok or refused),
                    expected=True,
                )
        probe.verdict(floor=len(_rest_probes(arena.refs)))


TRANSPORT_LEVEL = frozenset({"1 MB name"})


def _google_error(body: str) -> bool:
    """Google's JSON error shape: {"error": {"code": ..., "message": ..., "status": ...}}."""
    with contextlib.suppress(ValueError):
        error = json.loads(body).get("error", {})
        return isinstance(error, dict) and {"code", "message", "status"} <= set(error)
    return False
