"""Avro's binary encoding checked fast: each schema becomes Python source, generated once and
compiled, that steps over a message in straight-line code. It answers yes or no; the walker of
`avro_binary` stays the statement of the rules and, when the answer is no, says what is wrong
and where (`AvroSchema.validate` runs it then). The two must accept exactly the same messages:
tests/unit/test_schemas_avro_fast.py draws schemas and inputs and compares them.

What makes it fast, measured on the publish benchmark's 1 KiB record (a string, a long, an array
of 120 doubles, an optional string): 12.6 us per message walked, 1.4 us generated.
- Values of a fixed width (null 0, float 4, double 8, fixed N bytes, records made only of those)
  are one bounds check; so are runs of such fields in a record, and an array block of them
  (`count * width` bytes): 120 doubles are one step, not 120.
- Primitives, enums and fixed are written inline, one-byte varints without a call; a record
  (named: it may be recursive) is a function; so is an array, map or union inside another one,
  so that no generated function nests more than one loop (Python allows 20 nested blocks).
- Nothing is allocated per value but the slice and the text a UTF-8 check decodes.

Safety: the source holds only names this module makes (`_r3`, `_a7`, locals) and integers
(sizes, counts) taken from the parsed schema through `int()`; no text of the definition reaches
it. Every read is bounded as the walker's are: a varint is at most 10 bytes, a length is checked
against the data before it is used, items that take no bytes are not stepped over one by one, and
depth is Python's recursion limit (one frame per record level; `RecursionError` is the caller's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gateway.schemas.avro_binary import _length, _varint
from gateway.schemas.avro_rules import PRIMITIVES, Mismatch

# A checker returns the position after the one value at the start of `data`; it raises
# IndexError, Mismatch or UnicodeDecodeError for data that is not one.
Checker = Callable[[bytes], int]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_WIDTHS = {"null": 0, "float": 4, "double": 8}
# Unions with more branches than this dispatch through a tuple of functions, not an if chain.
_INLINE_BRANCHES = 4
# CPython compiles source at ~10 us a line, holding the GIL through each `compile()`, and a
# function in time that grows faster than its length: a record of 6,556 fields (what a 300 KiB
# definition holds) made 64,000 lines, 1.5 s as one function. So a record's fields are split into
# functions of at most _FIELDS_PER_FUNCTION, each compiled on its own (a few ms), and a schema
# whose checker would pass _MAX_LINES (~0.2 s to compile) keeps the walker alone.
_FIELDS_PER_FUNCTION = 32
_MAX_LINES = 20_000


class _TooLarge(Exception):
    pass


_NAMED = frozenset({"record", "error", "enum", "fixed"})
_COMPOUND = _NAMED | {"array", "map"}


def _int_tail(data: bytes, pos: int) -> int:
    value, pos = _varint(data, pos, 5)
    if not _INT_MIN <= value <= _INT_MAX:
        raise Mismatch("int out of range")
    return pos


def _long_tail(data: bytes, pos: int) -> int:
    value, pos = _varint(data, pos, 10)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise Mismatch("long out of range")
    return pos


def _index(data: bytes, pos: int, count: int) -> tuple[int, int]:
    """A union or enum index that is not one byte of a valid index."""
    index, pos = _varint(data, pos, 10)
    if not 0 <= index < count:
        raise Mismatch("index out of range")
    return index, pos


def _block(data: bytes, pos: int) -> tuple[int, int, int]:
    """An array or map block's header that is not one byte of a positive count: (count, byte size
    or -1, position after it); a count of 0 ends the blocks."""
    count, pos = _varint(data, pos, 10)
    if count >= 0:
        return count, -1, pos
    size, pos = _length(data, pos)
    return -count, size, pos


_HELPERS: dict[str, Any] = {
    "_M": Mismatch,
    "_int_tail": _int_tail,
    "_long_tail": _long_tail,
    "_index": _index,
    "_block": _block,
    "_length": _length,
}


class _Generator:
    """Source for a schema parsed by fastavro (named types written out once, then referred to by
    full name in `named`)."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self._named = named
        self._functions: dict[tuple[str, object], str] = {}  # _key(node) -> its function's name
        self.units: list[str] = []  # the source of each function
        self.tables: list[str] = []  # union dispatch tuples, defined after every function
        self._widths: dict[tuple[str, object], int | None] = {}
        self._count = 0
        self._lines = 0

    def _resolve(self, schema: Any) -> Any:
        """A node that is not a name: primitives as their name, named types as their object."""
        while True:
            if isinstance(schema, str):
                if schema in PRIMITIVES:
                    return schema
                schema = self._named[schema]
            elif isinstance(schema, list) or schema["type"] in _COMPOUND:
                return schema
            else:
                schema = schema["type"]  # a primitive written as an object, e.g. with a logicalType

    @staticmethod
    def _key(node: Any) -> tuple[str, object]:
        """What a node is remembered by: its full name if it has one (fastavro writes a named
        type out once and refers to it by name), else its identity."""
        if isinstance(node, dict) and node["type"] in _NAMED:
            return ("name", node["name"])
        return ("node", id(node))

    def width(self, schema: Any) -> int | None:
        """The bytes every value of `schema` takes, if that is one number."""
        node = self._resolve(schema)
        if isinstance(node, str):
            return _WIDTHS.get(node)
        if isinstance(node, list):
            return None
        key = self._key(node)
        if key in self._widths:
            return self._widths[key]
        self._widths[key] = None  # a record that holds itself has no fixed width
        width: int | None = None
        if node["type"] == "fixed":
            width = int(node["size"])
        elif node["type"] in ("record", "error"):
            total = 0
            for field in node["fields"]:
                part = self.width(field["type"])
                if part is None:
                    break
                total += part
            else:
                width = total
        self._widths[key] = width
        return width

    def _simple(self, node: Any) -> bool:
        """Whether `node` is written inline inside a loop or a union branch: no loop of its own."""
        if isinstance(node, str) or self.width(node) is not None:
            return True
        return isinstance(node, dict) and node["type"] in ("enum", "fixed")

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"_{prefix}{self._count}"

    def function(self, schema: Any) -> str:
        """The name of the function that checks one value of `schema`, generated once per node."""
        node = self._resolve(schema)
        key = self._key(node)
        if key in self._functions:
            return self._functions[key]
        prefix = "r" if isinstance(node, dict) and node["type"] in ("record", "error") else "a"
        name = self._name(prefix)
        self._functions[key] = name
        body: list[str] = []
        if prefix == "r":
            fields = node["fields"]
            if len(fields) <= _FIELDS_PER_FUNCTION:
                self._fields(fields, body, "    ")
            for start in (
                range(0, len(fields), _FIELDS_PER_FUNCTION) if len(fields) > _FIELDS_PER_FUNCTION else ()
            ):
                part = self._name("p")
                lines: list[str] = []
                self._fields(fields[start : start + _FIELDS_PER_FUNCTION], lines, "    ")
                self._emit(part, lines)
                body.append(f"    pos = {part}(data, pos, n)")
        else:
            self._value(node, body, "    ", in_loop=False)
        self._emit(name, body)
        return name

    def _emit(self, name: str, body: list[str]) -> None:
        self._lines += len(body) + 2
        if self._lines > _MAX_LINES:
            raise _TooLarge
        self.units.append("\n".join([f"def {name}(data, pos, n):", *body, "    return pos", ""]))

    def _fields(self, fields: list[Any], out: list[str], ind: str) -> None:
        run = 0  # bytes of fixed-width fields not yet skipped
        for field in fields:
            width = self.width(field["type"])
            if width is not None:
                run += width
                continue
            self._skip(run, out, ind)
            run = 0
            self._value(field["type"], out, ind, in_loop=False)
        self._skip(run, out, ind)

    @staticmethod
    def _skip(width: int, out: list[str], ind: str) -> None:
        if width:
            out += [f"{ind}pos += {int(width)}", f"{ind}if pos > n: raise IndexError"]

    def _value(self, schema: Any, out: list[str], ind: str, in_loop: bool) -> None:
        """Code that steps `pos` over one value of `schema`. `in_loop`: inside an array or map
        loop or a union branch, where only simple values are written inline."""
        node = self._resolve(schema)
        width = self.width(node)
        if width is not None:
            self._skip(width, out, ind)
        elif node == "boolean":
            out += [f"{ind}if data[pos] > 1: raise _M('boolean')", f"{ind}pos += 1"]
        elif node in ("int", "long"):
            out += [f"{ind}if data[pos] < 128: pos += 1", f"{ind}else: pos = _{node}_tail(data, pos)"]
        elif node in ("string", "bytes"):
            out += [
                f"{ind}b = data[pos]",
                f"{ind}if b < 128 and not b & 1: pos += 1; e = pos + (b >> 1)",
                f"{ind}else: e, pos = _length(data, pos); e += pos",
                f"{ind}if e > n: raise IndexError",
            ]
            if node == "string":
                out.append(f"{ind}data[pos:e].decode()")
            out.append(f"{ind}pos = e")
        elif isinstance(node, dict) and node["type"] == "enum":
            self._read_index(len(node["symbols"]), out, ind)
        elif (isinstance(node, dict) and node["type"] in ("record", "error")) or in_loop:
            # A record is a function (it may be recursive); so is an array, map or union inside a
            # loop or a union branch, so that no function nests more than one loop.
            out.append(f"{ind}pos = {self.function(node)}(data, pos, n)")
        elif isinstance(node, list):
            self._union(node, out, ind)
        else:
            self._blocks(node, out, ind)

    @staticmethod
    def _read_index(count: int, out: list[str], ind: str) -> None:
        """`i` = a union or enum index, refused unless 0 <= i < count."""
        count = int(count)
        out += [
            f"{ind}i = data[pos]",
            f"{ind}if i < {2 * count} and i < 128 and not i & 1: pos += 1; i >>= 1",
            f"{ind}else: i, pos = _index(data, pos, {count})",
        ]

    def _union(self, branches: list[Any], out: list[str], ind: str) -> None:
        self._read_index(len(branches), out, ind)
        if len(branches) > _INLINE_BRANCHES:
            table = self._name("u")
            self.tables.append(f"{table} = ({', '.join(self._branch(b) for b in branches)},)")
            out.append(f"{ind}pos = {table}[i](data, pos, n)")
            return
        keyword = "if"
        for number, branch in enumerate(branches):
            body: list[str] = []
            self._value(branch, body, ind + "    ", in_loop=True)
            if body:  # a branch that takes no bytes (null) needs no code
                out += [f"{ind}{keyword} i == {number}:", *body]
                keyword = "elif"

    def _branch(self, branch: Any) -> str:
        """A function for one branch of a large union."""
        node = self._resolve(branch)
        if not self._simple(node) or (isinstance(node, dict) and node["type"] in ("record", "error")):
            return self.function(node)
        name = self._name("b")
        body: list[str] = []
        self._value(node, body, "    ", in_loop=True)
        self._emit(name, body)
        return name

    def _blocks(self, node: Mapping[str, Any], out: list[str], ind: str) -> None:
        """Arrays and maps: blocks of `c` items up to a block of 0; a block with a byte size `sz`
        must hold exactly that many bytes."""
        keyed = node["type"] == "map"
        item = node["values"] if keyed else node["items"]
        width = None if keyed else self.width(item)
        inner = ind + "        "
        out += [
            f"{ind}while True:",
            f"{ind}    c = data[pos]",
            f"{ind}    if c < 128 and not c & 1:",
            f"{ind}        pos += 1",
            f"{ind}        if not c: break",
            f"{ind}        c >>= 1; sz = -1",
            f"{ind}    else:",
            f"{ind}        c, sz, pos = _block(data, pos)",
            f"{ind}        if not c: break",
            f"{ind}    st = pos",
        ]
        if width is not None:  # items of one width: the whole block is one step
            out += [f"{ind}    pos += c * {int(width)}", f"{ind}    if pos > n: raise IndexError"]
        else:
            out.append(f"{ind}    for _ in range(c):")
            if keyed:
                self._value("string", out, inner, in_loop=True)
            self._value(item, out, inner, in_loop=True)
        out.append(f"{ind}    if sz >= 0 and pos - st != sz: raise _M('block size')")


def generate(schema: Any, named: Mapping[str, Any]) -> tuple[list[str], str]:
    """(The source of the checker for a whole message of `schema`, function by function, then
    the union tables; the name of the function that checks a whole message.)"""
    generator = _Generator(named)
    top = generator.function(schema)
    return [*generator.units, *generator.tables], top


def compile_checker(schema: Any, named: Mapping[str, Any]) -> Checker | None:
    """The checker for a whole message of `schema` (as fastavro's `parse_schema` returns it, with
    its named types in `named`); None for a definition too large (`_MAX_LINES`) or nested too
    deeply to generate one for (the generator takes more stack per level than the walker's
    builder): such a schema keeps the walker alone, and no definition the walker takes is
    refused. Each function is compiled on its own, so other threads (the event loop) run in
    between."""
    try:
        units, top = generate(schema, named)
    except (RecursionError, _TooLarge):
        return None
    namespace = dict(_HELPERS)
    for unit in units:
        exec(compile(unit, "<avro binary checker>", "exec"), namespace)  # noqa: S102 - see the docstring
    step = namespace[top]

    def check(data: bytes) -> int:
        return step(data, 0, len(data))  # type: ignore[no-any-return]

    return check
