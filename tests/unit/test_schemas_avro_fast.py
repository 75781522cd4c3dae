"""The generated Avro binary checker (gateway.schemas.avro_binary_gen) against the walker of
gateway.schemas.avro_binary, which states the rules: both must take exactly the same messages,
drawn or hostile. `AvroSchema.validate` asks the checker first and the walker only to describe
what the checker refused."""

from __future__ import annotations

import json
import struct
import time
from typing import Any

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.schemas import AvroSchema, Encoding, SchemaError, avro_binary, avro_binary_gen
from gateway.schemas.avro_rules import Mismatch
from tests.unit.test_schemas_avro import HYP, ORDER, binary, one, refused
from tests.unit.test_schemas_avro_properties import _values, schemas, solid_schemas

READING: dict[str, Any] = {  # the publish benchmark's record (benchmarks/scenarios/publish.py)
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "at", "type": "long"},
        {"name": "values", "type": {"type": "array", "items": "double"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
READING_VALUE = {
    "sensor": "s-17",
    "at": 1_700_000_000_000,
    "values": [i / 7 for i in range(120)],
    "note": "x" * 40,
}


def _verdicts(definition: Any, data: bytes) -> tuple[int | None, int | None]:
    """(Where the walker's value ends, where the checker's does), None for a refusal."""
    named: dict[str, Any] = {}
    parsed = fastavro.parse_schema(json.loads(json.dumps(definition)), named_schemas=named)
    checker = avro_binary_gen.compile_checker(parsed, named)
    assert checker is not None
    step = avro_binary.compile_binary(parsed, named)
    try:
        walked: int | None = step(data, 0)
    except (IndexError, Mismatch):
        walked = None
    try:
        checked: int | None = checker(data)
    except (IndexError, Mismatch, UnicodeDecodeError):
        checked = None
    return walked, checked


def _agree(definition: Any, data: bytes) -> None:
    walked, checked = _verdicts(definition, data)
    assert walked == checked, (definition, data)


@HYP
@given(st.one_of(schemas, solid_schemas), st.binary(max_size=32))
def test_the_checker_and_the_walker_agree_on_any_bytes(definition: Any, data: bytes) -> None:
    _agree(definition, data)


@HYP
@given(st.data())
def test_the_checker_and_the_walker_agree_on_valid_messages_cut_grown_and_changed(
    data: st.DataObject,
) -> None:
    definition = data.draw(schemas)
    schema = one(definition)
    encoded = binary(schema, data.draw(_values(schema.parsed, {})))
    assert _verdicts(definition, encoded) == (len(encoded), len(encoded))
    _agree(definition, encoded[: data.draw(st.integers(0, len(encoded)))])
    _agree(definition, encoded + data.draw(st.binary(min_size=1, max_size=3)))
    if encoded:
        at = data.draw(st.integers(0, len(encoded) - 1))
        changed = encoded[:at] + bytes([data.draw(st.integers(0, 255))]) + encoded[at + 1 :]
        _agree(definition, changed)


def test_the_benchmark_record_validates_and_every_cut_or_extra_byte_is_refused() -> None:
    schema = one(READING)
    data = binary(schema, READING_VALUE)
    schema.validate(data, Encoding.BINARY)
    for cut in range(len(data)):
        assert "ends in the middle of a value" in refused(schema, data[:cut], Encoding.BINARY)
    assert "1 byte follows the end" in refused(schema, data + b"\x00", Encoding.BINARY)


def _zigzag(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


HOSTILE: list[tuple[Any, bytes, str]] = [
    # huge lengths: refused by one comparison, never read or allocated
    ("string", _zigzag(2**62), "ends in the middle"),
    ("bytes", _zigzag(2**62) + b"abc", "ends in the middle"),
    ({"type": "array", "items": "double"}, _zigzag(2**62) + b"\x00", "ends in the middle"),
    (
        {"type": "array", "items": "double"},
        _zigzag(-(2**62)) + _zigzag(8) + b"\x00" * 8 + b"\x00",
        "ends in the middle",
    ),
    ({"type": "array", "items": "double"}, _zigzag(-1) + _zigzag(7) + b"\x00" * 8 + b"\x00", "block says"),
    ({"type": "array", "items": "double"}, _zigzag(-1) + _zigzag(-8), "a negative length"),
    ({"type": "map", "values": "double"}, _zigzag(2**62) + b"\x00", "ends in the middle"),
    ({"type": "array", "items": "int"}, b"\xff" * 11, "a varint longer than 10 bytes"),
    # bad unions and enums, one byte and more
    (["null", "int"], _zigzag(2), "union branch 2 does not exist"),
    (["null", "int"], _zigzag(-1), "union branch -1 does not exist"),
    (["null", "int"], _zigzag(2**40), "does not exist"),
    (["int", "string", "null", "double", "boolean", "bytes"], _zigzag(6), "union branch 6 does not exist"),
    (["int", "string", "null", "double", "boolean", "bytes"], _zigzag(4) + b"\x02", "a boolean must be"),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, _zigzag(2), "enum symbol 2 does not exist"),
    (
        {"type": "enum", "name": "E", "symbols": [f"S{i}" for i in range(100)]},
        _zigzag(100),
        "enum symbol 100",
    ),
    # ints past their range, strings that are not UTF-8, booleans that are not 0 or 1
    ("int", _zigzag(2**31), "out of the range of an int"),
    ("long", b"\xff" * 9 + b"\x7f", "out of the range of a long"),
    ({"type": "array", "items": "string"}, b"\x02\x04\xc3\x28\x00", "not valid UTF-8"),
    ({"type": "array", "items": "boolean"}, b"\x04\x01\x02\x00", "a boolean must be"),
    # fixed-width runs in records: one step, still bounded
    (
        {"type": "record", "name": "R", "fields": [{"name": f"d{i}", "type": "double"} for i in range(8)]},
        b"\x00" * 63,
        "ends in the middle",
    ),
]


@pytest.mark.parametrize(("definition", "data", "says"), HOSTILE)
def test_hostile_binary_is_refused_by_both_saying_why(definition: Any, data: bytes, says: str) -> None:
    _agree(definition, data)
    message = refused(one(definition), data, Encoding.BINARY)
    assert message.startswith("Invalid Avro BINARY message: ") and says in message


def test_valid_edge_cases_pass_both() -> None:
    """Multi-byte indexes, counts and lengths, sized blocks, and large unions' tables."""
    enum = {"type": "enum", "name": "E", "symbols": [f"S{i}" for i in range(100)]}
    big_union = ["int", "string", "null", "double", "boolean", "bytes", enum]
    cases = [
        (enum, _zigzag(99)),
        (big_union, _zigzag(6) + _zigzag(70)),
        (big_union, _zigzag(2)),
        (
            {"type": "array", "items": "double"},
            _zigzag(-2) + _zigzag(16) + b"\x00" * 16 + _zigzag(100) + b"\x01" * 800 + b"\x00",
        ),
        ({"type": "array", "items": "double"}, b"\x80\x00"),  # a count of 0 in two bytes
        ("string", _zigzag(70) + b"a" * 70),
        (
            {"type": "map", "values": {"type": "array", "items": ["null", "long"]}},
            b"\x02\x02k\x02\x02\x00\x00\x00",
        ),
    ]
    for definition, data in cases:
        assert _verdicts(definition, data) == (len(data), len(data)), definition
        one(definition).validate(data, Encoding.BINARY)


def test_a_recursive_record_nested_deep_is_checked_then_too_deep() -> None:
    definition = {"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]}
    _agree(definition, b"\x02" * 200 + b"\x00")
    _agree(definition, b"\x02" * 200)
    schema = one(definition)
    schema.validate(b"\x02" * 200 + b"\x00", Encoding.BINARY)
    assert "nested too deeply" in refused(schema, b"\x02" * 20_000 + b"\x00", Encoding.BINARY)


def test_items_of_a_fixed_width_cost_one_step_per_block() -> None:
    """2**62 - 1 doubles declared, none there: refused at once. And zero-width items declared by
    the 2**62 take no time (what the walker guarantees too)."""
    schema = one({"type": "array", "items": "double"})
    started = time.monotonic()
    assert "ends in the middle" in refused(schema, _zigzag(2**62 - 1) + b"\x00", Encoding.BINARY)
    nulls = one({"type": "array", "items": {"type": "fixed", "name": "F", "size": 0}})
    nulls.validate(_zigzag(2**62 - 1) + b"\x00", Encoding.BINARY)
    assert time.monotonic() - started < 1.0


def test_no_text_of_the_definition_reaches_the_generated_source() -> None:
    """Names are the generator's own; only integers come from the schema."""
    definition = {
        "type": "record",
        "name": "import_os",
        "namespace": "exec_",
        "fields": [
            {"name": "system", "type": {"type": "enum", "name": "rm_rf", "symbols": ["eval_", "open_"]}},
            {"name": "payload", "type": {"type": "fixed", "name": "dunder__class__", "size": 3}},
            {"name": "more", "type": ["null", "exec_.import_os"]},
        ],
    }
    named: dict[str, Any] = {}
    parsed = fastavro.parse_schema(definition, named_schemas=named)
    source = "\n".join(avro_binary_gen.generate(parsed, named)[0])
    for word in ("import_os", "exec_", "system", "rm_rf", "eval_", "open_", "payload", "dunder", "more"):
        assert word not in source


def test_a_definition_too_deep_to_generate_keeps_the_walker() -> None:
    definition: Any = "int"
    for _ in range(600):
        definition = {"type": "array", "items": definition}
    named: dict[str, Any] = {}
    parsed = fastavro.parse_schema(definition, named_schemas=named)
    assert avro_binary_gen.compile_checker(parsed, named) is None
    schema = one(definition)
    schema.validate(b"\x00", Encoding.BINARY)
    with pytest.raises(SchemaError):
        schema.validate(b"\x02\x00", Encoding.BINARY)


def test_a_definition_too_large_to_generate_for_keeps_the_walker() -> None:
    """6,000 fields (a 300 KiB definition holds ~6,500) would be ~60,000 lines, ~0.6 s of
    compile: the walker alone checks them."""
    fields = [{"name": f"f{i}", "type": ["null", "string"]} for i in range(6000)]
    definition = {"type": "record", "name": "Wide", "fields": fields}
    named: dict[str, Any] = {}
    parsed = fastavro.parse_schema(definition, named_schemas=named)
    assert avro_binary_gen.compile_checker(parsed, named) is None
    schema = one(definition)
    schema.validate(b"\x00" * 6000, Encoding.BINARY)
    assert "ends in the middle" in refused(schema, b"\x00" * 5999, Encoding.BINARY)


def test_a_record_of_many_fields_is_checked_in_parts() -> None:
    fields = [{"name": f"f{i}", "type": "string" if i % 3 else "double"} for i in range(100)]
    definition = {"type": "record", "name": "Many", "fields": fields}
    named: dict[str, Any] = {}
    parsed = fastavro.parse_schema(definition, named_schemas=named)
    units, _ = avro_binary_gen.generate(parsed, named)
    assert len(units) == 5  # four parts of at most 32 fields, and the record calling them
    value = {f"f{i}": "s" * i if i % 3 else float(i) for i in range(100)}
    data = binary(one(definition), value)
    assert _verdicts(definition, data) == (len(data), len(data))
    for cut in (1, 8, len(data) // 2, len(data) - 1):
        _agree(definition, data[:cut])


def test_order_of_the_other_tests_validates_with_the_checker() -> None:
    schema = one(ORDER)
    assert isinstance(schema, AvroSchema) and schema._fast is not None
    value = {
        "id": "o-1",
        "quantity": 3,
        "amount": 2.5,
        "paid": True,
        "created": 1,
        "status": "PAID",
        "digest": b"abcd",
        "raw": struct.pack("<d", 1.5),
        "note": None,
        "tags": ["a"],
        "attrs": {"k": 2**40},
        "lines": [{"sku": "s"}] * 3,
        "first": {"sku": "f"},
    }
    data = binary(schema, value)
    assert schema._fast(data) == len(data)
    schema.validate(data, Encoding.BINARY)


# --- JSON: arrays and maps of a primitive checked whole first ------------------------------

_json_item_kinds = [
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1]),
    st.floats(),
    st.text(max_size=3),
    st.sampled_from(["\u00ff", "\u0100", "é", "€"]),
]
# Mixed lists mostly fail the whole check; lists of one kind mostly pass it: draw both.
_json_items = st.lists(st.one_of(_json_item_kinds), max_size=6) | st.one_of(
    [st.lists(kind, max_size=6) for kind in _json_item_kinds]
)


def _json_verdict(check: Any, value: Any) -> str | None:
    try:
        check(value)
    except Mismatch as exc:
        return exc.describe()
    return None


@HYP
@given(st.sampled_from(["null", "boolean", "int", "long", "float", "double", "bytes", "string"]), _json_items)
def test_json_collections_of_a_primitive_get_the_verdict_item_by_item_gives(
    primitive: str, items: list[Any]
) -> None:
    from gateway.schemas import avro_json

    for definition, value in (
        ({"type": "array", "items": primitive}, items),
        ({"type": "map", "values": primitive}, {f"k{i}": item for i, item in enumerate(items)}),
    ):
        named: dict[str, Any] = {}
        parsed = fastavro.parse_schema(definition, named_schemas=named)
        fast = avro_json.compile_json(parsed, named)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(avro_json, "_WHOLE", {})
            slow = avro_json.compile_json(parsed, named)
        assert _json_verdict(fast, value) == _json_verdict(slow, value)


def test_json_arrays_of_a_primitive_refuse_saying_which_item() -> None:
    cases = [
        ({"type": "array", "items": "int"}, [1, 2**31], "[1]: 2147483648 is out of the range of an int"),
        ({"type": "array", "items": "int"}, [1, True], "[1]: expected an int"),
        ({"type": "array", "items": "double"}, [1.5, "2"], "[1]: expected a number"),
        ({"type": "array", "items": "bytes"}, ["a", "\u0100"], "[1]: bytes may hold only characters"),
        ({"type": "map", "values": "long"}, {"a": 1, "b": 2**63}, "['b']: 9223372036854775808 is out of"),
        ({"type": "map", "values": "string"}, {"a": "x", "b": None}, "['b']: expected a string"),
    ]
    for definition, value, says in cases:
        message = refused(one(definition), json.dumps(value).encode(), Encoding.JSON)
        assert says in message, message
