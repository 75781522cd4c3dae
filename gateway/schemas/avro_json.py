"""Avro's JSON encoding, checked on the value `json.loads` gives: a schema becomes a tree of
small functions, one per schema node, each checking one value.

The encoding is the one fastavro's `json_writer` writes and `json_reader` reads (the Avro
specification's): a union value is `null`, or an object of one member named by the branch
(the full name of a named type, else the type: `{"int": 1}`, `{"ns.Rec": {...}}`); bytes and
fixed are strings whose characters are the bytes (U+0000 to U+00FF); an enum is its symbol.

Where fastavro's reader is lax, this is strict, since validation exists to refuse: a value of
the wrong JSON type (fastavro returns it as it is), an int past 32 bits, a union branch that
does not name a branch, and a record member no field has (Avro's Java decoder refuses these
too). A missing field with a default is taken, as both readers take it; one without is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from gateway.schemas.avro_rules import PRIMITIVES, Mismatch, branch_label

Check = Callable[[Any], None]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _expected(what: str, value: Any) -> Mismatch:
    return Mismatch(f"expected {what}, got {_json_type(value)}")


def _null(value: Any) -> None:
    if value is not None:
        raise _expected("null", value)


def _boolean(value: Any) -> None:
    if not isinstance(value, bool):
        raise _expected("a boolean", value)


def _integer(value: Any, low: int, high: int, what: str, bits: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _expected(f"{what} (a whole number)", value)
    if not low <= value <= high:
        raise Mismatch(f"{value} is out of the range of {what} ({bits} bits)")


def _int(value: Any) -> None:
    _integer(value, _INT_MIN, _INT_MAX, "an int", 32)


def _long(value: Any) -> None:
    _integer(value, _LONG_MIN, _LONG_MAX, "a long", 64)


def _number(value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _expected("a number", value)


def _latin1(value: Any, what: str) -> int:
    """The length of a bytes value written as a string of code points U+0000..U+00FF."""
    if not isinstance(value, str):
        raise _expected(f"{what} (a string of characters U+0000 to U+00FF)", value)
    try:
        return len(value.encode("latin-1"))
    except UnicodeEncodeError:
        raise Mismatch(f"{what} may hold only characters U+0000 to U+00FF") from None


def _bytes(value: Any) -> None:
    _latin1(value, "bytes")


def _string(value: Any) -> None:
    if not isinstance(value, str):
        raise _expected("a string", value)


_PRIMITIVE_CHECKS: dict[str, Check] = {
    "null": _null,
    "boolean": _boolean,
    "int": _int,
    "long": _long,
    "float": _number,
    "double": _number,
    "bytes": _bytes,
    "string": _string,
}
assert set(_PRIMITIVE_CHECKS) == PRIMITIVES


def _in_range(low: int, high: int) -> Callable[[Collection[int]], bool]:
    return lambda items: not items or (min(items) >= low and max(items) <= high)


def _latin1_all(items: Collection[str]) -> bool:
    try:
        "".join(items).encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


# Arrays and maps of a primitive are first checked whole, in C: the exact types of their items
# (json.loads makes nothing else: no subclasses, and True is a bool, not an int), then what
# their values must also be. 120 doubles take ~2 us so, ~15 us item by item. Only a collection
# that fails is walked item by item, which says what is wrong and where.
_WHOLE: dict[Check, tuple[frozenset[type], Callable[[Any], bool] | None]] = {
    _null: (frozenset({type(None)}), None),
    _boolean: (frozenset({bool}), None),
    _int: (frozenset({int}), _in_range(_INT_MIN, _INT_MAX)),
    _long: (frozenset({int}), _in_range(_LONG_MIN, _LONG_MAX)),
    _number: (frozenset({int, float}), None),
    _bytes: (frozenset({str}), _latin1_all),
    _string: (frozenset({str}), None),
}


class _Builder:
    """Like avro_binary's: named types built once, recursive references forwarded."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self._named = named
        self._built: dict[str, Check] = {}

    def build(self, schema: Any) -> Check:
        if isinstance(schema, str):
            if schema in _PRIMITIVE_CHECKS:
                return _PRIMITIVE_CHECKS[schema]
            return self._built[schema] if schema in self._built else self.build(self._named[schema])
        if isinstance(schema, list):
            return self._union(schema)
        kind = schema["type"]
        if kind in ("record", "error"):
            return self._record(schema)
        if kind == "enum":
            return self._enum(schema["name"], schema["symbols"])
        if kind == "fixed":
            return self._fixed(schema["name"], schema["size"])
        if kind == "array":
            return self._array(self.build(schema["items"]))
        if kind == "map":
            return self._map(self.build(schema["values"]))
        return self.build(kind)  # a primitive written as an object, e.g. with a logicalType

    def _record(self, schema: Mapping[str, Any]) -> Check:
        name = schema["name"]
        checks: list[Check] = []
        self._built[name] = lambda value: checks[0](value)  # until it is built
        fields = tuple(
            (field["name"], self.build(field["type"]), "default" in field) for field in schema["fields"]
        )
        known = frozenset(field_name for field_name, _, _ in fields)

        def record(value: Any) -> None:
            if not isinstance(value, dict):
                raise _expected(f"an object (record {name})", value)
            for field_name, check, has_default in fields:
                if field_name in value:
                    try:
                        check(value[field_name])
                    except Mismatch as exc:
                        exc.path.append(f".{field_name}")
                        raise
                elif not has_default:
                    raise Mismatch(f"record {name} needs field {field_name!r}, which has no default")
            if len(value) > len(known) or not known.issuperset(value):
                unknown = sorted(set(value) - known)
                raise Mismatch(f"record {name} has no field {unknown[0]!r}")

        checks.append(record)
        self._built[name] = record
        return record

    def _enum(self, name: str, symbols: list[str]) -> Check:
        allowed = frozenset(symbols)

        def enum(value: Any) -> None:
            if not isinstance(value, str):
                raise _expected(f"a symbol of enum {name}", value)
            if value not in allowed:
                raise Mismatch(f"{value!r} is not a symbol of enum {name}")

        self._built[name] = enum
        return enum

    def _fixed(self, name: str, size: int) -> Check:
        def fixed(value: Any) -> None:
            length = _latin1(value, f"fixed {name}")
            if length != size:
                raise Mismatch(f"fixed {name} holds {size} bytes, not {length}")

        self._built[name] = fixed
        return fixed

    @staticmethod
    def _array(item: Check) -> Check:
        types, also = _WHOLE.get(item, (None, None))

        def array(value: Any) -> None:
            if not isinstance(value, list):
                raise _expected("an array", value)
            if types is not None and types.issuperset(map(type, value)) and (also is None or also(value)):
                return
            for index, element in enumerate(value):
                try:
                    item(element)
                except Mismatch as exc:
                    exc.path.append(f"[{index}]")
                    raise

        return array

    @staticmethod
    def _map(item: Check) -> Check:
        types, also = _WHOLE.get(item, (None, None))

        def map_(value: Any) -> None:
            if not isinstance(value, dict):
                raise _expected("an object (a map)", value)
            values = value.values()
            if types is not None and types.issuperset(map(type, values)) and (also is None or also(values)):
                return
            for key, element in value.items():
                try:
                    item(element)
                except Mismatch as exc:
                    exc.path.append(f"[{key!r}]")
                    raise

        return map_

    def _union(self, schema: list[Any]) -> Check:
        branches = {branch_label(branch): self.build(branch) for branch in schema}
        nullable = "null" in branches
        names = ", ".join(branches)

        def union(value: Any) -> None:
            if value is None:
                if not nullable:
                    raise Mismatch(f"null is not a branch of the union [{names}]")
                return
            if not isinstance(value, dict) or len(value) != 1:
                raise Mismatch(f'a union value must be null or {{"<branch>": value}}, one of [{names}]')
            ((label, inner),) = value.items()
            check = branches.get(label)
            if check is None or label == "null":
                raise Mismatch(f"{label!r} is not a branch of the union [{names}]")
            try:
                check(inner)
            except Mismatch as exc:
                exc.path.append(f"<{label}>")
                raise

        return union


def compile_json(schema: Any, named: Mapping[str, Any]) -> Check:
    """The check for a whole message of `schema` (fastavro's parsed form, named types in `named`)."""
    return _Builder(named).build(schema)
