"""SchemaService through the official Python client and over REST: every RPC, both schema
types, refusals with their status codes (changing nothing), the per-project quota and the
revision limit, IAM policies of schemas, and a second gateway process serving what the first
made."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.iam.v1 import policy_pb2
from google.pubsub_v1.types import Encoding, Schema, SchemaView

from gateway.schemas import MAX_REVISIONS_PER_SCHEMA
from tests.inprocess.conftest import InProcessGateway, settings_for

AVRO = json.dumps({"type": "record", "name": "Rec", "fields": [{"name": "a", "type": "int"}]})
AVRO_2 = json.dumps(
    {
        "type": "record",
        "name": "Rec",
        "fields": [
            {"name": "a", "type": "int"},
            {"name": "b", "type": ["null", "string"], "default": None},
        ],
    }
)
PROTO = 'syntax = "proto3";\nmessage M { int32 a = 1; }\n'
PROTO_2 = 'syntax = "proto3";\nmessage M { int32 a = 1; optional string b = 2; }\n'


@pytest.fixture
def client(gw: InProcessGateway) -> pubsub_v1.SchemaServiceClient:
    return gw.schema_client()


@pytest.fixture
def project() -> str:
    """A project of its own per test: lists and quotas see only what the test made."""
    return f"projects/schemas-{uuid.uuid4().hex[:10]}"


def _create(client: pubsub_v1.SchemaServiceClient, project: str, sid: str, kind: Any, text: str) -> Schema:
    return client.create_schema(parent=project, schema=Schema(type_=kind, definition=text), schema_id=sid)


def _stored(gw: InProcessGateway, project: str) -> tuple[list[str], list[str]]:
    """The records of the project's schemas and revisions: what a refusal must leave as it is."""
    store = gw.gateway.store
    prefix = f"{project}/schemas/"
    return store.names("schema", prefix), store.names("schema_revision", prefix)


def test_create_get_and_list_both_types(gw: InProcessGateway, client: Any, project: str) -> None:
    avro = _create(client, project, "avro-1", Schema.Type.AVRO, AVRO)
    proto = _create(client, project, "proto-1", Schema.Type.PROTOCOL_BUFFER, PROTO)
    assert avro.name == f"{project}/schemas/avro-1" and avro.type_ == Schema.Type.AVRO
    assert avro.definition == AVRO and len(avro.revision_id) == 8
    assert avro.revision_create_time.timestamp() == pytest.approx(time.time(), abs=60)
    assert proto.type_ == Schema.Type.PROTOCOL_BUFFER and proto.definition == PROTO

    # GetSchema: FULL unless BASIC is asked for; a revision by `@id`.
    got = client.get_schema(name=avro.name)
    assert (got.definition, got.revision_id) == (AVRO, avro.revision_id)
    basic = client.get_schema(request={"name": avro.name, "view": SchemaView.BASIC})
    assert basic.definition == "" and basic.type_ == Schema.Type.AVRO and basic.name == avro.name
    assert client.get_schema(name=f"{avro.name}@{avro.revision_id}").definition == AVRO

    # ListSchemas: BASIC unless FULL is asked for; pages.
    listed = list(client.list_schemas(parent=project))
    assert [s.name for s in listed] == [avro.name, proto.name]
    assert all(s.definition == "" and s.revision_id for s in listed)
    full = list(client.list_schemas(request={"parent": project, "view": SchemaView.FULL}))
    assert [s.definition for s in full] == [AVRO, PROTO]
    first = client.list_schemas(request={"parent": project, "page_size": 1})
    assert len(first._response.schemas) == 1 and first.next_page_token
    assert [s.name for s in first] == [avro.name, proto.name]  # the pager follows the token


def test_revisions_commit_rollback_and_delete(gw: InProcessGateway, client: Any, project: str) -> None:
    first = _create(client, project, "revs", Schema.Type.AVRO, AVRO)
    name = first.name
    second = client.commit_schema(name=name, schema=Schema(type_=Schema.Type.AVRO, definition=AVRO_2))
    assert second.revision_id != first.revision_id and second.definition == AVRO_2
    assert client.get_schema(name=name).revision_id == second.revision_id  # the latest

    back = client.rollback_schema(name=name, revision_id=first.revision_id)
    assert back.definition == AVRO and back.revision_id not in (first.revision_id, second.revision_id)
    revisions = list(client.list_schema_revisions(name=name))
    assert [r.revision_id for r in revisions] == [back.revision_id, second.revision_id, first.revision_id]
    assert all(r.definition == "" for r in revisions)  # BASIC unless FULL is asked for
    full = client.list_schema_revisions(request={"name": name, "view": SchemaView.FULL, "page_size": 2})
    assert [r.definition for r in full] == [AVRO, AVRO_2, AVRO]  # over two pages

    deleted = client.delete_schema_revision(name=f"{name}@{second.revision_id}")
    assert deleted.revision_id == second.revision_id
    assert [r.revision_id for r in client.list_schema_revisions(name=name)] == [
        back.revision_id,
        first.revision_id,
    ]
    with pytest.raises(exceptions.NotFound):
        client.get_schema(name=f"{name}@{second.revision_id}")
    client.delete_schema_revision(name=f"{name}@{back.revision_id}")
    assert client.get_schema(name=name).revision_id == first.revision_id  # the latest left

    # The only revision stays: FAILED_PRECONDITION, nothing changed.
    before = _stored(gw, project)
    with pytest.raises(exceptions.FailedPrecondition, match="only revision"):
        client.delete_schema_revision(name=f"{name}@{first.revision_id}")
    assert _stored(gw, project) == before

    client.delete_schema(name=name)
    with pytest.raises(exceptions.NotFound):
        client.get_schema(name=name)
    assert _stored(gw, project) == ([], [])  # its revisions' records went with it
    # The name can be used again, and the new schema has nothing of the old one.
    again = _create(client, project, "revs", Schema.Type.PROTOCOL_BUFFER, PROTO)
    assert [r.revision_id for r in client.list_schema_revisions(name=name)] == [again.revision_id]


def test_proto_revisions_and_the_type_cannot_change(gw: InProcessGateway, client: Any, project: str) -> None:
    first = _create(client, project, "proto-p", Schema.Type.PROTOCOL_BUFFER, PROTO)
    second = client.commit_schema(
        name=first.name, schema=Schema(type_=Schema.Type.PROTOCOL_BUFFER, definition=PROTO_2)
    )
    assert second.definition == PROTO_2
    before = _stored(gw, project)
    with pytest.raises(exceptions.InvalidArgument, match="type"):
        client.commit_schema(name=first.name, schema=Schema(type_=Schema.Type.AVRO, definition=AVRO))
    with pytest.raises(exceptions.InvalidArgument, match="Invalid schema definition"):
        client.commit_schema(
            name=first.name, schema=Schema(type_=Schema.Type.PROTOCOL_BUFFER, definition="message {")
        )
    with pytest.raises(exceptions.NotFound):
        client.rollback_schema(name=first.name, revision_id="00000000")
    with pytest.raises(exceptions.InvalidArgument):
        client.rollback_schema(name=first.name, revision_id="")
    with pytest.raises(exceptions.NotFound):
        client.delete_schema_revision(name=f"{first.name}@00000000")
    with pytest.raises(exceptions.InvalidArgument):
        client.delete_schema_revision(name=first.name)  # no revision named
    with pytest.raises(exceptions.NotFound):
        client.commit_schema(
            name=f"{project}/schemas/missing", schema=Schema(type_=Schema.Type.AVRO, definition=AVRO)
        )
    assert _stored(gw, project) == before


@pytest.mark.parametrize(
    ("kind", "first", "incompatible", "why", "compatible"),
    [
        (
            Schema.Type.AVRO,
            AVRO,
            json.dumps(
                {
                    "type": "record",
                    "name": "Rec",
                    "fields": [{"name": "a", "type": "int"}, {"name": "c", "type": "long"}],
                }
            ),
            "c: the field is not in the writer's record Rec and has no default",
            AVRO_2,
        ),
        (
            Schema.Type.AVRO,
            AVRO,
            json.dumps({"type": "record", "name": "Rec", "fields": [{"name": "a", "type": "long"}]}),
            "a: long cannot be read as int",
            AVRO_2,
        ),
        (
            Schema.Type.PROTOCOL_BUFFER,
            PROTO,
            'syntax = "proto3";\nmessage M { int64 a = 1; }\n',
            "a: an existing field (number 1) cannot be edited: its type changed from 'int32' to 'int64'",
            PROTO_2,
        ),
        (
            Schema.Type.PROTOCOL_BUFFER,
            PROTO,
            'syntax = "proto3";\nmessage M { int32 a = 1; repeated string r = 2; }\n',
            "r: a repeated (or map) field (number 2) cannot be added",
            PROTO_2,
        ),
    ],
)
def test_an_incompatible_revision_is_refused_and_a_compatible_one_committed(
    gw: InProcessGateway,
    client: Any,
    project: str,
    kind: Any,
    first: str,
    incompatible: str,
    why: str,
    compatible: str,
) -> None:
    """CommitSchema compares a new revision with the latest one (Pub/Sub's compatibility rules):
    INVALID_ARGUMENT naming the field, and nothing written; a compatible one is committed."""
    made = _create(client, project, "compat", kind, first)
    before = _stored(gw, project)
    with pytest.raises(exceptions.InvalidArgument) as info:
        client.commit_schema(name=made.name, schema=Schema(type_=kind, definition=incompatible))
    assert "not compatible with the previous one" in info.value.message
    assert why in info.value.message and made.revision_id in info.value.message
    assert _stored(gw, project) == before
    assert [r.revision_id for r in client.list_schema_revisions(name=made.name)] == [made.revision_id]

    second = client.commit_schema(name=made.name, schema=Schema(type_=kind, definition=compatible))
    assert [r.revision_id for r in client.list_schema_revisions(name=made.name)] == [
        second.revision_id,
        made.revision_id,
    ]
    # Compared with the latest revision: what the second revision's fields rule out is refused.
    with pytest.raises(exceptions.InvalidArgument, match=second.revision_id):
        client.commit_schema(name=made.name, schema=Schema(type_=kind, definition=incompatible))
    # RollbackSchema copies a revision the schema had: it is not checked.
    back = client.rollback_schema(name=made.name, revision_id=made.revision_id)
    assert back.definition == first


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"schema_id": "bad", "definition": "{not json"}, exceptions.InvalidArgument),
        ({"schema_id": "bad", "definition": "message {", "type_": 1}, exceptions.InvalidArgument),
        ({"schema_id": "bad", "type_": 0}, exceptions.InvalidArgument),
        ({"schema_id": "9starts-with-a-digit"}, exceptions.InvalidArgument),
        ({"schema_id": "goog-reserved"}, exceptions.InvalidArgument),
        ({"schema_id": ""}, exceptions.InvalidArgument),
        ({"schema_id": "taken"}, exceptions.AlreadyExists),
    ],
)
def test_refused_creates_change_nothing(
    gw: InProcessGateway, client: Any, project: str, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    _create(client, project, "taken", Schema.Type.AVRO, AVRO)
    before = _stored(gw, project)
    schema = Schema(type_=kwargs.get("type_", Schema.Type.AVRO), definition=kwargs.get("definition", AVRO))
    with pytest.raises(error):
        client.create_schema(parent=project, schema=schema, schema_id=kwargs["schema_id"])
    assert _stored(gw, project) == before


def test_reads_of_missing_and_malformed_names(client: Any, project: str) -> None:
    with pytest.raises(exceptions.NotFound):
        client.get_schema(name=f"{project}/schemas/missing")
    with pytest.raises(exceptions.NotFound):
        client.delete_schema(name=f"{project}/schemas/missing")
    with pytest.raises(exceptions.NotFound):
        list(client.list_schema_revisions(name=f"{project}/schemas/missing"))
    with pytest.raises(exceptions.InvalidArgument):
        client.get_schema(name="projects/p/topics/not-a-schema")
    with pytest.raises(exceptions.InvalidArgument):
        client.get_schema(name=f"{project}/schemas/s@")
    with pytest.raises(exceptions.InvalidArgument):
        list(client.list_schemas(parent="not-a-project"))
    with pytest.raises(exceptions.InvalidArgument):
        client.get_schema(request={"name": f"{project}/schemas/x", "view": 7})


def test_validate_schema_and_message(client: Any, project: str) -> None:
    client.validate_schema(parent=project, schema=Schema(type_=Schema.Type.AVRO, definition=AVRO))
    client.validate_schema(parent=project, schema=Schema(type_=Schema.Type.PROTOCOL_BUFFER, definition=PROTO))
    with pytest.raises(exceptions.InvalidArgument, match="Invalid schema definition"):
        client.validate_schema(parent=project, schema=Schema(type_=Schema.Type.AVRO, definition="[1,"))
    with pytest.raises(exceptions.InvalidArgument):
        client.validate_schema(parent=project, schema=Schema(definition=AVRO))  # no type

    avro = _create(client, project, "val-avro", Schema.Type.AVRO, AVRO)
    proto = _create(client, project, "val-proto", Schema.Type.PROTOCOL_BUFFER, PROTO)

    def validate(**request: Any) -> None:
        client.validate_message(request={"parent": project, **request})

    validate(name=avro.name, message=b'{"a": 1}', encoding=Encoding.JSON)
    validate(name=avro.name, message=b"\x02", encoding=Encoding.BINARY)
    validate(name=f"{avro.name}@{avro.revision_id}", message=b'{"a": 2}', encoding=Encoding.JSON)
    validate(name=proto.name, message=b"\x08\x01", encoding=Encoding.BINARY)
    validate(name=proto.name, message=b'{"a": 1}', encoding=Encoding.JSON)
    validate(
        schema=Schema(type_=Schema.Type.AVRO, definition=AVRO), message=b'{"a": 3}', encoding=Encoding.JSON
    )
    for bad in (
        {"name": avro.name, "message": b'{"a": "x"}', "encoding": Encoding.JSON},
        {"name": proto.name, "message": b"\xff\xff", "encoding": Encoding.BINARY},
        {"name": avro.name, "message": b'{"a": 1}'},  # no encoding
        {"message": b"{}", "encoding": Encoding.JSON},  # neither name nor schema
    ):
        with pytest.raises(exceptions.InvalidArgument):
            validate(**bad)
    with pytest.raises(exceptions.NotFound):
        validate(name=f"{project}/schemas/missing", message=b"{}", encoding=Encoding.JSON)
    with pytest.raises(exceptions.NotFound):
        validate(name=f"{avro.name}@00000000", message=b"{}", encoding=Encoding.JSON)


def test_the_revision_limit_and_the_quota_count_schemas(kafka_bootstrap: str) -> None:
    """A gateway allowing two schemas per project: revisions do not count toward it, and a
    schema holds at most 20 revisions."""
    limited = InProcessGateway(
        settings_for(kafka_bootstrap, f"__inproc_{uuid.uuid4().hex[:8]}", max_schemas_per_project=2)
    ).start()
    try:
        client = limited.schema_client()
        project = f"projects/quota-{uuid.uuid4().hex[:8]}"
        one = _create(client, project, "one", Schema.Type.AVRO, AVRO)
        for _ in range(MAX_REVISIONS_PER_SCHEMA - 1):
            client.commit_schema(name=one.name, schema=Schema(type_=Schema.Type.AVRO, definition=AVRO_2))
        before = _stored(limited, project)
        with pytest.raises(exceptions.ResourceExhausted, match="revisions"):
            client.commit_schema(name=one.name, schema=Schema(type_=Schema.Type.AVRO, definition=AVRO))
        assert _stored(limited, project) == before
        assert len(list(client.list_schema_revisions(name=one.name))) == MAX_REVISIONS_PER_SCHEMA
        _create(client, project, "two", Schema.Type.AVRO, AVRO)
        with pytest.raises(exceptions.ResourceExhausted, match="schemas-per-project"):
            _create(client, project, "three", Schema.Type.AVRO, AVRO)
        client.delete_schema(name=one.name)
        _create(client, project, "three", Schema.Type.AVRO, AVRO)
    finally:
        limited.stop()


def test_iam_policies_of_schemas(client: Any, project: str) -> None:
    schema = _create(client, project, "iam", Schema.Type.AVRO, AVRO)
    policy = policy_pb2.Policy(
        bindings=[policy_pb2.Binding(role="roles/pubsub.viewer", members=["user:a@b.c"])]
    )
    client.set_iam_policy(request={"resource": schema.name, "policy": policy})
    for name in (schema.name, f"{schema.name}@{schema.revision_id}"):
        got = client.get_iam_policy(request={"resource": name})
        assert [(b.role, list(b.members)) for b in got.bindings] == [("roles/pubsub.viewer", ["user:a@b.c"])]
    # The policy lives in the schema's record: a commit after it keeps it.
    client.commit_schema(name=schema.name, schema=Schema(type_=Schema.Type.AVRO, definition=AVRO_2))
    assert client.get_iam_policy(request={"resource": schema.name}).bindings
    with pytest.raises(exceptions.NotFound):
        client.get_iam_policy(request={"resource": f"{project}/schemas/missing"})


def test_rest(gw: InProcessGateway, project: str) -> None:
    status, made = gw.http("POST", f"{project}/schemas?schemaId=rest", {"type": "AVRO", "definition": AVRO})
    assert status == 200, made
    assert made["name"] == f"{project}/schemas/rest" and made["definition"] == AVRO and made["revisionId"]
    assert gw.http("POST", f"{project}/schemas?schemaId=rest", {"type": "AVRO", "definition": AVRO})[0] == 409
    status, got = gw.http("GET", f"{project}/schemas/rest?view=BASIC")
    assert status == 200 and got["type"] == "AVRO" and "definition" not in got
    rev = made["revisionId"]
    assert gw.http("GET", f"{project}/schemas/rest@{rev}")[1]["definition"] == AVRO
    status, listed = gw.http("GET", f"{project}/schemas?view=FULL")
    assert status == 200 and [s["definition"] for s in listed["schemas"]] == [AVRO]
    status, committed = gw.http(
        "POST", f"{project}/schemas/rest:commit", {"schema": {"type": "AVRO", "definition": AVRO_2}}
    )
    assert status == 200 and committed["revisionId"] != rev
    status, revs = gw.http("GET", f"{project}/schemas/rest:listRevisions")
    assert status == 200 and [r["revisionId"] for r in revs["schemas"]] == [committed["revisionId"], rev]
    assert gw.http("DELETE", f"{project}/schemas/rest@{rev}:deleteRevision")[0] == 200
    good = {"schema": {"type": "AVRO", "definition": AVRO}}
    assert gw.http("POST", f"{project}/schemas:validate", good) == (200, {})
    status, body = gw.http(
        "POST", f"{project}/schemas:validate", {"schema": {"type": "AVRO", "definition": "["}}
    )
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    message = {"name": f"{project}/schemas/rest", "message": "eyJhIjogMX0=", "encoding": "JSON"}  # {"a": 1}
    assert gw.http("POST", f"{project}/schemas:validateMessage", message) == (200, {})
    assert gw.http("DELETE", f"{project}/schemas/rest") == (200, {})
    assert gw.http("GET", f"{project}/schemas/rest")[0] == 404


def test_the_openapi_document_lists_the_schema_service(gw: InProcessGateway) -> None:
    status, doc = gw.http("GET", "openapi.json")
    assert status == 200
    paths = set(doc["paths"])
    for path in (
        "/v1/projects/{projectsId}/schemas",
        "/v1/projects/{projectsId}/schemas/{schemasId}",
        "/v1/projects/{projectsId}/schemas:validate",
        "/v1/projects/{projectsId}/schemas:validateMessage",
        "/v1/projects/{projectsId}/schemas/{schemasId}:commit",
        "/v1/projects/{projectsId}/schemas/{schemasId}:rollback",
        "/v1/projects/{projectsId}/schemas/{schemasId}:listRevisions",
        "/v1/projects/{projectsId}/schemas/{schemasId}:deleteRevision",
    ):
        assert path in paths, sorted(p for p in paths if "schema" in p)


@pytest.fixture
def other(gw: InProcessGateway) -> Iterator[InProcessGateway]:
    second = InProcessGateway(
        settings_for(gw.settings.kafka_bootstrap or "", gw.settings.internal_prefix)
    ).start()
    yield second
    second.stop()


def test_a_second_gateway_serves_the_schemas(
    gw: InProcessGateway, other: InProcessGateway, client: Any, project: str
) -> None:
    made = _create(client, project, "shared", Schema.Type.AVRO, AVRO)
    theirs = other.schema_client()
    deadline = time.monotonic() + 10
    while other.gateway.store.get("schema", made.name) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert theirs.get_schema(name=made.name).definition == AVRO
    # A revision committed through the other process is the latest here too.
    second = theirs.commit_schema(name=made.name, schema=Schema(type_=Schema.Type.AVRO, definition=AVRO_2))
    deadline = time.monotonic() + 10
    while client.get_schema(name=made.name).revision_id != second.revision_id and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.get_schema(name=made.name).definition == AVRO_2
    theirs.validate_message(
        request={
            "parent": project,
            "name": made.name,
            "message": b'{"a": 1, "b": null}',
            "encoding": Encoding.JSON,
        }
    )


def test_revisions_of_300_kib_fit_kafkas_stock_record_limit(
    gw: InProcessGateway, client: Any, project: str
) -> None:
    """Each revision is a record of its own: the largest definitions Pub/Sub takes, several
    revisions of them, stay within the suite broker's stock 1 MB max.message.bytes."""

    def big(pad: str) -> str:
        text = json.dumps(
            {"type": "record", "name": "Big", "doc": "", "fields": [{"name": "a", "type": "int"}]}
        )
        return text.replace('"doc": ""', f'"doc": "{pad * (300 * 1024 - len(text) - 50)}"')

    definitions = [big(c) for c in "xyz"]
    assert all(290 * 1024 < len(d.encode()) <= 300 * 1024 for d in definitions)
    made = _create(client, project, "big", Schema.Type.AVRO, definitions[0])
    for text in definitions[1:]:
        client.commit_schema(name=made.name, schema=Schema(type_=Schema.Type.AVRO, definition=text))
    full = list(client.list_schema_revisions(request={"name": made.name, "view": SchemaView.FULL}))
    assert [r.definition for r in full] == definitions[::-1]
    with pytest.raises(exceptions.InvalidArgument):  # past 300 KiB
        _create(client, project, "too-big", Schema.Type.AVRO, big("x") + " " * 100)


def test_concurrent_commits_through_two_gateways_are_all_kept_in_one_order(
    gw: InProcessGateway, other: InProcessGateway, client: Any, project: str
) -> None:
    """Each commit is a compare-and-set of the schema's record: commits racing through two
    processes are decided by log order, none is lost, and both processes list the same order."""
    made = _create(client, project, "raced", Schema.Type.AVRO, AVRO)
    deadline = time.monotonic() + 10
    while other.gateway.store.get("schema", made.name) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    results: list[str] = []
    errors: list[BaseException] = []

    def commit_five(target: pubsub_v1.SchemaServiceClient) -> None:
        try:
            for _ in range(5):
                schema = Schema(type_=Schema.Type.AVRO, definition=AVRO_2)
                results.append(target.commit_schema(name=made.name, schema=schema).revision_id)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=commit_five, args=(c,)) for c in (client, other.schema_client())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(set(results)) == 10
    # A commit through one process reaches the other's store a log-read later: both lists are
    # read again until each holds all eleven revisions, or the deadline passes.
    deadline = time.monotonic() + 10
    mine: list[str] = []
    theirs: list[str] = []
    while not (len(mine) == len(theirs) == 11) and time.monotonic() < deadline:
        mine = [r.revision_id for r in client.list_schema_revisions(name=made.name)]
        theirs = [r.revision_id for r in other.schema_client().list_schema_revisions(name=made.name)]
        time.sleep(0.1)
    assert mine == theirs and len(mine) == 11 and set(results) <= set(mine)
    assert mine[-1] == made.revision_id
