"""Which allowed revision a published message matches, and how a delivered one shows a
deleted schema or revision (core/topic_schemas.py)."""

from __future__ import annotations

import json
import time
from typing import Any, cast

import pytest

from gateway._pb.google.pubsub.v1 import schema_pb2
from gateway.core.resources import Resource, ResourceStore
from gateway.core.topic_schemas import SchemaMarks, _match
from gateway.schemas import Encoding, SchemaError, SchemaType, compile_schema
from gateway.translate.meta import SchemaMeta

V1 = compile_schema(
    SchemaType.AVRO, json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
)
V2 = compile_schema(
    SchemaType.AVRO,
    json.dumps(
        {
            "type": "record",
            "name": "R",
            "fields": [{"name": "a", "type": "int"}, {"name": "c", "type": "string"}],
        }
    ),
)
NEWEST_FIRST = [("rev2", V2), ("rev1", V1)]


def test_each_message_gets_the_newest_revision_it_matches() -> None:
    both = [("rev1b", V1), ("rev1", V1)]
    assert _match(both, [b'{"a": 1}'], Encoding.JSON, "s") == ["rev1b"]
    payloads = [b'{"a": 1, "c": "x"}', b'{"a": 2}', b'{"a": 3, "c": ""}']
    assert _match(NEWEST_FIRST, payloads, Encoding.JSON, "s") == ["rev2", "rev1", "rev2"]


def test_a_message_matching_no_revision_names_itself_and_the_first_reason() -> None:
    with pytest.raises(
        SchemaError, match=r"failed schema validation \(message 1, JSON of s: .*expected an int"
    ) as caught:
        _match(NEWEST_FIRST, [b'{"a": 1}', b'{"a": "one"}'], Encoding.JSON, "s")
    assert caught.value.code.name == "INVALID_ARGUMENT"


def test_an_inline_pass_stops_at_a_large_message_or_its_time_and_the_rest_resumes() -> None:
    small, large = b'{"a": 1}', json.dumps({"a": 2, "c": "x" * 5000}).encode()
    payloads = [small, small, large, small]
    later = time.perf_counter() + 60
    assert _match(NEWEST_FIRST, payloads, Encoding.JSON, "s", until=later) == ["rev1", "rev1"]
    assert _match(NEWEST_FIRST, payloads, Encoding.JSON, "s", until=time.perf_counter() - 1) == []
    assert _match(NEWEST_FIRST, payloads, Encoding.JSON, "s", 2) == ["rev2", "rev1"]
    with pytest.raises(SchemaError, match=r"\(message 3, JSON of s"):
        _match(NEWEST_FIRST, [*payloads[:3], b'{"a": "x"}'], Encoding.JSON, "s", 2)


class _Store:
    """What SchemaMarks reads of the resource store: one schema with two revisions."""

    def get(self, kind: str, name: str) -> Any:
        assert kind == "schema"
        if name != "projects/p/schemas/s":
            return None
        return Resource(name, schema_pb2.Schema(), SchemaMeta("u", ("rev1", "rev2")))


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ({"k": "v"}, {"k": "v"}),  # no schema: untouched
        (
            {"googclient_schemaname": "projects/p/schemas/s", "googclient_schemarevisionid": "rev2"},
            {"googclient_schemaname": "projects/p/schemas/s", "googclient_schemarevisionid": "rev2"},
        ),
        (
            {"googclient_schemaname": "projects/p/schemas/s", "googclient_schemarevisionid": "rev0"},
            {
                "googclient_schemaname": "projects/p/schemas/s",
                "googclient_schemarevisionid": "_deleted-schema-revision_",
            },
        ),
        (
            {"googclient_schemaname": "projects/p/schemas/gone", "googclient_schemarevisionid": "rev1"},
            {
                "googclient_schemaname": "_deleted-schema_",
                "googclient_schemarevisionid": "_deleted-schema-revision_",
            },
        ),
    ],
)
def test_deleted_schemas_and_revisions_are_marked_on_delivery(
    given: dict[str, str], shown: dict[str, str]
) -> None:
    attributes = dict(given)
    SchemaMarks(cast(ResourceStore, _Store())).apply(attributes)
    assert attributes == shown
