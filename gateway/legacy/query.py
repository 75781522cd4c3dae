"""Label queries of the seed's early API (tech.pubsub): parsed, evaluated, translated to v1.

    foo.com/device_type                 the label is present
    device = "mobile"   n = 7           present with that value (n = 7: the value "7")
    device != "mobile"  n != 7          absent, or another value (NOT (device = "mobile"))
    NOT q, q AND q, q OR q, ( q )       NOT binds tighter than AND, AND tighter than OR

Bare keys are letters, digits, '.', '/', '-' and '_'; any other key is a string literal, as are
the words AND, OR and NOT (upper case only: they are the keywords). String literals take double
or single quotes and the escapes \\\\, \\", \\', \\n, \\r, \\t. An integer (int64) compares as
its canonical decimal string, which is how a label's num_value is stored. Matching is
case-sensitive. A query is at most MAX_QUERY_BYTES bytes and MAX_DEPTH levels of parentheses and
NOT. `Query.to_filter` writes the exactly equivalent v1 filter (gateway/translate/filters.py).
The language, its grammar and its errors: docs/legacy-query.md.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from gateway.errors import InvalidArgument, quote

MAX_QUERY_BYTES = 1024
MAX_DEPTH = 32
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
KEYWORDS = frozenset({"AND", "OR", "NOT"})

_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r\n]+)
  | (?P<string>"(?:[^"\\]|\\[\s\S])*"|'(?:[^'\\]|\\[\s\S])*')
  | (?P<op>!=|=|\(|\))
  | (?P<word>[A-Za-z0-9._/\-]+)
""",
    re.VERBOSE,
)
_INTEGER = re.compile(r"-?[0-9]+")
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "r": "\r", "t": "\t"}
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# A key that may stand bare in a v1 filter (its bare words are [A-Za-z0-9_-]+; one starting
# with '-' is read specially there, so it is quoted here).
_V1_BARE_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")


class QueryError(InvalidArgument):
    """A query that does not parse or passes a limit; `position` is a character index."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"Invalid query at position {position}: {message}")
        self.position = position


# -- the syntax tree ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Present:
    key: str


@dataclasses.dataclass(frozen=True, slots=True)
class Equals:
    """`key = value`, or `key != value` when negated. A numeric literal's value is already its
    canonical decimal string."""

    key: str
    value: str
    negated: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Not:
    inner: Node


@dataclasses.dataclass(frozen=True, slots=True)
class AllOf:
    """AND of two or more parts."""

    parts: tuple[Node, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class AnyOf:
    """OR of two or more parts."""

    parts: tuple[Node, ...]


Node = Present | Equals | Not | AllOf | AnyOf


def _matches(node: Node, labels: Mapping[str, str]) -> bool:
    match node:
        case Present(key):
            return key in labels
        case Equals(key, value, negated):
            return (labels.get(key) == value) != negated
        case Not(inner):
            return not _matches(inner, labels)
        case AllOf(parts):
            return all(_matches(p, labels) for p in parts)
        case AnyOf(parts):
            return any(_matches(p, labels) for p in parts)
    raise AssertionError(node)  # pragma: no cover


def _v1_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _v1_key(key: str) -> str:
    return key if _V1_BARE_KEY.fullmatch(key) else _v1_literal(key)


def _v1(node: Node) -> str:
    match node:
        case Present(key):
            return f"attributes:{_v1_key(key)}"
        case Equals(key, value, negated):
            return f"attributes.{_v1_key(key)} {'!=' if negated else '='} {_v1_literal(value)}"
        case Not(inner):
            return f"NOT {_v1_operand(inner)}"
        case AllOf(parts):
            return " AND ".join(_v1_operand(p) for p in parts)
        case AnyOf(parts):
            return " OR ".join(_v1_operand(p) for p in parts)
    raise AssertionError(node)  # pragma: no cover


def _v1_operand(node: Node) -> str:
    """v1 may not mix AND and OR at one level, and NOT takes one factor: every junction inside
    another node gets parentheses."""
    text = _v1(node)
    return f"({text})" if isinstance(node, AllOf | AnyOf) else text


@dataclasses.dataclass(frozen=True, slots=True)
class Query:
    """A parsed label query; `root` None is the empty query, which matches everything."""

    root: Node | None

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a message with these labels (as attributes: string values) matches."""
        return self.root is None or _matches(self.root, labels)

    def to_filter(self) -> str:
        """The v1 filter that matches exactly the same attributes; "" for the empty query. It
        may pass v1's 256 bytes: compile it with `filters.parse(text, max_bytes=None)`."""
        return "" if self.root is None else _v1(self.root)


# -- parsing -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # space | string | op | word | end
    text: str
    pos: int


def _show(token: _Token) -> str:
    return repr(quote(token.text, 40)) if token.kind != "end" else "the end"


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            ch = text[pos]
            if ch in "\"'":
                raise QueryError("unterminated string", pos)
            if ch == "!":
                raise QueryError("expected '!=' ('!' alone is not an operator; NOT negates)", pos)
            raise QueryError(f"unexpected character {ch!r}", pos)
        kind = m.lastgroup or ""
        if kind != "space":
            out.append(_Token(kind, m.group(), pos))
        pos = m.end()
    out.append(_Token("end", "", len(text)))
    return out


def _unquote(token: _Token) -> str:
    body = token.text[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]  # the token's pattern puts a character after every backslash
        if nxt not in _ESCAPES:
            sequence = "\\" + nxt if nxt.isprintable() else f"\\ and {nxt!r}"
            raise QueryError(
                f"invalid escape sequence {sequence}; strings take \\\\, \\\", \\', \\n, \\r and \\t",
                token.pos + 1 + i,
            )
        out.append(_ESCAPES[nxt])
        i += 2
    return "".join(out)


def _integer(token: _Token) -> str:
    """The canonical decimal string of an int64 literal (007 -> 7, -0 -> 0)."""
    value = int(token.text)  # at most MAX_QUERY_BYTES digits: far below int()'s 4300
    if not INT64_MIN <= value <= INT64_MAX:
        raise QueryError(f"the integer {_show(token)} is outside the int64 range", token.pos)
    return str(value)


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    @property
    def tok(self) -> _Token:
        return self.toks[self.i]

    def keyword(self, word: str) -> bool:
        return self.tok.kind == "word" and self.tok.text == word

    def op(self, text: str) -> bool:
        return self.tok.kind == "op" and self.tok.text == text

    def query(self) -> Node:
        node = self.any_of(0)
        self.close(paren=False)
        return node

    def close(self, paren: bool) -> None:
        """Take what must follow a complete expression: ')' if `paren`, else the end. (AND and
        OR may follow it too; the callers took them.)"""
        t = self.tok
        if paren and self.op(")"):
            self.i += 1
            return
        if not paren and t.kind == "end":
            return
        closer = "')'" if paren else "the end"
        hint = ""
        if t.kind == "word" and t.text.upper() in KEYWORDS and t.text not in KEYWORDS:
            hint = f" (the keywords are upper case: {t.text.upper()})"
        prev = self.toks[self.i - 1]
        if prev.kind == "word" and prev.text.upper() == "NOT" and prev.text != "NOT":
            hint = " (the keywords are upper case: NOT)"
        raise QueryError(f"expected AND, OR or {closer}, found {_show(t)}{hint}", t.pos)

    def any_of(self, depth: int) -> Node:
        parts = [self.all_of(depth)]
        while self.keyword("OR"):
            self.i += 1
            parts.append(self.all_of(depth))
        return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))

    def all_of(self, depth: int) -> Node:
        parts = [self.unary(depth)]
        while self.keyword("AND"):
            self.i += 1
            parts.append(self.unary(depth))
        return parts[0] if len(parts) == 1 else AllOf(tuple(parts))

    def deeper(self, depth: int) -> int:
        if depth >= MAX_DEPTH:
            raise QueryError(f"nested deeper than {MAX_DEPTH} levels of parentheses and NOT", self.tok.pos)
        return depth + 1

    def unary(self, depth: int) -> Node:
        if self.keyword("NOT"):
            inner_depth = self.deeper(depth)
            self.i += 1
            return Not(self.unary(inner_depth))
        if self.op("("):
            inner_depth = self.deeper(depth)
            self.i += 1
            node = self.any_of(inner_depth)
            self.close(paren=True)
            return node
        return self.condition()

    def condition(self) -> Node:
        t = self.tok
        if t.kind == "word" and t.text in KEYWORDS:
            raise QueryError(
                f"expected a label key, found the keyword {t.text} (quote a key named so)", t.pos
            )
        if t.kind == "word":
            key = t.text
        elif t.kind == "string":
            key = _unquote(t)
            if not key:
                raise QueryError("a label key may not be empty", t.pos)
        else:
            raise QueryError(f"expected a label key, NOT or '(', found {_show(t)}", t.pos)
        self.i += 1
        if not (self.op("=") or self.op("!=")):
            return Present(key)
        negated = self.tok.text == "!="
        self.i += 1
        v = self.tok
        if v.kind == "string":
            value = _unquote(v)
        elif v.kind == "word" and _INTEGER.fullmatch(v.text):
            value = _integer(v)
        elif v.kind == "word":
            raise QueryError(
                f'expected a quoted string or an integer, found {_show(v)} (quote strings: "...")', v.pos
            )
        else:
            raise QueryError(f"expected a quoted string or an integer, found {_show(v)}", v.pos)
        self.i += 1
        return Equals(key, value, negated)


def parse(text: str) -> Query:
    """The query `text` means; empty or blank text is the query that matches everything.
    Raises QueryError (INVALID_ARGUMENT) naming the position of what is wrong."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_QUERY_BYTES:
        within = text.encode("utf-8", "surrogatepass")[:MAX_QUERY_BYTES]
        cut = len(within.decode("utf-8", "ignore"))
        raise QueryError(f"a query is at most {MAX_QUERY_BYTES} bytes of UTF-8; this one has {size}", cut)
    bad = _SURROGATE.search(text)
    if bad is not None:
        raise QueryError(f"invalid character U+{ord(bad.group()):04X} (a lone surrogate)", bad.start())
    if not text.strip(" \t\r\n"):
        return Query(None)
    return Query(_Parser(text).query())
