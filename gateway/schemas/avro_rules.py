"""What the Avro specification requires of a definition that fastavro's `parse_schema` lets
through, and the mismatch both encodings' checkers raise.

Measured on fastavro 1.13: `parse_schema` takes a record without `fields`, a record with two
fields of one name, names such as `1R` or `a-b`, a union of two `null`s and a union inside a
union; the specification (and Avro's Java implementation) refuses each. Avro 1.11 is what
Pub/Sub documents.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.schemas.model import SchemaError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Mismatch(Exception):
    """A message that does not match its schema: `reason`, and the `path` to the value, built
    innermost first while the checkers unwind (so that a valid message pays nothing for it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    def describe(self) -> str:
        where = "".join(reversed(self.path)).removeprefix(".")
        return f"{where}: {self.reason}" if where else self.reason


def _fail(what: str, problem: str) -> SchemaError:
    return SchemaError(f"Invalid Avro schema: {what} {problem}.")


def _check_name(name: object, what: str, dotted: bool) -> None:
    if not isinstance(name, str):
        raise _fail(what, "must be a string")
    parts = name.split(".") if dotted else [name]
    if not all(_NAME.fullmatch(part) for part in parts):
        raise _fail(f"{what} {name!r}", "must be made of [A-Za-z_][A-Za-z0-9_]* names")


def check_definition(schema: Any) -> None:
    """Walk the definition as JSON gave it; raise `SchemaError` at the first thing the
    specification does not allow and fastavro would take."""
    if isinstance(schema, list):
        for branch in schema:
            if isinstance(branch, list):
                raise _fail("a union", "may not contain a union directly")
            check_definition(branch)
        return
    if not isinstance(schema, dict):
        return  # a type name, or something fastavro refuses itself
    kind = schema.get("type")
    if not isinstance(kind, str):
        raise _fail("a schema object", 'needs a "type" that is a type name')
    if kind in NAMED:
        _check_name(schema.get("name"), f"the name of a {kind}", dotted=True)
        if schema.get("namespace") not in (None, ""):
            _check_name(schema["namespace"], "a namespace", dotted=True)
    if kind in ("record", "error"):
        _check_fields(schema)
    elif kind == "enum":
        symbols = schema.get("symbols")
        if not isinstance(symbols, list):
            raise _fail(f"enum {schema['name']!r}", 'needs "symbols", a list')
        for symbol in symbols:
            _check_name(symbol, f"a symbol of enum {schema['name']!r}", dotted=False)
    elif kind == "fixed":
        size = schema.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise _fail(f"fixed {schema['name']!r}", 'needs "size", a whole number of bytes')
    elif kind in ("array", "map"):
        key = "items" if kind == "array" else "values"
        if key not in schema:
            raise _fail(f"an {kind}" if kind == "array" else "a map", f'needs "{key}"')
        check_definition(schema[key])


def _check_fields(schema: dict[str, Any]) -> None:
    record = schema["name"]
    fields = schema.get("fields")
    if not isinstance(fields, list):
        raise _fail(f"record {record!r}", 'needs "fields", a list')
    seen: set[str] = set()
    for field in fields:
        if not isinstance(field, dict) or "type" not in field:
            raise _fail(f"a field of record {record!r}", 'must be an object with "name" and "type"')
        name = field.get("name")
        _check_name(name, f"a field name of record {record!r}", dotted=False)
        assert isinstance(name, str)
        if name in seen:
            raise _fail(f"record {record!r}", f"has two fields named {name!r}")
        seen.add(name)
        check_definition(field["type"])


def branch_label(branch: Any) -> str:
    """What a union branch is told apart by: a named type's full name, else its type."""
    if isinstance(branch, str):
        return branch
    if isinstance(branch, dict):
        kind = branch["type"]
        return str(branch["name"]) if kind in NAMED else str(kind)
    return "union"


def check_unions(schema: Any) -> None:
    """No union holds two branches of one unnamed type, or two references to one named type.
    Runs on fastavro's parsed form, where every name is a full name and a named type is written
    out once (then referred to by name), so each is walked once."""
    if isinstance(schema, list):
        labels = [branch_label(branch) for branch in schema]
        for label in labels:
            if labels.count(label) > 1:
                raise _fail("a union", f"may hold only one {label!r}")
        for branch in schema:
            check_unions(branch)
    elif isinstance(schema, dict):
        kind = schema["type"]
        if kind in ("record", "error"):
            for field in schema["fields"]:
                check_unions(field["type"])
        elif kind == "array":
            check_unions(schema["items"])
        elif kind == "map":
            check_unions(schema["values"])
