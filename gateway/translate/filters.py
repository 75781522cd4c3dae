"""The Pub/Sub filter language, on message attributes.

    attributes:KEY                  the attribute is present
    attributes.KEY = "v"            present with value v (!= : absent, or another value)
    hasPrefix(attributes.KEY, "p")  present with a value starting with p
    NOT e, -e, e AND e, e OR e, ( e )

Keys of letters, digits, '-' and '_' stand bare; any other key is a string literal. String
literals take double or single quotes with backslash escapes (\\n, \\t, \\\\, quotes, \\xHH,
\\uHHHH, octal \\NNN). Matching is case-sensitive. AND and OR may not be mixed at one level
without parentheses. A filter is at most 256 bytes (a filter the gateway writes itself may
lift that: `parse(..., max_bytes=None)`). Parse errors name the position.

`parse` returns a predicate; `parse_expression` the parsed expression itself, a tree of frozen
values (`Has`, `Equals`, `NotEquals`, `HasPrefix`, `Not`, `And`, `Or`), for evaluators
elsewhere: spark/filters.py compiles it into a Spark SQL condition, so that the gateway and
Spark apply one definition of the language.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import TypeAlias

from gateway.errors import InvalidArgument

MAX_FILTER_BYTES = 256
Predicate = Callable[[Mapping[str, str]], bool]

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<op>!=|=|:|\(|\)|,|-|\.)
  | (?P<word>[A-Za-z0-9_\-]+)
""",
    re.VERBOSE,
)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[0-7]{1,3}|.)", re.DOTALL)
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


@dataclasses.dataclass(frozen=True, slots=True)
class Has:
    """attributes:KEY"""

    key: str


@dataclasses.dataclass(frozen=True, slots=True)
class Equals:
    """attributes.KEY = "value": present with that value."""

    key: str
    value: str


@dataclasses.dataclass(frozen=True, slots=True)
class NotEquals:
    """attributes.KEY != "value": absent, or present with another value (NOT Equals)."""

    key: str
    value: str


@dataclasses.dataclass(frozen=True, slots=True)
class HasPrefix:
    """hasPrefix(attributes.KEY, "prefix"): present with a value that starts with it."""

    key: str
    prefix: str


@dataclasses.dataclass(frozen=True, slots=True)
class Not:
    inner: Expr


@dataclasses.dataclass(frozen=True, slots=True)
class And:
    """e AND e AND ...: two or more parts."""

    parts: tuple[Expr, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Or:
    """e OR e OR ...: two or more parts."""

    parts: tuple[Expr, ...]


Expr: TypeAlias = Has | Equals | NotEquals | HasPrefix | Not | And | Or


def predicate(expr: Expr) -> Predicate:
    """The expression as a function of the attributes (compiled once: closures, no tree walk
    per message)."""
    match expr:
        case Has(key):
            return lambda a: key in a
        case Equals(key, value):
            return lambda a: a.get(key) == value
        case NotEquals(key, value):
            return lambda a: a.get(key) != value
        case HasPrefix(key, prefix):
            return lambda a: key in a and a[key].startswith(prefix)
        case Not(inner):
            p = predicate(inner)
            return lambda a: not p(a)
        case And(parts):
            ps = [predicate(e) for e in parts]
            return lambda a: all(p(a) for p in ps)
        case Or(parts):
            ps = [predicate(e) for e in parts]
            return lambda a: any(p(a) for p in ps)


class FilterError(InvalidArgument):
    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"Invalid filter at position {position}: {message}")
        self.position = position


@dataclasses.dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    pos: int


def _unquote(literal: str, pos: int) -> str:
    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if len(e) > 1 and e[0] in "xu":
            return chr(int(e[1:], 16))
        if e[0] in "01234567":
            return chr(int(e, 8))
        if e[0] in "xu" or e[0].isdigit():
            raise FilterError(f"invalid escape sequence \\{e}", pos + m.start())
        return _SIMPLE.get(e, e)

    return _ESCAPE.sub(one, literal[1:-1])


def _tokens(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FilterError(f"unexpected character {text[pos]!r}", pos)
        kind = m.lastgroup or ""
        if kind != "space":
            out.append(Token(kind, m.group(), pos))
        pos = m.end()
    out.append(Token("end", "", len(text)))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def take(self, kind: str, text: str | None = None) -> Token:
        t = self.tok
        if t.kind != kind or (text is not None and t.text != text):
            want = repr(text) if text else kind
            got = repr(t.text) if t.text else "the end"
            raise FilterError(f"expected {want}, found {got}", t.pos)
        self.i += 1
        return t

    def at(self, kind: str, text: str) -> bool:
        return self.tok.kind == kind and self.tok.text == text

    def expression(self) -> Expr:
        first = self.factor()
        if not (self.at("word", "AND") or self.at("word", "OR")):
            return first
        op = self.tok.text
        parts = [first]
        while self.at("word", "AND") or self.at("word", "OR"):
            if self.tok.text != op:
                raise FilterError("AND and OR cannot be mixed without parentheses", self.tok.pos)
            self.i += 1
            parts.append(self.factor())
        return And(tuple(parts)) if op == "AND" else Or(tuple(parts))

    def factor(self) -> Expr:
        if self.at("word", "NOT") or self.at("op", "-"):
            self.i += 1
            return Not(self.factor())
        if self.at("op", "("):
            self.i += 1
            inner = self.expression()
            self.take("op", ")")
            return inner
        if self.at("word", "hasPrefix"):
            self.i += 1
            self.take("op", "(")
            key = self.attribute_key(".")
            self.take("op", ",")
            t = self.take("string")
            prefix = _unquote(t.text, t.pos)
            self.take("op", ")")
            return HasPrefix(key, prefix)
        return self.comparison()

    def attribute_key(self, sep: str) -> str:
        self.take("word", "attributes")
        self.take("op", sep)
        t = self.tok
        if t.kind == "string":
            self.i += 1
            return _unquote(t.text, t.pos)
        nxt = self.toks[min(self.i + 1, len(self.toks) - 1)]
        if t.text == "-" and nxt.kind == "word" and nxt.pos == t.pos + 1:
            self.i += 2  # a bare key that starts with '-'
            return "-" + nxt.text
        return self.take("word").text

    def comparison(self) -> Expr:
        t = self.tok
        if t.kind != "word" or t.text != "attributes":
            raise FilterError(f"expected an attribute condition, found {t.text or 'the end'!r}", t.pos)
        if self.toks[self.i + 1].text == ":":
            return Has(self.attribute_key(":"))
        key = self.attribute_key(".")
        op = self.tok
        if op.text not in ("=", "!="):
            raise FilterError(f"expected '=', '!=' after the key, found {op.text or 'the end'!r}", op.pos)
        self.i += 1
        t = self.take("string")
        value = _unquote(t.text, t.pos)
        return Equals(key, value) if op.text == "=" else NotEquals(key, value)


def parse_expression(text: str, *, max_bytes: int | None = MAX_FILTER_BYTES) -> Expr | None:
    """The parsed filter, or None for the empty filter (everything matches); `max_bytes` as
    for `parse`."""
    if max_bytes is not None and len(text.encode()) > max_bytes:
        raise InvalidArgument(f"Invalid filter: at most {max_bytes} bytes are allowed.")
    if not text.strip():
        return None
    parser = _Parser(text)
    expr = parser.expression()
    parser.take("end")
    return expr


def parse(text: str, *, max_bytes: int | None = MAX_FILTER_BYTES) -> Predicate | None:
    """A predicate on attributes, or None for the empty filter (everything matches).

    `max_bytes` is the API's limit, what v1 clients get. None lifts it, for filters the gateway
    writes itself from input bounded otherwise: the translation of a legacy label query
    (gateway/legacy/query.py bounds its size and nesting) may be longer than 256 bytes."""
    expr = parse_expression(text, max_bytes=max_bytes)
    return None if expr is None else predicate(expr)
