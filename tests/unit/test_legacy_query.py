"""Label queries of the seed's early API (gateway.legacy.query): parsing, evaluation, and the v1
filter they translate to, checked against gateway.translate.filters."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.errors import InvalidArgument
from gateway.legacy import query
from gateway.legacy.query import (
    MAX_DEPTH,
    MAX_QUERY_BYTES,
    AllOf,
    AnyOf,
    Equals,
    Node,
    Not,
    Present,
    Query,
    QueryError,
)
from gateway.translate import filters

HYP = hsettings(max_examples=300, deadline=None, database=None)


def v1_matches(q: Query, labels: Mapping[str, str]) -> bool:
    """What the v1 filter machinery decides on the query's translation."""
    predicate = filters.parse(q.to_filter(), max_bytes=None)
    return True if predicate is None else predicate(labels)


def both(text: str, labels: Mapping[str, str]) -> bool:
    """The query's own answer, asserted equal to its v1 translation's."""
    q = query.parse(text)
    own = q.matches(labels)
    assert v1_matches(q, labels) is own, (text, q.to_filter(), labels)
    return own


# -- what matches: each case through Query.matches and through the v1 filter ---------------------

DEV = "foo.com/device_type"
MATCHES: list[tuple[str, dict[str, str], bool]] = [
    # the empty query
    ("", {}, True),
    ("  \t\n ", {"a": "1"}, True),
    # presence, bare keys of the seed's shape
    ("a", {"a": ""}, True),
    ("a", {}, False),
    ("a", {"b": "a"}, False),
    (DEV, {DEV: "mobile"}, True),
    (DEV, {"foo.com/device": "mobile"}, False),
    ("x-1_y.z/w", {"x-1_y.z/w": ""}, True),
    ("-a", {"-a": ""}, True),
    ("7", {"7": ""}, True),
    ("and", {"and": ""}, True),
    ("Not", {"Not": ""}, True),
    # quoted keys: anything, the keywords, either quote
    ('"my key"', {"my key": ""}, True),
    ("'my key'", {"my key": ""}, True),
    ('"AND"', {"AND": ""}, True),
    ('"NOT" = "x"', {"NOT": "x"}, True),
    ('"é"', {"é": ""}, True),
    ('"q\\"t"', {'q"t': ""}, True),
    ("'it\\'s'", {"it's": ""}, True),
    ('"back\\\\slash"', {"back\\slash": ""}, True),
    ('"a:b" = "c"', {"a:b": "c"}, True),
    ('"a" = "1"', {"a": "1"}, True),
    # equality with strings
    (f'{DEV} = "mobile"', {DEV: "mobile"}, True),
    (f'{DEV} = "mobile"', {DEV: "Mobile"}, False),
    (f'{DEV} = "mobile"', {DEV: "mobile "}, False),
    (f'{DEV} = "mobile"', {}, False),
    ('a = ""', {"a": ""}, True),
    ('a = ""', {}, False),
    ('a="1"', {"a": "1"}, True),
    ("a = 'x'", {"a": "x"}, True),
    ('a = "say \\"hi\\""', {"a": 'say "hi"'}, True),
    ("a = 'say \"hi\"'", {"a": 'say "hi"'}, True),
    ('a = "line\\nnext\\ttab\\rret"', {"a": "line\nnext\ttab\rret"}, True),
    ('a = "back\\\\slash"', {"a": "back\\slash"}, True),
    ('a = "back\\\\slash"', {"a": "back\\\\slash"}, False),
    ('a = "raw\nnewline"', {"a": "raw\nnewline"}, True),
    ('a = "été €"', {"a": "été €"}, True),
    ('a = "\x00"', {"a": "\x00"}, True),
    ('a = "attributes:b"', {"a": "attributes:b"}, True),
    # inequality: an absent key is unequal (exactly v1's !=)
    ('a != "1"', {"a": "1"}, False),
    ('a != "1"', {"a": "2"}, True),
    ('a != "1"', {}, True),
    ('a != "1"', {"b": "1"}, True),
    ('a != ""', {"a": ""}, False),
    ('a != ""', {}, True),
    ('a AND a != "1"', {}, False),
    ('a AND a != "1"', {"a": "2"}, True),
    # numbers: the canonical decimal string
    ("n = 7", {"n": "7"}, True),
    ("n = 007", {"n": "7"}, True),
    ("n = 7", {"n": "07"}, False),
    ("n = 7", {"n": "7.0"}, False),
    ("n = 7", {"n": " 7"}, False),
    ("n = 7", {}, False),
    ("n = -0", {"n": "0"}, True),
    ("n = 0", {"n": "-0"}, False),
    ("n = -12", {"n": "-12"}, True),
    ("n = -012", {"n": "-12"}, True),
    ("n = 9223372036854775807", {"n": "9223372036854775807"}, True),
    ("n = -9223372036854775808", {"n": "-9223372036854775808"}, True),
    ('n = "007"', {"n": "007"}, True),
    ('n = "007"', {"n": "7"}, False),
    ('n = "7"', {"n": "7"}, True),  # a str_value "7" and a num_value 7 are one attribute value
    ("n != 7", {"n": "7"}, False),
    ("n != 7", {"n": "07"}, True),
    ("n != 7", {}, True),
    ("n != 07", {"n": "7"}, False),
    # NOT
    ("NOT a", {}, True),
    ("NOT a", {"a": ""}, False),
    ("NOT NOT a", {"a": ""}, True),
    ('NOT a = "1"', {}, True),
    ('NOT a = "1"', {"a": "1"}, False),
    ('NOT a != "1"', {}, False),
    ('NOT a != "1"', {"a": "1"}, True),
    ("NOT(a)", {}, True),
    # AND, OR, n-ary
    ("a AND b", {"a": "", "b": ""}, True),
    ("a AND b", {"a": ""}, False),
    ("a AND b AND c", {"a": "", "b": "", "c": ""}, True),
    ("a AND b AND c", {"a": "", "c": ""}, False),
    ("a OR b", {"b": ""}, True),
    ("a OR b", {"c": ""}, False),
    ("a OR b OR c", {"c": ""}, True),
    # precedence: NOT > AND > OR, mixing allowed
    ("a OR b AND c", {"a": ""}, True),
    ("a OR b AND c", {"b": ""}, False),
    ("a OR b AND c", {"b": "", "c": ""}, True),
    ("a AND b OR c", {"c": ""}, True),
    ("a AND b OR c", {"a": ""}, False),
    ("a AND b OR c AND d", {"c": "", "d": ""}, True),
    ("a AND b OR c AND d", {"a": "", "d": ""}, False),
    ("NOT a AND b", {"b": ""}, True),
    ("NOT a AND b", {}, False),
    ("NOT a OR b", {"a": ""}, False),
    ("NOT a OR b", {"a": "", "b": ""}, True),
    ("a OR NOT b AND c", {"c": ""}, True),
    ("a OR NOT b AND c", {"b": "", "c": ""}, False),
    # parentheses
    ("(a OR b) AND c", {"a": ""}, False),
    ("(a OR b) AND c", {"b": "", "c": ""}, True),
    ("a AND (b OR c)", {"a": "", "c": ""}, True),
    ("NOT (a OR b)", {}, True),
    ("NOT (a OR b)", {"b": ""}, False),
    ("((a))", {"a": ""}, True),
    ("(a AND b) AND c", {"a": "", "b": "", "c": ""}, True),
    ("(a)AND(b)", {"a": "", "b": ""}, True),
    ('(n=7)OR(k!="x")', {"k": "x"}, False),
    ('(n=7)OR(k!="x")', {"n": "7", "k": "x"}, True),
    # case-sensitive keys and values
    ("A", {"a": ""}, False),
    ('a = "X"', {"a": "x"}, False),
]


@pytest.mark.parametrize(("text", "labels", "expected"), MATCHES)
def test_matches_and_the_v1_translation_agree(text: str, labels: dict[str, str], expected: bool) -> None:
    assert both(text, labels) is expected


def test_the_empty_query_translates_to_the_empty_filter() -> None:
    for text in ("", " ", "\n\t\r "):
        q = query.parse(text)
        assert q == Query(None)
        assert q.to_filter() == ""
        assert filters.parse(q.to_filter()) is None


def test_matching_does_not_mutate_the_labels() -> None:
    q = query.parse('a != "1" AND NOT b')
    labels = {"a": "2"}
    assert q.matches(labels) and q.matches(labels)
    assert labels == {"a": "2"}


# -- the tree and the translation ---------------------------------------------------------------

a, b, c, d = (Present(k) for k in "abcd")
TREES: list[tuple[str, Node]] = [
    ("a", a),
    ('a = "x"', Equals("a", "x")),
    ("a != 007", Equals("a", "7", negated=True)),
    ("a OR b AND c", AnyOf((a, AllOf((b, c))))),
    ("a AND b OR c", AnyOf((AllOf((a, b)), c))),
    ("a AND b OR c AND d", AnyOf((AllOf((a, b)), AllOf((c, d))))),
    ("NOT a AND b", AllOf((Not(a), b))),
    ("NOT a OR b", AnyOf((Not(a), b))),
    ("NOT (a OR b)", Not(AnyOf((a, b)))),
    ("a AND NOT NOT b", AllOf((a, Not(Not(b))))),
    ("(a OR b) AND c", AllOf((AnyOf((a, b)), c))),
    ("a OR b OR c", AnyOf((a, b, c))),
    ("(a OR b) OR c", AnyOf((AnyOf((a, b)), c))),
    ("((a))", a),
]


@pytest.mark.parametrize(("text", "tree"), TREES)
def test_precedence_and_grouping(text: str, tree: Node) -> None:
    assert query.parse(text).root == tree


TRANSLATIONS: list[tuple[str, str]] = [
    ("a", "attributes:a"),
    ("a-1_B", "attributes:a-1_B"),
    (DEV, f'attributes:"{DEV}"'),
    (f'{DEV} = "mobile"', f'attributes."{DEV}" = "mobile"'),
    ("-a", 'attributes:"-a"'),
    ('"NOT"', "attributes:NOT"),
    ("'my key' != 'v'", 'attributes."my key" != "v"'),
    ("n = 007", 'attributes.n = "7"'),
    ("n != -0", 'attributes.n != "0"'),
    ("a = 'q\"\\\\'", 'attributes.a = "q\\"\\\\"'),
    ("a OR b AND c", "attributes:a OR (attributes:b AND attributes:c)"),
    ("a AND b OR c", "(attributes:a AND attributes:b) OR attributes:c"),
    ("NOT a AND b", "NOT attributes:a AND attributes:b"),
    ("NOT (a OR b)", "NOT (attributes:a OR attributes:b)"),
    ("NOT NOT a", "NOT NOT attributes:a"),
    ("(a OR b) OR c", "(attributes:a OR attributes:b) OR attributes:c"),
]


@pytest.mark.parametrize(("text", "expected"), TRANSLATIONS)
def test_translation(text: str, expected: str) -> None:
    assert query.parse(text).to_filter() == expected
    filters.parse(expected)  # v1 takes it


# -- what does not parse: the position and what was wrong -----------------------------------------

END = -1
INVALID: list[tuple[str, int, str]] = [
    # operators and operands missing or out of place
    ("a AND", END, "expected a label key, NOT or '(', found the end"),
    ("OR a", 0, "found the keyword OR"),
    ("a OR OR b", 5, "found the keyword OR"),
    ("NOT", END, "found the end"),
    ("a b", 2, "expected AND, OR or the end, found 'b'"),
    ('a = "x" b', 8, "expected AND, OR or the end"),
    ('a = "x" = "y"', 8, "found '='"),
    ("a =", END, "expected a quoted string or an integer, found the end"),
    ("a = (b)", 4, "expected a quoted string or an integer, found '('"),
    ("a = mobile", 4, "(quote strings"),
    ("a = 7x", 4, "found '7x'"),
    ("a = 1.5", 4, "found '1.5'"),
    ("a = +7", 4, "unexpected character '+'"),
    ("a = - 7", 4, "found '-'"),
    ("a == 1", 3, "expected a quoted string or an integer, found '='"),
    ("= 1", 0, "expected a label key"),
    ("a !b", 2, "'!=' ('!' alone"),
    ("a < 1", 2, "unexpected character '<'"),
    ("a:b", 1, "unexpected character ':'"),
    ("a, b", 1, "unexpected character ','"),
    ("a\u00a0b", 1, "unexpected character"),
    # keywords: upper case only, reserved as bare keys
    ("a and b", 2, "the keywords are upper case: AND"),
    ("a or b", 2, "the keywords are upper case: OR"),
    ("not a", 4, "the keywords are upper case: NOT"),
    ("AND", 0, "found the keyword AND (quote a key named so)"),
    ("a NOT b", 2, "expected AND, OR or the end, found 'NOT'"),
    ("a Or b", 2, "the keywords are upper case: OR"),
    ("a AND NOT", END, "found the end"),
    # parentheses
    ("(a", END, "expected AND, OR or ')', found the end"),
    ("((a)", END, "expected AND, OR or ')'"),
    ("a)", 1, "expected AND, OR or the end, found ')'"),
    ("(a))", 3, "found ')'"),
    ("()", 1, "expected a label key, NOT or '(', found ')'"),
    ("NOT ()", 5, "found ')'"),
    (")", 0, "found ')'"),
    # strings
    ('"abc', 0, "unterminated string"),
    ("a = 'abc", 4, "unterminated string"),
    ('a = "abc\\"', 4, "unterminated string"),
    ('a = "x\\q"', 6, "invalid escape sequence \\q"),
    ('a = "x\\u0041"', 6, "invalid escape sequence \\u"),
    ('a = "x\\\ny"', 6, "invalid escape sequence"),
    ('"" = "x"', 0, "a label key may not be empty"),
    ("''", 0, "a label key may not be empty"),
    # numbers: int64
    ("n = 9223372036854775808", 4, "outside the int64 range"),
    ("n = -9223372036854775809", 4, "outside the int64 range"),
    ("n = 100000000000000000000000000000", 4, "outside the int64 range"),
    # characters no wire can carry
    ("a = '\ud800'", 5, "U+D800 (a lone surrogate)"),
]


@pytest.mark.parametrize(("text", "where", "what"), INVALID)
def test_invalid(text: str, where: int, what: str) -> None:
    pos = len(text) if where == END else where
    with pytest.raises(QueryError) as info:
        query.parse(text)
    assert isinstance(info.value, InvalidArgument)
    assert info.value.code.number == 3  # INVALID_ARGUMENT
    assert info.value.position == pos, info.value.message
    assert info.value.message.startswith(f"Invalid query at position {pos}: "), info.value.message
    assert what in info.value.message


def test_the_upper_case_hint_is_given_only_for_other_cases() -> None:
    with pytest.raises(QueryError) as info:
        query.parse("a NOT b")
    assert "upper case" not in info.value.message


def test_a_long_token_is_quoted_short_in_the_message() -> None:
    text = "a b" + "c" * 900
    with pytest.raises(QueryError) as info:
        query.parse(text)
    assert len(info.value.message) < 200


# -- bounds against hostile input ----------------------------------------------------------------


def _padded(total_bytes: int, fill: str = "x") -> str:
    """'a = "xxx"' of exactly total_bytes bytes of UTF-8."""
    head = 'a = "'
    count = (total_bytes - len(head) - 1) // len(fill.encode())
    text = head + fill * count + '"'
    assert len(text.encode()) == total_bytes
    return text


def test_at_most_max_query_bytes() -> None:
    assert MAX_QUERY_BYTES == 1024
    ok = _padded(MAX_QUERY_BYTES)
    assert both(ok, {"a": ok[5:-1]})
    for size in (MAX_QUERY_BYTES + 1, 1_000_000):
        with pytest.raises(QueryError, match=f"at most {MAX_QUERY_BYTES} bytes") as info:
            query.parse(_padded(size))
        assert info.value.position == MAX_QUERY_BYTES  # the first character past the limit
    with pytest.raises(QueryError):
        query.parse(" " * (MAX_QUERY_BYTES + 1))


def test_the_limit_counts_bytes_and_the_position_counts_characters() -> None:
    ok = 'a = "' + "é" * 509 + '"'  # 515 characters, 1024 bytes
    assert len(ok.encode()) == MAX_QUERY_BYTES
    assert both(ok, {"a": "é" * 509})
    over = 'a = "' + "é" * 510 + '"'  # 1026 bytes
    with pytest.raises(QueryError) as info:
        query.parse(over)
    assert info.value.position == 5 + 509  # 'a = "' and the 509 characters that fit


@pytest.mark.parametrize("opener", ["(", "NOT ", "NOT (", "(NOT "])
def test_nesting_is_bounded(opener: str) -> None:
    levels = MAX_DEPTH // (opener.count("(") + opener.count("NOT"))
    closers = ")" * opener.count("(")
    ok = opener * levels + "a" + closers * levels
    assert both(ok, {"a": ""}) is (opener.count("NOT") * levels % 2 == 0)
    deep = opener * (levels + 1) + "a" + closers * (levels + 1)
    with pytest.raises(QueryError, match=f"deeper than {MAX_DEPTH} levels") as info:
        query.parse(deep)
    assert info.value.position == len(opener) * levels  # the opener of level MAX_DEPTH + 1


def test_the_deepest_and_the_longest_queries_translate_to_filters_v1_can_compile() -> None:
    deepest = "a"
    for level in range(MAX_DEPTH):  # k31 OR (k30 AND (k29 OR (... (a))))
        deepest = f"k{level} {'AND' if level % 2 else 'OR'} ({deepest})"
    longest = " OR ".join(["a AND b"] * (MAX_QUERY_BYTES // 11))
    assert len(longest.encode()) <= MAX_QUERY_BYTES
    for text in (deepest, longest):
        q = query.parse(text)
        translation = q.to_filter()
        assert len(translation.encode()) > filters.MAX_FILTER_BYTES
        with pytest.raises(InvalidArgument):
            filters.parse(translation)  # the API's limit stays for v1 clients
        every = dict.fromkeys([*"abc", *(f"k{level}" for level in range(MAX_DEPTH))], "")
        odd = {k: "" for k in every if k[1:].isdigit() and int(k[1:]) % 2}
        for labels in ({}, {"a": ""}, {"b": "", "c": ""}, {"a": "", "b": ""}, every, odd, {"k0": ""}):
            assert v1_matches(q, labels) is q.matches(labels)


def test_a_flat_chain_at_the_limit_parses_quickly() -> None:
    text = " OR ".join(["a"] * (MAX_QUERY_BYTES // 5))
    q = query.parse(text)
    assert isinstance(q.root, AnyOf) and len(q.root.parts) == MAX_QUERY_BYTES // 5
    assert both(text, {"a": ""}) and not both(text, {})


# -- generated queries: the tree, Query.matches and the v1 filter agree ----------------------------

KEYS = ["a", "b", "n", DEV, "x-1_y", "-a", "my key", "AND", "not", "é", 'q"t', "it's", "back\\"]
VALUES = ["", "a", "A", "7", "07", "-3", "0", "mobile", "é", "q\"'\\", "x\ny", "\t"]
NUMBERS = [0, 7, -3, 12, 2**63 - 1, -(2**63)]
BARE = re.compile(r"[A-Za-z0-9._/\-]+")


def evaluate(node: Node, labels: Mapping[str, str]) -> bool:
    match node:
        case Present(key):
            return key in labels
        case Equals(key, value, negated):
            return (key in labels and labels[key] == value) is not negated
        case Not(inner):
            return not evaluate(inner, labels)
        case AllOf(parts):
            return all(evaluate(p, labels) for p in parts)
        case AnyOf(parts):
            return any(evaluate(p, labels) for p in parts)
    raise AssertionError(node)


def _literal(s: str, draw: st.DrawFn) -> str:
    quote = draw(st.sampled_from(['"', "'"]))
    out = []
    for ch in s:
        forms = {"\\": ["\\\\"], "\n": ["\n", "\\n"], "\t": ["\t", "\\t"], "\r": ["\\r"]}.get(ch, [ch])
        if ch in "\"'":
            forms = ["\\" + ch] if ch == quote else [ch, "\\" + ch]
        out.append(draw(st.sampled_from(forms)))
    return quote + "".join(out) + quote


def _key(key: str, draw: st.DrawFn) -> str:
    if BARE.fullmatch(key) and key not in query.KEYWORDS and draw(st.booleans()):
        return key
    return _literal(key, draw)


def _value(value: str, draw: st.DrawFn) -> str:
    if re.fullmatch(r"-?[0-9]+", value) and str(int(value)) == value and draw(st.booleans()):
        zeros = "0" * draw(st.integers(0, 3))
        return f"-{zeros}{value[1:]}" if value.startswith("-") else zeros + value
    return _literal(value, draw)


def render(node: Node, draw: st.DrawFn, parent: str = "") -> str:
    """Query text for `node`, with parentheses where precedence needs them and sometimes more."""
    sp = draw(st.sampled_from([" ", "  ", "\t", "\n"]))
    opt = draw(st.sampled_from(["", " "]))
    match node:
        case Present(key):
            text = _key(key, draw)
        case Equals(key, value, negated):
            text = f"{_key(key, draw)}{opt}{'!=' if negated else '='}{opt}{_value(value, draw)}"
        case Not(inner):
            text = f"NOT{sp}{render(inner, draw, 'NOT')}"
        case AllOf(parts):
            text = f"{sp}AND{sp}".join(render(p, draw, "AND") for p in parts)
        case AnyOf(parts):
            text = f"{sp}OR{sp}".join(render(p, draw, "OR") for p in parts)
    binds = {AnyOf: 1, AllOf: 2}.get(type(node), 3)
    needs = {"": 0, "OR": 1, "AND": 2, "NOT": 3}[parent]
    # A junction inside one of its own kind keeps its grouping: a OR (b OR c) is not flat.
    if binds < needs or (binds == needs < 3) or draw(st.integers(0, 5)) == 0:
        text = f"({opt}{text}{opt})"
    return text


keys = st.sampled_from(KEYS)
values = st.one_of(st.sampled_from(VALUES), st.sampled_from(NUMBERS).map(str))
leaves: st.SearchStrategy[Node] = st.one_of(
    st.builds(Present, keys), st.builds(Equals, keys, values, st.booleans())
)
trees: st.SearchStrategy[Node] = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.builds(Not, children),
        st.builds(AllOf, st.lists(children, min_size=2, max_size=3).map(tuple)),
        st.builds(AnyOf, st.lists(children, min_size=2, max_size=3).map(tuple)),
    ),
    max_leaves=8,
)
label_maps = st.lists(st.dictionaries(keys, values, max_size=6), min_size=1, max_size=8)


@given(tree=trees, maps=label_maps, data=st.data())
@HYP
def test_generated_queries_agree_with_the_tree_and_with_v1(
    tree: Node, maps: list[dict[str, str]], data: st.DataObject
) -> None:
    text = render(tree, data.draw)
    q = query.parse(text)
    assert q.root == tree, (text, q.root)
    everything = dict.fromkeys(KEYS, "7")
    for labels in [*maps, {}, everything]:
        expected = evaluate(tree, labels)
        assert q.matches(labels) is expected, (text, labels)
        assert v1_matches(q, labels) is expected, (text, q.to_filter(), labels)


@given(text=st.text(alphabet=st.sampled_from(list("ab()=!'\"\\ -07NOTANDR\n")), max_size=40))
@HYP
def test_any_text_parses_or_fails_with_a_query_error(text: str) -> None:
    try:
        q = query.parse(text)
    except QueryError as e:
        position = e.position
        assert 0 <= position <= len(text)
        return
    for labels in ({}, {"a": ""}, {"b": "0"}, {"a": "7", "b": ""}):
        assert v1_matches(q, labels) is q.matches(labels), (text, q.to_filter())


@given(key=st.text(min_size=1, max_size=8), value=st.text(max_size=8), data=st.data())
@HYP
def test_any_key_and_value_round_trip(key: str, value: str, data: st.DataObject) -> None:
    if re.search(r"[\ud800-\udfff]", key + value):
        return
    text = f"{_key(key, data.draw)} = {_literal(value, data.draw)}"
    assert both(text, {key: value})
    assert not both(text, {key: value + "x"})
    assert not both(text, {})
    assert both(f"NOT {text}", {})
