"""Properties of Avro validation (gateway.schemas.avro): schemas and values drawn by hypothesis,
encoded by fastavro's writers (the oracle), validated here; and arbitrary input, which must
validate or be a SchemaError, never another exception."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.schemas import AvroSchema, Encoding, SchemaError
from tests.unit.test_schemas_avro import HYP, ORDER, avro_json, binary, one

_PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]


def _named(kind: str, **rest: Any) -> dict[str, Any]:
    return {"type": kind, "name": "?", **rest}


def _unique_union(branches: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for branch in branches:
        label = branch if isinstance(branch, str) else (id(branch) if "name" in branch else branch["type"])
        if str(label) not in seen:
            seen.add(str(label))
            out.append(branch)
    return out


_leaves = (
    st.sampled_from(_PRIMITIVES)
    | st.builds(lambda n: _named("enum", symbols=[f"S{i}" for i in range(n)]), st.integers(1, 4))
    | st.builds(lambda n: _named("fixed", size=n), st.integers(0, 5))
)


def _compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    fields = st.lists(children, max_size=4).map(
        lambda ts: [{"name": f"f{i}", "type": t} for i, t in enumerate(ts)]
    )
    return st.one_of(
        st.builds(lambda t: {"type": "array", "items": t}, children),
        st.builds(lambda t: {"type": "map", "values": t}, children),
        st.builds(lambda fs: _named("record", fields=fs), fields),
        st.lists(children.filter(lambda t: not isinstance(t, list)), min_size=1, max_size=4).map(
            _unique_union
        ),
    )


def _name_types(schema: Any, counter: list[int]) -> Any:
    """Give every named type a name of its own (the strategies cannot)."""
    if isinstance(schema, list):
        return [_name_types(s, counter) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if out.get("name") == "?":
        counter[0] += 1
        out["name"] = f"T{counter[0]}"
    if "fields" in out:
        out["fields"] = [{**f, "type": _name_types(f["type"], counter)} for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = _name_types(out[key], counter)
    return out


schemas = st.recursive(_leaves, _compound, max_leaves=10).map(lambda s: _name_types(s, [0]))

# Schemas whose every value takes at least one byte: fastavro's reader loops over each item of an
# array of nulls, which random bytes may declare 2**60 of.
_solid_leaves = st.sampled_from(_PRIMITIVES[1:]) | st.builds(
    lambda n: _named("fixed", size=n), st.integers(1, 3)
)


def _solid_compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    fields = st.lists(children, min_size=1, max_size=3).map(
        lambda ts: [{"name": f"f{i}", "type": t} for i, t in enumerate(ts)]
    )
    return st.one_of(
        st.builds(lambda t: {"type": "array", "items": t}, children),
        st.builds(lambda t: {"type": "map", "values": t}, children),
        st.builds(lambda fs: _named("record", fields=fs), fields),
        st.lists(children.filter(lambda t: not isinstance(t, list)), min_size=1, max_size=3).map(
            _unique_union
        ),
    )


solid_schemas = st.recursive(_solid_leaves, _solid_compound, max_leaves=6).map(lambda s: _name_types(s, [0]))


def _values(schema: Any, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    if isinstance(schema, str):
        simple: dict[str, st.SearchStrategy[Any]] = {
            "null": st.none(),
            "boolean": st.booleans(),
            "int": st.integers(-(2**31), 2**31 - 1),
            "long": st.integers(-(2**63), 2**63 - 1),
            "float": st.floats(width=32, allow_nan=False, allow_infinity=False),
            "double": st.floats(allow_nan=False, allow_infinity=False),
            "bytes": st.binary(max_size=8),
            "string": st.text(max_size=8),
        }
        return simple[schema] if schema in simple else _values(named[schema], named)
    if isinstance(schema, list):
        return st.one_of([_values(branch, named) for branch in schema])
    kind = schema["type"]
    if kind == "record":
        return st.fixed_dictionaries({f["name"]: _values(f["type"], named) for f in schema["fields"]})
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(_values(schema["items"], named), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=4), _values(schema["values"], named), max_size=3)
    return _values(kind, named)


@HYP
@given(st.data())
def test_whatever_fastavro_writes_validates_in_both_encodings(data: st.DataObject) -> None:
    definition = data.draw(schemas)
    schema = one(definition)
    value = data.draw(_values(schema.parsed, {}))  # each named type is written out once, never referred to
    encoded = binary(schema, value)
    schema.validate(encoded, Encoding.BINARY)
    try:
        as_json = avro_json(schema, value)
    except Exception:  # fastavro 1.13's json_writer fails on empty records and maps of nulls
        as_json = None
    if as_json is not None:
        schema.validate(as_json, Encoding.JSON)
    # The binary encoding is prefix-free: no proper prefix, and no longer data, is a value.
    if encoded:
        with pytest.raises(SchemaError):
            schema.validate(encoded[:-1], Encoding.BINARY)
    with pytest.raises(SchemaError):
        schema.validate(encoded + b"\x00", Encoding.BINARY)


@HYP
@given(solid_schemas, st.binary(max_size=24))
def test_binary_accepted_here_is_what_fastavro_reads_to_its_end(definition: Any, data: bytes) -> None:
    schema = one(definition)
    try:
        schema.validate(data, Encoding.BINARY)
    except SchemaError:
        return
    stream = io.BytesIO(data)
    fastavro.schemaless_reader(stream, schema.parsed)
    assert stream.tell() == len(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["id", "quantity", "note", "string", "lines", "sku", "first", "x"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def order() -> AvroSchema:
    return one(ORDER)


@HYP
@given(json_values, st.binary(max_size=64))
def test_arbitrary_input_either_validates_or_is_a_schema_error(
    order: AvroSchema, value: Any, data: bytes
) -> None:
    """No input may end in another exception: the publish path turns SchemaError, and only it,
    into INVALID_ARGUMENT."""
    for payload, encoding in ((json.dumps(value).encode(), Encoding.JSON), (data, Encoding.BINARY)):
        try:
            order.validate(payload, encoding)
        except SchemaError:
            pass
