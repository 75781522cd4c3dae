"""Avro schemas (gateway.schemas.avro): definitions, and messages in both encodings. The
properties (schemas and values drawn by hypothesis, fastavro as the oracle) are in
test_schemas_avro_properties.py."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hsettings

from gateway.schemas import AvroSchema, Encoding, SchemaError, SchemaType, compile_schema

HYP = hsettings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

ORDER: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "quantity", "type": "int"},
        {"name": "amount", "type": "double"},
        {"name": "paid", "type": "boolean"},
        {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "raw", "type": "bytes"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {"type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"}]},
            },
        },
        {"name": "first", "type": ["null", "Line", "Status"]},
    ],
}
GOOD = {
    "id": "o-1",
    "quantity": 3,
    "amount": 2.5,
    "paid": True,
    "created": 1_700_000_000_000,
    "status": "PAID",
    "digest": "\u0000\u00ff\u0010a",
    "raw": "\u00e9t\u00e9",
    "note": {"string": "leave at the door"},
    "tags": ["a", "b"],
    "attrs": {"x": 1},
    "lines": [{"sku": "s-1"}, {"sku": "s-2"}],
    "first": {"shop.Line": {"sku": "s-1"}},
}


@pytest.fixture(scope="module")
def order() -> AvroSchema:
    schema = compile_schema(SchemaType.AVRO, json.dumps(ORDER))
    assert isinstance(schema, AvroSchema)
    return schema


def binary(schema: AvroSchema, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema.parsed, value)
    return out.getvalue()


def avro_json(schema: AvroSchema, value: Any) -> bytes:
    out = io.StringIO()
    fastavro.json_writer(out, schema.parsed, [value])
    return out.getvalue().encode()


def refused(schema: AvroSchema, data: bytes, encoding: Encoding) -> str:
    with pytest.raises(SchemaError) as caught:
        schema.validate(data, encoding)
    return caught.value.message


# --- definitions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "definition",
    [
        '"string"',
        '["null", "int"]',
        '{"type": "long", "logicalType": "timestamp-micros"}',
        '{"type": "record", "name": "Empty", "fields": []}',
        '{"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]}',
        '{"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}',
        '{"type": "int", "logicalType": "no-such-logical-type"}',
        '{"type": "enum", "name": "E", "symbols": ["A", "B"], "default": "A"}',
        '{"type": "array", "items": "null"}',
    ],
)
def test_valid_definitions_compile(definition: str) -> None:
    assert compile_schema(SchemaType.AVRO, definition).type is SchemaType.AVRO


@pytest.mark.parametrize(
    ("definition", "says"),
    [
        ("{not json", "the definition is not JSON"),
        ('"strin"', "strin"),
        ('{"type": "record", "name": "R"}', 'needs "fields"'),
        (
            '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "int"}]}',
            "two fields named 'a'",
        ),
        ('{"type": "record", "name": "1R", "fields": []}', "the name of a record '1R'"),
        ('{"type": "record", "name": "R", "namespace": "a-b", "fields": []}', "a namespace 'a-b'"),
        (
            '{"type": "record", "name": "R", "fields": [{"name": "a-b", "type": "int"}]}',
            "field name of record 'R' 'a-b'",
        ),
        ('{"type": "record", "name": "R", "fields": [{"name": "a"}]}', 'with "name" and "type"'),
        (
            '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}',
            "Default value",
        ),
        ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "unique"),
        ('{"type": "enum", "name": "E", "symbols": ["A", "B-C"]}', "symbol of enum 'E'"),
        ('{"type": "enum", "name": "E", "symbols": ["A"], "default": "Z"}', "must be in symbols"),
        ('{"type": "fixed", "name": "F"}', 'needs "size"'),
        ('{"type": "fixed", "name": "F", "size": -1}', 'needs "size"'),
        ('{"type": "array"}', 'needs "items"'),
        ('{"type": "map"}', 'needs "values"'),
        ('["null", "null"]', "only one 'null'"),
        ('["int", {"type": "int", "logicalType": "date"}]', "only one 'int'"),
        ('[{"type": "array", "items": "int"}, {"type": "array", "items": "long"}]', "only one 'array'"),
        ('["null", ["int"]]', "may not contain a union"),
        ('{"type": {"type": "int"}}', 'needs a "type" that is a type name'),
        (
            '{"type": "record", "name": "R", "fields": [{"name": "a", "type": {"type": "record", "name": "R", "fields": []}}]}',
            "redefined",
        ),
        ('{"type": "record", "name": "R", "fields": 5}', 'needs "fields"'),
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
    ],
)
def test_invalid_definitions_are_refused_saying_why(definition: str, says: str) -> None:
    with pytest.raises(SchemaError, match=r"^Invalid Avro schema: ") as caught:
        compile_schema(SchemaType.AVRO, definition)
    assert says in caught.value.message


# --- JSON ----------------------------------------------------------------------------------


def test_a_valid_json_message_validates(order: AvroSchema) -> None:
    order.validate(json.dumps(GOOD).encode(), Encoding.JSON)
    # Fields with defaults may be left out; a union's null is a bare null.
    lean = {k: v for k, v in GOOD.items() if k not in ("note", "tags")} | {"first": None}
    order.validate(json.dumps(lean).encode(), Encoding.JSON)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"quantity": "3"}, "quantity: expected an int (a whole number), got a string"),
        ({"quantity": 2**31}, "quantity: 2147483648 is out of the range of an int (32 bits)"),
        ({"quantity": 1.5}, "quantity: expected an int"),
        ({"quantity": True}, "quantity: expected an int (a whole number), got a boolean"),
        ({"created": 2**63}, "created: 9223372036854775808 is out of the range of a long"),
        ({"amount": "2.5"}, "amount: expected a number"),
        ({"paid": 1}, "paid: expected a boolean"),
        ({"status": "LOST"}, "status: 'LOST' is not a symbol of enum shop.Status"),
        ({"digest": "abc"}, "digest: fixed shop.Digest holds 4 bytes, not 3"),
        ({"raw": "\u0100"}, "raw: bytes may hold only characters U+0000 to U+00FF"),
        ({"note": "plain"}, 'note: a union value must be null or {"<branch>": value}'),
        ({"note": {"int": 1}}, "note: 'int' is not a branch of the union [null, string]"),
        ({"note": {"string": 1}}, "note<string>: expected a string, got a number"),
        ({"note": {"null": None}}, "'null' is not a branch"),
        (
            {"first": {"Line": {"sku": "x"}}},
            "'Line' is not a branch of the union [null, shop.Line, shop.Status]",
        ),
        ({"tags": ["a", 1]}, "tags[1]: expected a string, got a number"),
        ({"attrs": {"x": "1"}}, "attrs['x']: expected a long"),
        ({"lines": [{"sku": "s"}, {}]}, "lines[1]: record shop.Line needs field 'sku', which has no default"),
        ({"lines": [{"sku": "s", "qty": 1}]}, "lines[0]: record shop.Line has no field 'qty'"),
        ({"extra": 1}, "record shop.Order has no field 'extra'"),
    ],
)
def test_json_messages_of_the_wrong_shape_are_refused_saying_where(
    order: AvroSchema, change: dict[str, Any], says: str
) -> None:
    message = refused(order, json.dumps(GOOD | change).encode(), Encoding.JSON)
    assert message.startswith("Invalid Avro JSON message: ")
    assert says in message


def test_a_missing_field_without_default_is_refused(order: AvroSchema) -> None:
    value = dict(GOOD)
    del value["id"]
    assert "needs field 'id'" in refused(order, json.dumps(value).encode(), Encoding.JSON)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "not one JSON value"),
        (b"{} {}", "not one JSON value (Extra data"),
        (b'{"a": 1}\n{"a": 2}', "not one JSON value"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"[]", "expected an object (record shop.Order), got an array"),
    ],
)
def test_json_that_is_not_one_value_is_refused(order: AvroSchema, data: bytes, says: str) -> None:
    assert says in refused(order, data, Encoding.JSON)


# --- binary --------------------------------------------------------------------------------


def _good_value() -> dict[str, Any]:
    return GOOD | {
        "digest": b"\x00\xff\x10a",
        "raw": b"\xe9t\xe9",
        "note": "leave at the door",
        "first": {"sku": "s-1"},
    }


def test_a_valid_binary_message_validates_and_nothing_may_follow_it(order: AvroSchema) -> None:
    data = binary(order, _good_value())
    order.validate(data, Encoding.BINARY)
    assert "1 byte follows the end" in refused(order, data + b"\x00", Encoding.BINARY)
    assert "3 bytes follow the end" in refused(order, data + b"abc", Encoding.BINARY)
    for cut in range(len(data)):
        assert "ends in the middle of a value" in refused(order, data[:cut], Encoding.BINARY)


def one(definition: Any) -> AvroSchema:
    schema = compile_schema(SchemaType.AVRO, json.dumps(definition))
    assert isinstance(schema, AvroSchema)
    return schema


@pytest.mark.parametrize(
    ("definition", "data", "says"),
    [
        ("int", b"\x80\x80\x80\x80\x10", "2147483648 is out of the range of an int"),
        ("int", b"\xff\xff\xff\xff\xff\x01", "a varint longer than 5 bytes"),
        ("long", b"\xff" * 10 + b"\x01", "a varint longer than 10 bytes"),
        ("boolean", b"\x02", "a boolean must be the byte 0 or 1"),
        ("string", b"\x04\xff\xfe", "a string that is not valid UTF-8"),
        ("bytes", b"\x03abc", "a negative length (-2)"),
        (["null", "int"], b"\x04", "union branch 2 does not exist (the union has 2)"),
        (["null", "int"], b"\x01\x02", "union branch -1 does not exist"),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, b"\x01", "enum symbol -1 does not exist"),
        ({"type": "array", "items": "int"}, b"\x01\x04\x02\x00", "a block says it holds 2 bytes but holds 1"),
        ({"type": "map", "values": "int"}, b"\x02\x02\xff\x00\x00", "[0]: a string that is not valid UTF-8"),
    ],
)
def test_binary_that_fastavro_would_misread_is_refused(definition: Any, data: bytes, says: str) -> None:
    """Out-of-range ints and negative indexes are what fastavro's reader takes (it reads -1 as
    the last branch); the others are the specification's own rules."""
    message = refused(one(definition), data, Encoding.BINARY)
    assert message.startswith("Invalid Avro BINARY message: ") and says in message


def test_arrays_in_blocks_with_byte_sizes_validate() -> None:
    schema = one({"type": "array", "items": "int"})
    schema.validate(b"\x03\x04\x02\x04\x02\x06\x00", Encoding.BINARY)  # [1, 2] sized, then [3]
    schema.validate(b"\x00", Encoding.BINARY)


def test_a_recursive_schema_nested_very_deep_is_refused_not_a_crash() -> None:
    """fastavro's compiled reader dies of SIGSEGV on this message; 20 KB must not end the gateway."""
    schema = one({"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]})
    schema.validate(b"\x02" * 50 + b"\x00", Encoding.BINARY)
    assert "nested too deeply" in refused(schema, b"\x02" * 20_000 + b"\x00", Encoding.BINARY)
    deep_json = '{"next": {"L": ' * 20_000 + '{"next": null}' + "}}" * 20_000
    assert "nested too deeply" in refused(schema, deep_json.encode(), Encoding.JSON)


def test_arrays_of_values_that_take_no_bytes_cost_nothing_per_item() -> None:
    """Ten bytes declare 2**62 nulls: valid Avro, which fastavro's reader loops over forever."""
    schema = one(
        {"type": "array", "items": {"type": "record", "name": "E", "fields": [{"name": "n", "type": "null"}]}}
    )
    huge = b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f"  # zig-zag 2**62 - 1
    started = time.monotonic()
    schema.validate(huge + b"\x00", Encoding.BINARY)
    assert time.monotonic() - started < 1.0
    maps = one({"type": "map", "values": "null"})
    assert "ends in the middle" in refused(maps, huge + b"\x00", Encoding.BINARY)  # keys take bytes
