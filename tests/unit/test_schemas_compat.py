"""Compatibility of a new schema revision with the previous one (gateway.schemas.compat): Avro's
schema resolution rules both ways, and Protocol Buffer fields only optional ones of which may
come and go. Each case is checked old -> new and new -> old, since the rules are symmetric."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import Code
from gateway.schemas import SchemaCache, SchemaError, SchemaType
from gateway.schemas.compat import PROMOTIONS, Incompatible, check_compatible, resolve_avro

_CACHE = SchemaCache()


def avro(*fields: dict[str, Any], name: str = "Rec", namespace: str = "ns") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": namespace, "fields": list(fields)})


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def proto(body: str, syntax: str = "proto3", package: str = "p") -> str:
    head = f'syntax = "{syntax}";\n' if syntax else ""
    return f"{head}package {package};\nmessage M {{\n{body}\n}}\n"


def compiled(kind: SchemaType, text: str) -> Any:
    return _CACHE.get(kind, text)


def check(kind: SchemaType, old: str, new: str) -> None:
    check_compatible(compiled(kind, old), compiled(kind, new))


def refused(kind: SchemaType, old: str, new: str) -> str:
    with pytest.raises(SchemaError) as info:
        check(kind, old, new)
    assert info.value.code is Code.INVALID_ARGUMENT
    return info.value.message


ENUM = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
BASE = avro(f("a", "int"), f("b", "string"))

AVRO_COMPATIBLE = [
    pytest.param(BASE, BASE, id="same"),
    pytest.param(
        BASE, avro(f("a", "int"), f("b", "string"), f("c", "long", default=0)), id="add-with-default"
    ),
    pytest.param(
        BASE,
        avro(f("a", "int"), f("b", "string"), f("c", ["null", "string"], default=None)),
        id="add-nullable",
    ),
    pytest.param(
        avro(f("a", "int"), f("c", "long", default=0)), avro(f("a", "int")), id="remove-with-default"
    ),
    pytest.param(avro(f("s", "string")), avro(f("s", "bytes")), id="string-bytes"),
    pytest.param(BASE, avro(f("b", "string"), f("a", "int")), id="fields-reordered"),
    pytest.param(BASE, avro(f("a", "int", doc="the a"), f("b", "string")), id="doc-added"),
    pytest.param(BASE, avro(f("a", "int"), f("b", "string"), namespace="other"), id="namespace-changed"),
    pytest.param(
        avro(f("e", {**ENUM, "default": "RED"})),
        avro(f("e", {**ENUM, "symbols": ["RED", "GREEN", "BLUE"], "default": "RED"})),
        id="enum-symbol-added-with-defaults",
    ),
    pytest.param(
        avro(f("x", ["null", "int"], default=None)), avro(f("x", ["null", "int"], default=None)), id="union"
    ),
    pytest.param(avro(f("x", ["null", "string"])), avro(f("x", ["null", "bytes"])), id="union-string-bytes"),
    pytest.param(
        avro(f("e", {**ENUM, "default": "RED"})),
        avro(f("e", {**ENUM, "symbols": ["RED", "GREEN", "BLUE"]})),
        id="enum-symbol-added-with-the-previous-default",
    ),
    pytest.param(
        avro(f("l", {"type": "array", "items": "int"})),
        avro(f("l", {"type": "array", "items": "int"})),
        id="array",
    ),
    pytest.param(
        avro(f("n", {"type": "record", "name": "In", "fields": [f("x", "int")]})),
        avro(f("n", {"type": "record", "name": "In", "fields": [f("x", "int"), f("y", "int", default=1)]})),
        id="nested-record-field-added-with-default",
    ),
    pytest.param(
        avro(f("next", ["null", "Rec"], default=None)),
        avro(f("next", ["null", "Rec"], default=None), f("v", "int", default=0)),
        id="recursive",
    ),
]


@pytest.mark.parametrize(("old", "new"), AVRO_COMPATIBLE)
def test_compatible_avro_revisions_pass_both_ways(old: str, new: str) -> None:
    check(SchemaType.AVRO, old, new)
    check(SchemaType.AVRO, new, old)


AVRO_INCOMPATIBLE = [
    pytest.param(BASE, avro(f("a", "int"), f("b", "string"), f("c", "long")), "c", id="add-without-default"),
    pytest.param(avro(f("a", "int"), f("c", "long")), avro(f("a", "int")), "c", id="remove-without-default"),
    pytest.param(BASE, avro(f("a", "string"), f("b", "string")), "a", id="type-change"),
    pytest.param(avro(f("a", "int")), avro(f("a", "long")), "a", id="promotion-one-way-only"),
    pytest.param(avro(f("a", "float")), avro(f("a", "double")), "a", id="float-double"),
    pytest.param(BASE, avro(f("aa", "int"), f("b", "string")), "a", id="renamed-field"),
    pytest.param(
        avro(f("e", ENUM)), avro(f("e", {**ENUM, "symbols": ["RED"]})), "GREEN", id="enum-symbol-removed"
    ),
    pytest.param(
        avro(f("e", ENUM)),
        avro(f("e", {**ENUM, "symbols": ["RED", "GREEN", "BLUE"]})),
        "BLUE",
        id="enum-symbol-added-without-default",
    ),
    pytest.param(avro(f("e", ENUM)), avro(f("e", {**ENUM, "name": "Colour"})), "Color", id="enum-renamed"),
    pytest.param(
        avro(f("x", {"type": "fixed", "name": "F", "size": 4})),
        avro(f("x", {"type": "fixed", "name": "F", "size": 8})),
        "x",
        id="fixed-size",
    ),
    pytest.param(
        avro(f("x", {"type": "fixed", "name": "F", "size": 4})),
        avro(f("x", {"type": "fixed", "name": "G", "size": 4})),
        "x",
        id="fixed-name",
    ),
    pytest.param(avro(f("x", ["null", "int"], default=None)), avro(f("x", "int")), "x", id="union-narrowed"),
    pytest.param(
        avro(f("l", {"type": "array", "items": "int"})),
        avro(f("l", {"type": "array", "items": "string"})),
        "l[]",
        id="array-items",
    ),
    pytest.param(
        avro(f("m", {"type": "map", "values": "int"})),
        avro(f("m", {"type": "map", "values": "boolean"})),
        "m{}",
        id="map-values",
    ),
    pytest.param(
        avro(f("n", {"type": "record", "name": "In", "fields": [f("x", "int")]})),
        avro(f("n", {"type": "record", "name": "In", "fields": [f("x", "int"), f("y", "int")]})),
        "n.y",
        id="nested-required-field-added",
    ),
    pytest.param(BASE, avro(f("a", "int"), f("b", "string"), name="Other"), "Rec", id="record-renamed"),
    pytest.param(avro(f("a", "int")), json.dumps("int"), "record", id="record-to-primitive"),
    pytest.param(
        avro(f("x", ["null", "int"])),
        avro(f("x", ["null", "int", "string"])),
        "x<string>",
        id="union-branch-added",
    ),
]


@pytest.mark.parametrize(("old", "new", "where"), AVRO_INCOMPATIBLE)
def test_incompatible_avro_revisions_are_refused_both_ways(old: str, new: str, where: str) -> None:
    for one, other in ((old, new), (new, old)):
        message = refused(SchemaType.AVRO, one, other)
        assert message.startswith("The schema revision is not compatible with the previous one: ")
        assert where in message


def parsed(text: str) -> Any:
    return compiled(SchemaType.AVRO, text).parsed


@pytest.mark.parametrize(
    ("writer", "reader"),
    [(w, r) for w, readers in PROMOTIONS.items() for r in sorted(readers)],
)
def test_promotions_go_one_way_as_the_specification_lists(writer: str, reader: str) -> None:
    assert len(PROMOTIONS["int"]) + len(PROMOTIONS["long"]) + len(PROMOTIONS["float"]) == 6
    resolve_avro(parsed(avro(f("v", writer))), parsed(avro(f("v", reader))))
    if {writer, reader} != {"string", "bytes"}:
        with pytest.raises(Incompatible, match=f"v: {reader} cannot be read as {writer}"):
            resolve_avro(parsed(avro(f("v", reader))), parsed(avro(f("v", writer))))


def test_one_direction_of_a_field_without_default() -> None:
    """A field only the writer has is skipped; one only the reader has needs its default."""
    small, big = parsed(avro(f("a", "int"))), parsed(avro(f("a", "int"), f("b", "int")))
    resolve_avro(big, small)
    with pytest.raises(
        Incompatible, match="b: the field is not in the writer's record Rec and has no default"
    ):
        resolve_avro(small, big)


def test_unions_resolve_branch_by_branch() -> None:
    narrow = parsed(avro(f("x", "int")))
    wide = parsed(avro(f("x", ["null", "long", "string"])))
    resolve_avro(narrow, wide)  # int is read by the first branch that matches it: long
    with pytest.raises(Incompatible, match=r"x<null>: null cannot be read as int"):
        resolve_avro(wide, narrow)
    with pytest.raises(Incompatible, match=r"has no branch that reads boolean"):
        resolve_avro(parsed(avro(f("x", "boolean"))), wide)


def test_named_types_match_by_unqualified_name_or_a_reader_alias() -> None:
    one = parsed(avro(f("a", "int"), name="Rec", namespace="one"))
    resolve_avro(one, parsed(avro(f("a", "int"), name="Rec", namespace="two")))
    aliased = json.dumps({"type": "record", "name": "New", "aliases": ["Rec"], "fields": [f("a", "int")]})
    resolve_avro(one, parsed(aliased))


def test_an_enum_default_reads_symbols_the_reader_lacks() -> None:
    writer = parsed(avro(f("e", {**ENUM, "symbols": ["RED", "GREEN", "BLUE"]})))
    resolve_avro(writer, parsed(avro(f("e", {**ENUM, "default": "RED"}))))
    with pytest.raises(Incompatible, match="lacks the symbol"):
        resolve_avro(writer, parsed(avro(f("e", ENUM))))


PROTO_BASE = proto("int32 a = 1;\nstring b = 2;")
P2_BASE = proto("optional int32 a = 1;\nrequired string b = 2;", syntax="proto2")
NESTED = "message In { int32 x = 1; }\nenum E { E0 = 0; E1 = 1; }\n"

PROTO_COMPATIBLE = [
    pytest.param(PROTO_BASE, PROTO_BASE, id="same"),
    pytest.param(PROTO_BASE, proto("int32 a = 1;\nstring b = 2;\noptional bool c = 3;"), id="optional-added"),
    pytest.param(PROTO_BASE, proto("int32 a = 1;\nstring b = 2;\nbool c = 3;"), id="implicit-presence-added"),
    pytest.param(PROTO_BASE, proto("int32 a = 1;"), id="implicit-presence-removed"),
    pytest.param(P2_BASE, proto("required string b = 2;", syntax="proto2"), id="proto2-optional-removed"),
    pytest.param(
        PROTO_BASE,
        proto("int32 a = 1;\nstring b = 2;\noneof o { string c = 3; int32 d = 4; }"),
        id="oneof-added",
    ),
    pytest.param(PROTO_BASE, proto("int32 a = 1;\nstring b = 2;", package="q"), id="package-changed"),
    pytest.param(
        proto(NESTED + "In in = 1;"), proto(NESTED + "In in = 1;\nreserved 2;"), id="reserved-added"
    ),
    pytest.param(
        proto(NESTED + "In in = 1;"),
        proto("message In { int32 x = 1; optional string y = 2; }\nIn in = 1;"),
        id="nested-optional-added",
    ),
]


@pytest.mark.parametrize(("old", "new"), PROTO_COMPATIBLE)
def test_compatible_proto_revisions_pass_both_ways(old: str, new: str) -> None:
    check(SchemaType.PROTOCOL_BUFFER, old, new)
    check(SchemaType.PROTOCOL_BUFFER, new, old)


PROTO_INCOMPATIBLE = [
    pytest.param(
        P2_BASE, proto("optional int32 a = 1;", syntax="proto2"), "b", "required", id="required-removed"
    ),
    pytest.param(
        P2_BASE,
        proto("optional int32 a = 1;\nrequired string b = 2;\nrequired int32 c = 3;", syntax="proto2"),
        "c",
        "required",
        id="required-added",
    ),
    pytest.param(
        PROTO_BASE,
        proto("int32 a = 1;\nstring b = 2;\nrepeated int32 c = 3;"),
        "c",
        "repeated",
        id="repeated-added",
    ),
    pytest.param(
        proto("int32 a = 1;\nmap<string, int32> m = 2;"), proto("int32 a = 1;"), "m", "map", id="map-removed"
    ),
    pytest.param(PROTO_BASE, proto("int64 a = 1;\nstring b = 2;"), "a", "type", id="retyped"),
    pytest.param(PROTO_BASE, proto("int32 a = 3;\nstring b = 2;"), "a", "number", id="renumbered"),
    pytest.param(PROTO_BASE, proto("int32 z = 1;\nstring b = 2;"), "a|z", "name", id="renamed"),
    pytest.param(PROTO_BASE, proto("repeated int32 a = 1;\nstring b = 2;"), "a", "label", id="made-repeated"),
    pytest.param(
        PROTO_BASE, proto("optional int32 a = 1;\nstring b = 2;"), "a", "presence", id="made-optional"
    ),
    pytest.param(
        PROTO_BASE, proto("oneof o { int32 a = 1; }\nstring b = 2;"), "a", "oneof", id="moved-into-oneof"
    ),
    pytest.param(
        proto("optional int32 a = 1 [default = 3];", syntax="proto2"),
        proto("optional int32 a = 1 [default = 4];", syntax="proto2"),
        "a",
        "default",
        id="proto2-default",
    ),
    pytest.param(
        proto(NESTED + "E e = 1;"),
        proto("enum E { E0 = 0; E1 = 1; E2 = 2; }\nE e = 1;"),
        "e",
        "E2=2",
        id="enum-value-added",
    ),
    pytest.param(
        proto(NESTED + "E e = 1;"),
        proto("enum E { E0 = 0; }\nE e = 1;"),
        "e",
        "E1=1",
        id="enum-value-removed",
    ),
    pytest.param(
        proto(NESTED + "In in = 1;"),
        proto("message In { string x = 1; }\nIn in = 1;"),
        "in.x",
        "type",
        id="nested-field-retyped",
    ),
    pytest.param(
        proto(NESTED + "In in = 1;"),
        proto("message Out { int32 x = 1; }\nOut in = 1;"),
        "in",
        "type",
        id="message-type-renamed",
    ),
]


@pytest.mark.parametrize(("old", "new", "where", "why"), PROTO_INCOMPATIBLE)
def test_incompatible_proto_revisions_are_refused_both_ways(old: str, new: str, where: str, why: str) -> None:
    for one, other in ((old, new), (new, old)):
        message = refused(SchemaType.PROTOCOL_BUFFER, one, other)
        assert any(f": {w}: " in message for w in where.split("|")) and why in message, message


def test_a_recursive_message_is_compared_once() -> None:
    old = proto("message Node { Node next = 1; int32 v = 2; }\nNode root = 1;")
    new = proto("message Node { Node next = 1; int32 v = 2; optional string tag = 3; }\nNode root = 1;")
    check(SchemaType.PROTOCOL_BUFFER, old, new)
    retyped = proto("message Node { Node next = 1; int64 v = 2; }\nNode root = 1;")
    assert "root.v" in refused(SchemaType.PROTOCOL_BUFFER, old, retyped)


def test_the_type_cannot_change() -> None:
    with pytest.raises(SchemaError, match="type cannot change from AVRO to PROTOCOL_BUFFER"):
        check_compatible(compiled(SchemaType.AVRO, BASE), compiled(SchemaType.PROTOCOL_BUFFER, PROTO_BASE))
