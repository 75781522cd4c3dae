"""gateway.schemas: the API shared by both schema types, and the cache. Avro and Protocol
Buffer validation, and names and revision ids, have files of their own (test_schemas_*.py)."""

from __future__ import annotations

import json
import re

import pytest

from gateway._pb.google.pubsub.v1 import schema_pb2
from gateway.errors import Code, InvalidArgument
from gateway.schemas import (
    MAX_DEFINITION_BYTES,
    AvroSchema,
    CompiledSchema,
    Encoding,
    ProtoSchema,
    SchemaCache,
    SchemaError,
    SchemaType,
    compile_schema,
    fingerprint,
)

AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
PROTO = 'syntax = "proto3";\nmessage M { int32 a = 1; }\n'


# --- types and encodings -------------------------------------------------------------------


def test_the_enums_carry_the_api_numbers() -> None:
    assert SchemaType.PROTOCOL_BUFFER == schema_pb2.Schema.PROTOCOL_BUFFER == 1
    assert SchemaType.AVRO == schema_pb2.Schema.AVRO == 2
    assert Encoding.JSON == schema_pb2.JSON == 1
    assert Encoding.BINARY == schema_pb2.BINARY == 2
    assert SchemaType.of(schema_pb2.Schema.AVRO) is SchemaType.AVRO
    assert Encoding.of(schema_pb2.BINARY) is Encoding.BINARY


@pytest.mark.parametrize("value", [0, 3, -1])
def test_unspecified_and_unknown_types_and_encodings_are_invalid_arguments(value: int) -> None:
    with pytest.raises(SchemaError, match="Schema type must be AVRO or PROTOCOL_BUFFER") as caught:
        SchemaType.of(value)
    assert caught.value.code is Code.INVALID_ARGUMENT
    with pytest.raises(SchemaError, match="Encoding must be JSON or BINARY"):
        Encoding.of(value)


def test_schema_error_is_an_invalid_argument() -> None:
    assert issubclass(SchemaError, InvalidArgument)
    assert SchemaError("x").code is Code.INVALID_ARGUMENT


def test_compile_schema_dispatches_on_the_type_and_takes_api_numbers() -> None:
    avro = compile_schema(schema_pb2.Schema.AVRO, AVRO)
    proto = compile_schema(SchemaType.PROTOCOL_BUFFER, PROTO)
    assert isinstance(avro, AvroSchema) and avro.type is SchemaType.AVRO
    assert isinstance(proto, ProtoSchema) and proto.type is SchemaType.PROTOCOL_BUFFER
    avro.validate(b'{"a": 1}', Encoding.JSON)
    proto.validate(b'{"a": 1}', Encoding.JSON)
    # The encoding may be the API's number as well.
    proto.validate(b"\x08\x01", schema_pb2.BINARY)  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="Encoding must be JSON or BINARY"):
        avro.validate(b'{"a": 1}', 0)  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="Schema type must be"):
        compile_schema(0, AVRO)


def test_a_definition_of_the_other_type_does_not_compile() -> None:
    with pytest.raises(SchemaError, match="Invalid Avro schema: the definition is not JSON"):
        compile_schema(SchemaType.AVRO, PROTO)
    with pytest.raises(SchemaError, match="Invalid Protocol Buffer schema"):
        compile_schema(SchemaType.PROTOCOL_BUFFER, AVRO)


@pytest.mark.parametrize("schema_type", list(SchemaType))
def test_definitions_are_limited_to_300_kib_and_must_not_be_empty(schema_type: SchemaType) -> None:
    base = AVRO if schema_type is SchemaType.AVRO else PROTO
    compile_schema(schema_type, base + " " * (MAX_DEFINITION_BYTES - len(base)))
    with pytest.raises(SchemaError, match=f"at most {MAX_DEFINITION_BYTES} are allowed"):
        compile_schema(schema_type, base + " " * (MAX_DEFINITION_BYTES - len(base) + 1))
    with pytest.raises(SchemaError, match="empty"):
        compile_schema(schema_type, " \n")
    with pytest.raises(SchemaError, match="not valid UTF-8"):
        compile_schema(schema_type, base + "\udc80")


def test_fingerprints_tell_types_and_texts_apart() -> None:
    assert fingerprint(SchemaType.AVRO, AVRO) == fingerprint(SchemaType.AVRO, AVRO)
    assert fingerprint(SchemaType.AVRO, AVRO) != fingerprint(SchemaType.PROTOCOL_BUFFER, AVRO)
    assert fingerprint(SchemaType.AVRO, AVRO) != fingerprint(SchemaType.AVRO, AVRO + " ")
    assert re.fullmatch(r"[0-9a-f]{64}", fingerprint(SchemaType.AVRO, AVRO))
    assert compile_schema(SchemaType.AVRO, AVRO).fingerprint == fingerprint(SchemaType.AVRO, AVRO)


# --- the cache -----------------------------------------------------------------------------


class _Counting:
    """A compiler that counts its calls and fails on definitions starting with 'bad'."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def __call__(self, schema_type: int, definition: str) -> CompiledSchema:
        self.calls.append((schema_type, definition))
        if definition.startswith("bad"):
            raise SchemaError("bad definition")
        return compile_schema(SchemaType.AVRO, json.dumps("string"))


def test_the_cache_compiles_each_definition_once() -> None:
    compiler = _Counting()
    cache = SchemaCache(max_size=4, compiler=compiler)
    first = cache.get(SchemaType.AVRO, "one")
    assert cache.get(SchemaType.AVRO, "one") is first
    assert cache.get(schema_pb2.Schema.AVRO, "one") is first  # the API's number is the same key
    cache.get(SchemaType.PROTOCOL_BUFFER, "one")  # another type: another entry
    assert compiler.calls == [(SchemaType.AVRO, "one"), (SchemaType.PROTOCOL_BUFFER, "one")]
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.size) == (2, 2, 2)


def test_the_cache_drops_the_least_recently_used() -> None:
    compiler = _Counting()
    cache = SchemaCache(max_size=2, compiler=compiler)
    cache.get(SchemaType.AVRO, "a")
    cache.get(SchemaType.AVRO, "b")
    cache.get(SchemaType.AVRO, "a")  # a is now the most recently used
    cache.get(SchemaType.AVRO, "c")  # evicts b
    assert cache.stats().size == 2
    cache.get(SchemaType.AVRO, "a")
    assert [d for _, d in compiler.calls] == ["a", "b", "c"]
    cache.get(SchemaType.AVRO, "b")
    assert [d for _, d in compiler.calls] == ["a", "b", "c", "b"]


def test_the_cache_keeps_no_failures_and_can_be_cleared() -> None:
    compiler = _Counting()
    cache = SchemaCache(compiler=compiler)
    for _ in range(2):
        with pytest.raises(SchemaError, match="bad definition"):
            cache.get(SchemaType.AVRO, "bad one")
    assert len(compiler.calls) == 2 and cache.stats().size == 0
    cache.get(SchemaType.AVRO, "good")
    cache.clear()
    cache.get(SchemaType.AVRO, "good")
    assert len(compiler.calls) == 4
    with pytest.raises(ValueError, match="at least 1"):
        SchemaCache(max_size=0)


def test_the_cache_compiles_protocol_buffers_once() -> None:
    cache = SchemaCache()
    first = cache.get(SchemaType.PROTOCOL_BUFFER, PROTO)
    assert cache.get(SchemaType.PROTOCOL_BUFFER, PROTO) is first
    assert cache.stats().misses == 1
