"""Which allowed revision a published message matches (core/topic_schemas.py, pure)."""

from __future__ import annotations

import json

import pytest

from gateway.core.topic_schemas import _match
from gateway.schemas import Encoding, SchemaError, SchemaType, compile_schema

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
