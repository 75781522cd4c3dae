"""Whether a new revision of a schema may follow an earlier one, as Pub/Sub's CommitSchema
decides ("Commit a schema revision"):

- Protocol Buffer: "you can add or remove optional fields", not others, and "you cannot edit
  existing fields". The root messages are compared field by field, by number (`_proto_*`).
- Avro: the new revision must follow Avro's schema resolution rules "as if it were both the
  reader and writer schema": data written with the old must be readable with the new, and data
  written with the new readable with the old (`_resolve`, both ways).

fastavro has no public compatibility checker (its `_read_py.match_schemas` is private and
matches only the top of a schema while reading), so the rules of the Avro 1.11 specification's
"Schema Resolution" section are written out here. Pure: no I/O; callers on the event loop run
`check_compatible` in a worker thread with the compiling.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf import descriptor_pb2

from gateway.schemas.avro import AvroSchema
from gateway.schemas.avro_rules import NAMED, PRIMITIVES
from gateway.schemas.model import CompiledSchema, SchemaError
from gateway.schemas.protobuf import ProtoSchema

# Avro 1.11, "Schema Resolution": what data written as the key may be read as.
PROMOTIONS = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


class Incompatible(Exception):
    """One incompatibility: where (a path in the schema) and why."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where or 'the schema'}: {why}")
        self.where = where
        self.why = why


def check_compatible(old: CompiledSchema, new: CompiledSchema) -> None:
    """Return if `new` may be committed after `old`; else raise `SchemaError` naming the first
    incompatibility found (field path and why)."""
    try:
        if isinstance(old, AvroSchema) and isinstance(new, AvroSchema):
            _avro_both_ways(old.parsed, new.parsed)
        elif isinstance(old, ProtoSchema) and isinstance(new, ProtoSchema):
            _proto_compatible(old, new)
        else:
            raise Incompatible("", f"the type cannot change from {old.type.name} to {new.type.name}")
    except Incompatible as exc:
        raise SchemaError(f"The schema revision is not compatible with the previous one: {exc}.") from None
    except RecursionError:
        raise SchemaError(
            "The schema revision is nested too deeply to compare with the previous one."
        ) from None


# -- Avro ------------------------------------------------------------------------------------


def _avro_both_ways(old: Any, new: Any) -> None:
    resolve_avro(old, new, "reading data written with the previous revision with the new one")
    resolve_avro(new, old, "reading data written with the new revision with the previous one")


def resolve_avro(writer: Any, reader: Any, direction: str = "") -> None:
    """Raise `Incompatible` unless data written with the parsed schema `writer` can be read
    with the parsed schema `reader` (one direction of the check)."""
    try:
        _Resolver(writer, reader).resolve(writer, reader, "")
    except Incompatible as exc:
        if direction:
            raise Incompatible(exc.where, f"{exc.why} ({direction})") from None
        raise


class _Resolver:
    def __init__(self, writer: Any, reader: Any) -> None:
        self._w_names = dict(_named(writer))
        self._r_names = dict(_named(reader))
        self._done: set[tuple[str, str]] = set()  # record pairs resolved (or being resolved)

    def resolve(self, writer: Any, reader: Any, path: str) -> None:
        w, r = self._w(writer), self._r(reader)
        if isinstance(w, list):  # each branch the writer may write must be readable
            for branch in w:
                self.resolve(branch, r, f"{path}<{_label(self._w(branch))}>")
            return
        if isinstance(r, list):  # the first reader branch that matches is used
            for branch in r:
                if self._matches(w, self._r(branch)):
                    self.resolve(w, branch, path)
                    return
            raise Incompatible(path, f"the union {_labels(r)} has no branch that reads {_label(w)}")
        if not self._matches(w, r):
            raise Incompatible(path, f"{_describe(w)} cannot be read as {_describe(r)}")
        kind = _kind(w)
        if kind == "array":
            self.resolve(w["items"], r["items"], f"{path}[]")
        elif kind == "map":
            self.resolve(w["values"], r["values"], f"{path}{{}}")
        elif kind == "enum":
            _enum(w, r, path)
        elif kind in ("record", "error"):
            self._record(w, r, path)

    def _record(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        pair = (w["name"], r["name"])
        if pair in self._done:  # a recursive type: this pair is already being resolved
            return
        self._done.add(pair)
        written = {f["name"]: f for f in w["fields"]}
        for field in r["fields"]:
            where = f"{path}.{field['name']}" if path else field["name"]
            if field["name"] in written:
                self.resolve(written[field["name"]]["type"], field["type"], where)
            elif "default" not in field:
                raise Incompatible(
                    where, f"the field is not in the writer's record {_short(w['name'])} and has no default"
                )

    def _matches(self, w: Any, r: Any) -> bool:
        """The specification's "match": same kind (or a promotion), same name for named types,
        same size for fixed; not yet the contents."""
        if isinstance(w, list) or isinstance(r, list):
            return True
        wk, rk = _kind(w), _kind(r)
        if wk in PRIMITIVES and rk in PRIMITIVES:
            return wk == rk or rk in PROMOTIONS.get(wk, ())
        if wk != rk and {wk, rk} != {"record", "error"}:
            return False
        if wk in NAMED:
            names = {_short(r["name"]), *(_short(a) for a in r.get("aliases", ()))}
            if _short(w["name"]) not in names:
                return False
            return wk != "fixed" or w["size"] == r["size"]
        return True

    def _w(self, schema: Any) -> Any:
        return self._w_names.get(schema, schema) if isinstance(schema, str) else schema

    def _r(self, schema: Any) -> Any:
        return self._r_names.get(schema, schema) if isinstance(schema, str) else schema


def _enum(w: dict[str, Any], r: dict[str, Any], path: str) -> None:
    if "default" in r:  # symbols the reader lacks read as its default
        return
    missing = [s for s in w["symbols"] if s not in r["symbols"]]
    if missing:
        raise Incompatible(
            path or _short(r["name"]),
            f"the enum {_short(r['name'])} lacks the symbol(s) {', '.join(missing)} and has no default",
        )


def _named(schema: Any) -> Iterator[tuple[str, Any]]:
    """Every named type of a parsed schema by full name (fastavro writes each out once)."""
    if isinstance(schema, list):
        for branch in schema:
            yield from _named(branch)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in NAMED:
            yield schema["name"], schema
        if kind in ("record", "error"):
            for field in schema["fields"]:
                yield from _named(field["type"])
        elif kind == "array":
            yield from _named(schema["items"])
        elif kind == "map":
            yield from _named(schema["values"])


def _kind(schema: Any) -> str:
    return schema if isinstance(schema, str) else str(schema["type"])


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _label(schema: Any) -> str:
    if isinstance(schema, dict) and schema.get("type") in NAMED:
        return _short(schema["name"])
    return "union" if isinstance(schema, list) else _kind(schema)


def _labels(union: list[Any]) -> str:
    return "[" + ", ".join(_label(b) for b in union) + "]"


def _describe(schema: Any) -> str:
    kind = _kind(schema)
    if kind in NAMED:
        size = f" of {schema['size']} bytes" if kind == "fixed" else ""
        return f"{kind} {_short(schema['name'])}{size}"
    return kind


# -- Protocol Buffers ------------------------------------------------------------------------

_FieldProto = descriptor_pb2.FieldDescriptorProto
_Message = descriptor_pb2.DescriptorProto


class _Types:
    """The messages and enums of one compiled definition by name, the package left out (so a
    new package alone changes no field's type)."""

    def __init__(self, schema: ProtoSchema) -> None:
        (file,) = descriptor_pb2.FileDescriptorSet.FromString(schema.descriptor_set).file
        self.prefix = f".{file.package}." if file.package else "."
        self.messages: dict[str, _Message] = {}
        self.enums: dict[str, descriptor_pb2.EnumDescriptorProto] = {}
        for message in file.message_type:
            self._add(message, "")
        self.root = file.message_type[0].name

    def _add(self, message: _Message, outer: str) -> None:
        name = f"{outer}{message.name}"
        self.messages[name] = message
        for enum in message.enum_type:
            self.enums[f"{name}.{enum.name}"] = enum
        for nested in message.nested_type:
            self._add(nested, f"{name}.")

    def name(self, field: _FieldProto) -> str:
        return field.type_name.removeprefix(self.prefix)


def _proto_compatible(old: ProtoSchema, new: ProtoSchema) -> None:
    before, after = _Types(old), _Types(new)
    _message(before, after, before.root, after.root, "", set())


def _message(before: _Types, after: _Types, old_name: str, new_name: str, path: str, seen: set[str]) -> None:
    if old_name in seen:
        return
    seen.add(old_name)
    old, new = before.messages[old_name], after.messages[new_name]
    old_fields = {f.number: f for f in old.field}
    new_fields = {f.number: f for f in new.field}
    new_numbers = {f.name: f.number for f in new.field}
    for number, field in old_fields.items():
        where = f"{path}{field.name}"
        moved = new_numbers.get(field.name)
        if moved is not None and moved != number:
            raise Incompatible(where, f"the field's number cannot change (from {number} to {moved})")
        if number not in new_fields:
            _may_come_and_go(field, where, "removed")
            continue
        other = new_fields[number]
        was, now = _shape(before, old, field), _shape(after, new, other)
        for what in was:
            if was[what] != now[what]:
                raise Incompatible(
                    where,
                    f"an existing field (number {number}) cannot be edited: "
                    f"its {what} changed from {was[what]!r} to {now[what]!r}",
                )
        if field.type == _FieldProto.TYPE_MESSAGE or field.type == _FieldProto.TYPE_GROUP:
            _message(before, after, before.name(field), after.name(other), f"{where}.", seen)
        elif field.type == _FieldProto.TYPE_ENUM:
            _enum_values(before.enums[before.name(field)], after.enums[after.name(other)], where)
    for number, field in new_fields.items():
        if number not in old_fields:
            _may_come_and_go(field, f"{path}{field.name}", "added")


def _may_come_and_go(field: _FieldProto, where: str, done: str) -> None:
    """Only optional fields may be added or removed: proto2 `optional`, proto3 `optional`, and
    proto3 singular fields (implicit presence: absent, they read as their default, as optional
    ones do), oneof members included. Not `required`, `repeated` or map fields."""
    if field.label != _FieldProto.LABEL_OPTIONAL:
        kind = "required" if field.label == _FieldProto.LABEL_REQUIRED else "repeated (or map)"
        raise Incompatible(
            where, f"a {kind} field (number {field.number}) cannot be {done}; only optional ones"
        )


def _shape(types: _Types, message: _Message, field: _FieldProto) -> dict[str, object]:
    """What a kept field (same number) must keep: editing any of it is refused."""
    kind = _FieldProto.Type.Name(field.type).removeprefix("TYPE_").lower()
    in_oneof = field.HasField("oneof_index") and not field.proto3_optional
    return {
        "name": field.name,
        "type": f"{kind} {types.name(field)}" if field.type_name else kind,
        "label": _FieldProto.Label.Name(field.label).removeprefix("LABEL_").lower(),
        "explicit presence": field.proto3_optional,
        "oneof": message.oneof_decl[field.oneof_index].name if in_oneof else "",
        "default": field.default_value,
    }


def _enum_values(
    old: descriptor_pb2.EnumDescriptorProto, new: descriptor_pb2.EnumDescriptorProto, where: str
) -> None:
    was = sorted((v.number, v.name) for v in old.value)
    now = sorted((v.number, v.name) for v in new.value)
    if was != now:
        gone = [f"{n}={v}" for v, n in was if (v, n) not in now]
        came = [f"{n}={v}" for v, n in now if (v, n) not in was]
        raise Incompatible(
            where,
            f"the values of enum {old.name} cannot be edited (removed: {', '.join(gone) or 'none'}; "
            f"added: {', '.join(came) or 'none'})",
        )
