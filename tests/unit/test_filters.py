"""The Pub/Sub filter language on message attributes (gateway.translate.filters)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.errors import InvalidArgument
from gateway.translate import filters
from gateway.translate.filters import MAX_FILTER_BYTES, FilterError

HYP = hsettings(max_examples=200, deadline=None, database=None)


def matches(text: str, attributes: Mapping[str, str]) -> bool:
    predicate = filters.parse(text)
    assert predicate is not None
    return predicate(attributes)


# -- what matches ------------------------------------------------------------------------------

A = "attributes"
MATCHES: list[tuple[str, dict[str, str], bool]] = [
    # presence
    ("attributes:a", {"a": "1"}, True),
    ("attributes:a", {"a": ""}, True),
    ("attributes:a", {}, False),
    ("attributes:a", {"b": "a"}, False),
    # equality
    ('attributes.a = "1"', {"a": "1"}, True),
    ('attributes.a = "1"', {"a": "12"}, False),
    ('attributes.a = "1"', {"a": ""}, False),
    ('attributes.a = "1"', {}, False),
    ('attributes.a = ""', {"a": ""}, True),
    ('attributes.a = ""', {}, False),
    ('attributes.a="1"', {"a": "1"}, True),
    ('  attributes.a\t=\n"1"  ', {"a": "1"}, True),
    # inequality: an absent key is not equal
    ('attributes.a != "1"', {"a": "1"}, False),
    ('attributes.a != "1"', {"a": "2"}, True),
    ('attributes.a != "1"', {}, True),
    ('attributes.a != "1"', {"b": "1"}, True),
    ('attributes.a!=""', {"a": ""}, False),
    # hasPrefix
    ('hasPrefix(attributes.a, "ab")', {"a": "abc"}, True),
    ('hasPrefix(attributes.a, "ab")', {"a": "ab"}, True),
    ('hasPrefix(attributes.a, "ab")', {"a": "a"}, False),
    ('hasPrefix(attributes.a, "ab")', {"a": "xab"}, False),
    ('hasPrefix(attributes.a, "ab")', {}, False),
    ('hasPrefix(attributes.a, "")', {"a": ""}, True),
    ('hasPrefix(attributes.a, "")', {}, False),
    ('hasPrefix( attributes.a ,"ab" )', {"a": "abc"}, True),
    # NOT and -
    ("NOT attributes:a", {}, True),
    ("NOT attributes:a", {"a": "1"}, False),
    ("-attributes:a", {}, True),
    ("-attributes:a", {"a": "1"}, False),
    ("- attributes:a", {"a": "1"}, False),
    ("NOT NOT attributes:a", {"a": "1"}, True),
    ("--attributes:a", {"a": "1"}, True),
    ("-NOT attributes:a", {}, False),
    ('NOT attributes.a = "1"', {}, True),
    ('NOT attributes.a = "1"', {"a": "1"}, False),
    ('-hasPrefix(attributes.a, "x")', {"a": "xy"}, False),
    ('-hasPrefix(attributes.a, "x")', {"a": "yx"}, True),
    # AND, OR: n-ary at one level
    ("attributes:a AND attributes:b", {"a": "", "b": ""}, True),
    ("attributes:a AND attributes:b", {"a": ""}, False),
    ("attributes:a AND attributes:b", {"b": ""}, False),
    ("attributes:a AND attributes:b AND attributes:c", {"a": "", "b": "", "c": ""}, True),
    ("attributes:a AND attributes:b AND attributes:c", {"a": "", "b": ""}, False),
    ("attributes:a OR attributes:b", {"b": ""}, True),
    ("attributes:a OR attributes:b", {"a": ""}, True),
    ("attributes:a OR attributes:b", {"c": ""}, False),
    ("attributes:a OR attributes:b OR attributes:c", {"c": ""}, True),
    # NOT binds tighter than AND / OR
    ("NOT attributes:a AND attributes:b", {"b": ""}, True),
    ("NOT attributes:a AND attributes:b", {"a": "", "b": ""}, False),
    ("NOT attributes:a OR attributes:b", {"a": ""}, False),
    ("NOT attributes:a OR attributes:b", {"a": "", "b": ""}, True),
    # parentheses, nested
    ("(attributes:a)", {"a": ""}, True),
    ("((attributes:a))", {}, False),
    ("(attributes:a OR attributes:b) AND attributes:c", {"b": "", "c": ""}, True),
    ("(attributes:a OR attributes:b) AND attributes:c", {"a": "", "b": ""}, False),
    ("attributes:a OR (attributes:b AND attributes:c)", {"b": "", "c": ""}, True),
    ("attributes:a OR (attributes:b AND attributes:c)", {"c": ""}, False),
    ("attributes:a OR (attributes:b AND attributes:c)", {"a": ""}, True),
    ("NOT (attributes:a OR attributes:b)", {}, True),
    ("NOT (attributes:a OR attributes:b)", {"b": ""}, False),
    ("-(attributes:a AND attributes:b)", {"a": ""}, True),
    ("-(attributes:a AND attributes:b)", {"a": "", "b": ""}, False),
    ("((attributes:a OR (attributes:b AND NOT (attributes:c)))) AND -attributes:d", {"b": ""}, True),
    (
        "((attributes:a OR (attributes:b AND NOT (attributes:c)))) AND -attributes:d",
        {"b": "", "c": ""},
        False,
    ),
    (
        "((attributes:a OR (attributes:b AND NOT (attributes:c)))) AND -attributes:d",
        {"a": "", "d": ""},
        False,
    ),
    ("(attributes:a)AND(attributes:b)", {"a": "", "b": ""}, True),
    # quoted keys: dots, spaces, other characters, either quote
    ('attributes."k.x" = "v"', {"k.x": "v"}, True),
    ('attributes."k.x" = "v"', {"k": "v"}, False),
    ('attributes:"my key"', {"my key": ""}, True),
    ("attributes:'my key'", {"my key": ""}, True),
    ("attributes:'my key'", {"my": ""}, False),
    ("attributes.'my key' = 's'", {"my key": "s"}, True),
    ('attributes."a:b" != "x"', {"a:b": "y"}, True),
    ('hasPrefix(attributes."k.x", "v")', {"k.x": "vv"}, True),
    ('attributes:"é"', {"é": "1"}, True),
    ('attributes:"q\\"t"', {'q"t': "1"}, True),
    # bare keys with '-', '_', digits; keywords as keys
    ('attributes.pre-fix_1 = "v"', {"pre-fix_1": "v"}, True),
    ("attributes:_x", {"_x": ""}, True),
    ("attributes:x-", {"x-": ""}, True),
    ("attributes:9", {"9": ""}, True),
    ("attributes:NOT AND attributes:OR", {"NOT": "", "OR": ""}, True),
    ("attributes:attributes", {"attributes": ""}, True),
    ('attributes.hasPrefix = "x"', {"hasPrefix": "x"}, True),
    # escapes in values
    ('attributes.a = "line\\nnext"', {"a": "line\nnext"}, True),
    ('attributes.a = "a\\tb"', {"a": "a\tb"}, True),
    ('attributes.a = "back\\\\slash"', {"a": "back\\slash"}, True),
    ('attributes.a = "say \\"hi\\""', {"a": 'say "hi"'}, True),
    ('attributes.a = "\\x41"', {"a": "A"}, True),
    ('attributes.a = "\\x4a"', {"a": "J"}, True),
    ('attributes.a = "\\u00e9"', {"a": "é"}, True),
    ('attributes.a = "\\u00E9t\\u00e9"', {"a": "été"}, True),
    ('attributes.a = "\\101"', {"a": "A"}, True),
    ('attributes.a = "\\1012"', {"a": "A2"}, True),
    ('attributes.a = "\\0"', {"a": "\0"}, True),
    ('attributes.a = "\\r\\f\\v\\a\\b"', {"a": "\r\f\v\a\b"}, True),
    ('attributes.a = "\\x41"', {"a": "\\x41"}, False),
    ('attributes.a = "é"', {"a": "é"}, True),
    ('attributes.a = "a b"', {"a": "a b"}, True),
    # single quotes
    ("attributes.a = 'x'", {"a": "x"}, True),
    ("attributes.a = 'it\\'s'", {"a": "it's"}, True),
    ("attributes.a = 'say \"hi\"'", {"a": 'say "hi"'}, True),
    ('attributes.a = "it\'s"', {"a": "it's"}, True),
    ("hasPrefix(attributes.a, 'x')", {"a": "xy"}, True),
    # case sensitivity: keys and values
    ('attributes.a = "X"', {"a": "x"}, False),
    ('attributes.a = "x"', {"a": "x"}, True),
    ("attributes:A", {"a": ""}, False),
    ("attributes:A", {"A": ""}, True),
    ('hasPrefix(attributes.a, "X")', {"a": "xy"}, False),
    ('attributes.a != "X"', {"a": "x"}, True),
]


@pytest.mark.parametrize(("text", "attributes", "expected"), MATCHES)
def test_matches(text: str, attributes: dict[str, str], expected: bool) -> None:
    assert matches(text, attributes) is expected


def test_predicate_is_reusable_and_does_not_mutate_attributes() -> None:
    predicate = filters.parse('attributes.a != "1" AND NOT attributes:b')
    assert predicate is not None
    attrs = {"a": "2"}
    assert predicate(attrs) and predicate(attrs)
    assert attrs == {"a": "2"}
    assert not predicate({"a": "1"})
    assert not predicate({"b": "x"})
    assert predicate({})


@pytest.mark.parametrize("text", ["", " ", "\t", "\n  \t ", " " * MAX_FILTER_BYTES])
def test_empty_filter_is_none(text: str) -> None:
    assert filters.parse(text) is None


# -- what does not parse -----------------------------------------------------------------------

END = object()
INVALID: list[tuple[str, int | str | object]] = [
    # AND and OR mixed at one level
    ("attributes:a AND attributes:b OR attributes:c", "OR"),
    ("attributes:a OR attributes:b AND attributes:c", "AND"),
    ("(attributes:a AND attributes:b OR attributes:c)", "OR"),
    # unbalanced parentheses
    ("(attributes:a", END),
    ("((attributes:a)", END),
    ("attributes:a)", ")"),
    ("(attributes:a))", 14),
    (")attributes:a", 0),
    # missing or malformed value
    ("attributes.a =", END),
    ("attributes.a = ", END),
    ("attributes.a", END),
    ("attributes.a != ", END),
    ('attributes.a == "x"', 14),
    ('attributes.a = = "x"', 15),
    ("attributes.a = x", "x"),
    ("attributes.a = 1", "1"),
    ('attributes.a = "x', '"'),
    ("attributes.a = 'x", "'"),
    ('attributes.a : "x"', ":"),
    ('attributes.a < "x"', "<"),
    ('attributes.a.b = "x"', 12),
    # missing key
    ("attributes", END),
    ("attributes:", END),
    ('attributes. = "x"', "="),
    ("attributes:(a)", "("),
    # unknown or malformed function
    ('foo(attributes.a, "x")', 0),
    ('hasprefix(attributes.a, "x")', 0),
    ('HASPREFIX(attributes.a, "x")', 0),
    ('hasSuffix(attributes.a, "x")', 0),
    ("hasPrefix(attributes.a)", ")"),
    ('hasPrefix(attributes:a, "x")', ":"),
    ('hasPrefix(attributes.a, "x"', END),
    ("hasPrefix(attributes.a, x)", "x)"),
    ('hasPrefix attributes.a, "x"', "attributes"),
    # trailing garbage, missing operators
    ('attributes.a = "x" extra', "extra"),
    ("attributes:a attributes:b", 13),
    ('attributes.a = "x" #', "#"),
    ("attributes:a and attributes:b", "and"),
    ("attributes:a or attributes:b", "or"),
    ("attributes:a,", ","),
    # dangling or leading operators, wrong case keywords
    ("attributes:a AND", END),
    ("attributes:a OR ", END),
    ("AND attributes:a", 0),
    ("attributes:a AND OR attributes:b", "OR"),
    ("NOT", END),
    ("-", END),
    ("not attributes:a", 0),
    # empty parentheses
    ("()", 1),
    ("attributes:a AND ()", 18),
    ("NOT ()", 5),
    # not attributes at all
    ('a = "x"', 0),
    ("attribute:a", 0),
    ("Attributes:a", 0),
    ("data:a", 0),
    ("attributes:a AND a", "a"),
    ("=", 0),
    ('"attributes:a"', 0),
]


def _position(text: str, where: int | str | object) -> int:
    if where is END:
        return len(text)
    if isinstance(where, int):
        return where
    assert isinstance(where, str)
    return text.rindex(where) if where in ("a", "'", '"') else text.index(where)


@pytest.mark.parametrize(("text", "where"), INVALID)
def test_invalid(text: str, where: int | str | object) -> None:
    pos = _position(text, where)
    with pytest.raises(FilterError) as info:
        filters.parse(text)
    assert isinstance(info.value, InvalidArgument)
    assert info.value.code.number == 3  # INVALID_ARGUMENT
    assert info.value.position == pos, info.value.message
    assert f"position {pos}" in info.value.message


def _padded(total_bytes: int, tail: str = "") -> str:
    """'attributes.a = "xxx...<tail>"' of exactly total_bytes UTF-8 bytes."""
    head = 'attributes.a = "'
    fill = total_bytes - len(head.encode()) - len(tail.encode()) - 1
    text = head + "x" * fill + tail + '"'
    assert len(text.encode()) == total_bytes
    return text


def test_at_most_256_bytes() -> None:
    assert MAX_FILTER_BYTES == 256
    ok = _padded(256)
    assert matches(ok, {"a": ok[16:-1]})
    with pytest.raises(InvalidArgument):
        filters.parse(_padded(257))
    with pytest.raises(InvalidArgument):
        filters.parse(_padded(10_000))


def test_the_limit_counts_bytes_not_characters() -> None:
    ok = _padded(256, tail="é")  # 255 characters, 256 bytes
    assert matches(ok, {"a": ok[16:-1]})
    over = _padded(257, tail="é")  # 256 characters, 257 bytes
    assert len(over) == 256
    with pytest.raises(InvalidArgument):
        filters.parse(over)
    euro = _padded(258, tail="€")  # a 3-byte character across the boundary
    assert len(euro) == 256
    with pytest.raises(InvalidArgument):
        filters.parse(euro)
    with pytest.raises(InvalidArgument):
        filters.parse("é" * 129)  # 129 characters, 258 bytes
    with pytest.raises(InvalidArgument):
        filters.parse(" " * (MAX_FILTER_BYTES + 1))


def test_the_limit_is_the_default_and_can_be_lifted_only_on_request() -> None:
    long = " OR ".join(f"attributes:k{i}" for i in range(100))
    assert len(long.encode()) > MAX_FILTER_BYTES
    with pytest.raises(InvalidArgument, match="at most 256 bytes"):
        filters.parse(long)
    with pytest.raises(InvalidArgument, match="at most 256 bytes"):
        filters.parse(long, max_bytes=MAX_FILTER_BYTES)
    predicate = filters.parse(long, max_bytes=None)
    assert predicate is not None
    assert predicate({"k99": ""}) and not predicate({"k100": ""})
    with pytest.raises(InvalidArgument, match="at most 10 bytes"):
        filters.parse("attributes:abc", max_bytes=10)
    assert filters.parse(" " * 10_000, max_bytes=None) is None
    with pytest.raises(FilterError) as info:
        filters.parse(long + " OR", max_bytes=None)
    assert info.value.position == len(long) + 3


def test_a_long_chain_within_the_limit() -> None:
    text = " OR ".join(f"attributes:k{i}" for i in range(15))
    assert len(text.encode()) <= MAX_FILTER_BYTES
    assert matches(text, {"k14": ""})
    assert not matches(text, {"k15": ""})


# -- bugs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("literal", ['"\\8"', '"\\9"', '"\\xZZ"', '"\\x4"', '"\\u12"', '"\\uZZZZ"', "'\\x'"])
def test_malformed_escape_is_invalid_argument(literal: str) -> None:
    with pytest.raises(InvalidArgument):
        filters.parse(f"attributes.a = {literal}")


def test_bare_key_may_start_with_hyphen() -> None:
    assert matches("attributes:-a", {"-a": ""})


# -- generated expressions agree with a direct evaluation ----------------------------------------


@dataclasses.dataclass(frozen=True)
class Has:
    key: str


@dataclasses.dataclass(frozen=True)
class Eq:
    key: str
    value: str
    negated: bool


@dataclasses.dataclass(frozen=True)
class Prefix:
    key: str
    value: str


@dataclasses.dataclass(frozen=True)
class Not:
    inner: Node
    dash: bool


@dataclasses.dataclass(frozen=True)
class Junction:
    op: str  # "AND" | "OR"
    parts: tuple[Node, ...]


Node = Has | Eq | Prefix | Not | Junction

KEYS = ["a", "b", "k-1", "_x", "A", "k.x", "my key", "é", 'q"t', "NOT", "it's"]
VALUES = ["", "a", "ab", "abc", "b", "A", "é", "été", "q\"'\\", "x\ny", "\t"]
BARE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")


def evaluate(node: Node, attrs: Mapping[str, str]) -> bool:
    match node:
        case Has(key):
            return key in attrs
        case Eq(key, value, negated):
            return (attrs.get(key) == value) != negated
        case Prefix(key, value):
            return key in attrs and attrs[key].startswith(value)
        case Not(inner, _):
            return not evaluate(inner, attrs)
        case Junction("AND", parts):
            return all(evaluate(p, attrs) for p in parts)
        case Junction(_, parts):
            return any(evaluate(p, attrs) for p in parts)
    raise AssertionError(node)


def _literal(s: str, draw: st.DrawFn) -> str:
    quote = draw(st.sampled_from(['"', "'"]))
    out = []
    for ch in s:
        if ch in (quote, "\\"):
            out.append("\\" + ch)
            continue
        forms = [ch]
        if ch == "\n":
            forms.append("\\n")
        if ch == "\t":
            forms.append("\\t")
        if ch in ('"', "'"):
            forms.append("\\" + ch)
        if ord(ch) < 256:
            forms += [f"\\x{ord(ch):02x}", f"\\x{ord(ch):02X}", f"\\{ord(ch):03o}"]
        if ord(ch) < 0x10000:
            forms.append(f"\\u{ord(ch):04x}")
        out.append(draw(st.sampled_from(forms)))
    return quote + "".join(out) + quote


def _key(key: str, draw: st.DrawFn) -> str:
    if BARE.fullmatch(key) and draw(st.booleans()):
        return key
    return _literal(key, draw)


def render(node: Node, draw: st.DrawFn) -> str:
    sp = draw(st.sampled_from([" ", "  ", "\t", "\n"]))
    opt = draw(st.sampled_from(["", " "]))
    match node:
        case Has(key):
            return f"attributes:{_key(key, draw)}"
        case Eq(key, value, negated):
            op = "!=" if negated else "="
            return f"attributes.{_key(key, draw)}{opt}{op}{opt}{_literal(value, draw)}"
        case Prefix(key, value):
            return f"hasPrefix({opt}attributes.{_key(key, draw)},{opt}{_literal(value, draw)}{opt})"
        case Not(inner, dash):
            body = render(inner, draw)
            if isinstance(inner, Junction) or draw(st.booleans()):
                body = f"({opt}{body}{opt})"
            return f"-{opt}{body}" if dash else f"NOT{sp}{body}"
        case Junction(op, parts):
            rendered = []
            for p in parts:
                r = render(p, draw)
                if isinstance(p, Junction) or draw(st.integers(0, 4)) == 0:
                    r = f"({opt}{r}{opt})"
                rendered.append(r)
            return f"{sp}{op}{sp}".join(rendered)
    raise AssertionError(node)


keys = st.sampled_from(KEYS)
values = st.sampled_from(VALUES)
leaves: st.SearchStrategy[Node] = st.one_of(
    st.builds(Has, keys),
    st.builds(Eq, keys, values, st.booleans()),
    st.builds(Prefix, keys, values),
)
trees: st.SearchStrategy[Node] = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.builds(Not, children, st.booleans()),
        st.builds(
            Junction, st.sampled_from(["AND", "OR"]), st.lists(children, min_size=2, max_size=3).map(tuple)
        ),
    ),
    max_leaves=6,
)
attribute_maps = st.lists(st.dictionaries(keys, values, max_size=6), min_size=1, max_size=8)


@given(tree=trees, maps=attribute_maps, data=st.data())
@HYP
def test_generated_expressions_agree_with_the_ast(
    tree: Node, maps: list[dict[str, str]], data: st.DataObject
) -> None:
    text = render(tree, data.draw)
    padding = data.draw(st.sampled_from(["", " ", "\n"]))
    text = padding + text + padding
    if len(text.encode()) > MAX_FILTER_BYTES:
        with pytest.raises(InvalidArgument):
            filters.parse(text)
        return
    predicate = filters.parse(text)
    assert predicate is not None
    for attrs in maps:
        assert predicate(attrs) is evaluate(tree, attrs), (text, attrs)
    everything = dict.fromkeys(KEYS, "ab")
    assert predicate(everything) is evaluate(tree, everything), text
    assert predicate({}) is evaluate(tree, {}), text


@given(key=st.text(min_size=1, max_size=8), value=st.text(max_size=8), data=st.data())
@HYP
def test_any_key_and_value_round_trip_through_a_literal(key: str, value: str, data: st.DataObject) -> None:
    key_text, value_text = _key(key, data.draw), _literal(value, data.draw)
    equal = f"attributes.{key_text} = {value_text}"
    unequal = f"attributes.{key_text} != {value_text}"
    prefix = f"hasPrefix(attributes.{key_text}, {value_text})"
    if len(prefix.encode()) > MAX_FILTER_BYTES:
        return
    assert matches(equal, {key: value})
    assert not matches(equal, {key: value + "x"})
    assert not matches(equal, {})
    assert matches(unequal, {key: value + "x"})
    assert not matches(unequal, {key: value})
    assert matches(prefix, {key: value + "x"})
    assert matches(f"attributes:{key_text}", {key: ""})


# -- the parsed expression, for other evaluators (spark/filters.py) ----------------------------


def test_the_parsed_expression_is_a_tree_of_values() -> None:
    expr = filters.parse_expression(
        'NOT attributes:"a b" AND (attributes.c = "1" OR attributes.c != "2" OR hasPrefix(attributes.d, "x"))'
    )
    assert expr == filters.And(
        (
            filters.Not(filters.Has("a b")),
            filters.Or((filters.Equals("c", "1"), filters.NotEquals("c", "2"), filters.HasPrefix("d", "x"))),
        )
    )
    assert filters.parse_expression("  ") is None
    with pytest.raises(InvalidArgument, match="at most 256 bytes"):
        filters.parse_expression(_padded(257))


@pytest.mark.parametrize(("text", "attributes", "expected"), MATCHES)
def test_the_predicate_of_the_expression_is_the_filter(
    text: str, attributes: dict[str, str], expected: bool
) -> None:
    expr = filters.parse_expression(text)
    assert expr is not None
    assert filters.predicate(expr)(attributes) is expected
