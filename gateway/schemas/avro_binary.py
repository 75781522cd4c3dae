"""Avro's binary encoding, checked without decoding: a schema becomes a tree of small functions
that step over one value each and return where the next one starts.

Why not fastavro's `schemaless_reader`, which the definitions are parsed with: measured on
fastavro 1.13, its compiled reader crashes the process (SIGSEGV) on a recursive schema's message
nested ~10,000 deep (10 KB of data); spends 6 s and 1 GB on a 5-byte array of 2**27 nulls, and
never ends for a 10-byte one; and accepts negative union and enum indexes (read from the end of
the list) and ints past 32 bits. It also builds every value, which a validator throws away. This
walker refuses what is invalid, steps over items that take no bytes without visiting them one by
one, builds no values, and takes about 1.15x the time of fastavro's read of a 1 KiB record
(benchmarks/schema_validation.py). `AvroSchema.validate` asks the checker `avro_binary_gen`
generates first (several times faster, and accepting exactly what this walker accepts) and walks
only the messages it refuses, to say what is wrong and where.

Rules (the Avro 1.11 specification): ints and longs are zig-zag varints of at most 5 and 10
bytes, in range; a boolean is the byte 0 or 1; strings are UTF-8; union and enum indexes are in
range; a block of an array or map with a negative count gives its size in bytes, which must be
right; nothing may follow the value. Logical types are checked as their underlying type, as
Avro's own readers do without conversions registered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gateway.schemas.avro_rules import PRIMITIVES, Mismatch

# A step reads one value of `data` at `pos` and returns the position after it.
Step = Callable[[bytes, int], int]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _varint(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """A zig-zag varint at `pos`: (value, position after it)."""
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result, shift, end = byte & 0x7F, 7, pos + max_bytes
    pos += 1
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise Mismatch(f"a varint longer than {max_bytes} bytes")


def _null(data: bytes, pos: int) -> int:
    return pos


def _boolean(data: bytes, pos: int) -> int:
    if data[pos] > 1:
        raise Mismatch(f"a boolean must be the byte 0 or 1, not {data[pos]}")
    return pos + 1


def _int(data: bytes, pos: int) -> int:
    if data[pos] < 0x80:  # one byte: always in range (the common case, inlined)
        return pos + 1
    value, pos = _varint(data, pos, 5)
    if not _INT_MIN <= value <= _INT_MAX:
        raise Mismatch(f"{value} is out of the range of an int (32 bits)")
    return pos


def _long(data: bytes, pos: int) -> int:
    if data[pos] < 0x80:
        return pos + 1
    value, pos = _varint(data, pos, 10)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise Mismatch(f"{value} is out of the range of a long (64 bits)")
    return pos


def _skip(data: bytes, pos: int, size: int) -> int:
    end = pos + size
    if end > len(data):
        raise IndexError
    return end


def _float(data: bytes, pos: int) -> int:
    return _skip(data, pos, 4)


def _double(data: bytes, pos: int) -> int:
    return _skip(data, pos, 8)


def _length(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80 and not byte & 1:  # one byte, not negative
        return byte >> 1, pos + 1
    size, pos = _varint(data, pos, 10)
    if size < 0:
        raise Mismatch(f"a negative length ({size})")
    return size, pos


def _bytes(data: bytes, pos: int) -> int:
    size, pos = _length(data, pos)
    return _skip(data, pos, size)


def _string(data: bytes, pos: int) -> int:
    size, pos = _length(data, pos)
    end = _skip(data, pos, size)
    try:
        data[pos:end].decode("utf-8")
    except UnicodeDecodeError:
        raise Mismatch("a string that is not valid UTF-8") from None
    return end


_PRIMITIVE_STEPS: dict[str, Step] = {
    "null": _null,
    "boolean": _boolean,
    "int": _int,
    "long": _long,
    "float": _float,
    "double": _double,
    "bytes": _bytes,
    "string": _string,
}
assert set(_PRIMITIVE_STEPS) == PRIMITIVES


class _Builder:
    """Turns a schema parsed by fastavro (named types written out once, then referred to by
    full name) into steps. A named type is built once; a reference to one still being built (a
    recursive type) goes through a forwarding step that looks it up when called."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self._named = named
        self._built: dict[str, Step] = {}
        self._zero_width: dict[str, bool] = {}

    def build(self, schema: Any) -> tuple[Step, bool]:
        """(The step for `schema`, whether its values take no bytes at all.)"""
        if isinstance(schema, str):
            if schema in _PRIMITIVE_STEPS:
                return _PRIMITIVE_STEPS[schema], schema == "null"
            if schema in self._built:
                return self._built[schema], self._zero_width.get(schema, False)
            return self.build(self._named[schema])
        if isinstance(schema, list):
            return self._union(schema), False
        kind = schema["type"]
        if kind in ("record", "error"):
            return self._record(schema)
        if kind == "enum":
            return self._named_step(schema["name"], self._enum(len(schema["symbols"]))), False
        if kind == "fixed":
            size = schema["size"]
            self._zero_width[schema["name"]] = size == 0
            return self._named_step(schema["name"], lambda data, pos: _skip(data, pos, size)), size == 0
        if kind == "array":
            item, empty = self.build(schema["items"])
            return self._blocks(item, empty, keyed=False), False
        if kind == "map":
            value, _ = self.build(schema["values"])
            return self._blocks(value, False, keyed=True), False
        return self.build(kind)  # a primitive written as an object, e.g. with a logicalType

    def _named_step(self, name: str, step: Step) -> Step:
        self._built[name] = step
        return step

    def _record(self, schema: Mapping[str, Any]) -> tuple[Step, bool]:
        name = schema["name"]
        steps: list[Step] = []
        self._built[name] = lambda data, pos: steps[0](data, pos)  # until it is built
        fields = [(field["name"], *self.build(field["type"])) for field in schema["fields"]]
        pairs = tuple((field_name, step) for field_name, step, _ in fields)

        def record(data: bytes, pos: int) -> int:
            for field_name, step in pairs:
                try:
                    pos = step(data, pos)
                except Mismatch as exc:
                    exc.path.append(f".{field_name}")
                    raise
            return pos

        steps.append(record)
        self._built[name] = record
        self._zero_width[name] = all(empty for _, _, empty in fields)
        return record, self._zero_width[name]

    def _union(self, schema: list[Any]) -> Step:
        branches = tuple(self.build(branch)[0] for branch in schema)
        count = len(branches)

        def union(data: bytes, pos: int) -> int:
            index, pos = _varint(data, pos, 10)
            if not 0 <= index < count:
                raise Mismatch(f"union branch {index} does not exist (the union has {count})")
            return branches[index](data, pos)

        return union

    @staticmethod
    def _enum(count: int) -> Step:
        def enum(data: bytes, pos: int) -> int:
            index, pos = _varint(data, pos, 10)
            if not 0 <= index < count:
                raise Mismatch(f"enum symbol {index} does not exist (the enum has {count})")
            return pos

        return enum

    @staticmethod
    def _blocks(item: Step, empty: bool, keyed: bool) -> Step:
        """Arrays and maps: blocks of `count` items up to a block of 0. Items that take no bytes
        (null, an empty record) are not stepped over one by one: a 10-byte message may declare
        2**62 of them."""

        def blocks(data: bytes, pos: int) -> int:
            done = 0
            while True:
                count, pos = _varint(data, pos, 10)
                if count == 0:
                    return pos
                size = -1
                if count < 0:
                    count = -count
                    size, pos = _length(data, pos)
                start = pos
                if keyed or not empty:
                    for offset in range(count):
                        try:
                            if keyed:
                                pos = _string(data, pos)
                            pos = item(data, pos)
                        except Mismatch as exc:
                            exc.path.append(f"[{done + offset}]")
                            raise
                done += count
                if size >= 0 and pos - start != size:
                    raise Mismatch(f"a block says it holds {size} bytes but holds {pos - start}")

        return blocks


def compile_binary(schema: Any, named: Mapping[str, Any]) -> Step:
    """The step for a whole message of `schema` (as fastavro's `parse_schema` returns it, with
    its named types in `named`)."""
    return _Builder(named).build(schema)[0]


def check_binary(step: Step, data: bytes) -> None:
    """Raise `Mismatch` unless `data` is exactly one value of the schema `step` was built for."""
    try:
        end = step(data, 0)
    except IndexError:
        raise Mismatch("the data ends in the middle of a value") from None
    if end != len(data):
        extra = len(data) - end
        raise Mismatch(f"{extra} {'byte follows' if extra == 1 else 'bytes follow'} the end of the value")
