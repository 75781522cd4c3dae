"""RangeSet against a plain Python set (gateway.leases.ranges)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.leases.ranges import RangeSet, to_ranges

HYP = hsettings(max_examples=200, deadline=None, database=None)

small = st.integers(0, 60)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), small, st.integers(0, 12)),  # add [a, a + length)
        st.tuples(st.just("add_one"), small, st.just(0)),
        st.tuples(st.just("add_raw"), small, small),  # possibly empty or reversed
        st.tuples(st.just("discard_below"), small, st.just(0)),
        st.tuples(st.just("contains"), st.integers(-2, 80), st.just(0)),
        st.tuples(st.just("first_missing_from"), st.integers(-2, 80), st.just(0)),
    ),
    max_size=60,
)


def check_invariants(rs: RangeSet, model: set[int]) -> None:
    ranges = list(rs)
    assert len(rs) == len(ranges)
    for s, e in ranges:
        assert s < e, ranges  # non-empty
    for (_s1, e1), (s2, _e2) in itertools.pairwise(ranges):
        assert e1 < s2, ranges  # sorted, disjoint and not adjacent
    assert {v for s, e in ranges for v in range(s, e)} == model
    assert rs.count() == len(model)
    assert ranges == to_ranges(model)


def model_first_missing(model: set[int], value: int) -> int:
    while value in model:
        value += 1
    return value


@HYP
@given(ops)
def test_model(operations: list[tuple[str, int, int]]) -> None:
    rs = RangeSet()
    model: set[int] = set()
    for op, a, b in operations:
        if op == "add":
            rs.add(a, a + b)
            model.update(range(a, a + b))
        elif op == "add_one":
            rs.add_one(a)
            model.add(a)
        elif op == "add_raw":
            rs.add(a, b)
            model.update(range(a, b))
        elif op == "discard_below":
            rs.discard_below(a)
            model = {v for v in model if v >= a}
        elif op == "contains":
            assert (a in rs) == (a in model)
        else:
            assert rs.first_missing_from(a) == model_first_missing(model, a)
        check_invariants(rs, model)
        assert rs.end == (max(model) + 1 if model else 0)
    for v in range(-2, 80):
        assert (v in rs) == (v in model)
        assert rs.first_missing_from(v) == model_first_missing(model, v)


@HYP
@given(st.lists(st.tuples(small, small)))
def test_constructor(pairs: list[tuple[int, int]]) -> None:
    rs = RangeSet(pairs)
    model = {v for s, e in pairs for v in range(s, e)}
    check_invariants(rs, model)
    assert rs == RangeSet(to_ranges(model))


@HYP
@given(st.lists(st.integers(-50, 50)))
def test_to_ranges(values: list[int]) -> None:
    ranges = to_ranges(values)
    assert {v for s, e in ranges for v in range(s, e)} == set(values)
    for s, e in ranges:
        assert s < e
    for (_s1, e1), (s2, _e2) in itertools.pairwise(ranges):
        assert e1 < s2


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], []),
        ([3], [(3, 4)]),
        ([5, 3, 4, 4, 9, 10, 0], [(0, 1), (3, 6), (9, 11)]),
    ],
)
def test_to_ranges_examples(values: list[int], expected: list[tuple[int, int]]) -> None:
    assert to_ranges(values) == expected


def test_merge_examples() -> None:
    rs = RangeSet([(0, 2), (10, 12)])
    rs.add(5, 6)
    assert list(rs) == [(0, 2), (5, 6), (10, 12)]
    rs.add(2, 5)  # touches both neighbours
    assert list(rs) == [(0, 6), (10, 12)]
    rs.add(6, 10)
    assert list(rs) == [(0, 12)]
    rs.add(3, 3)
    assert list(rs) == [(0, 12)]
    rs.discard_below(5)
    assert list(rs) == [(5, 12)]
    rs.discard_below(12)
    assert list(rs) == []


def test_contains_non_int() -> None:
    rs = RangeSet([(0, 10)])
    assert "1" not in rs
    assert 1.5 not in rs
    assert None not in rs


def test_equality_and_repr() -> None:
    assert RangeSet([(0, 1), (1, 2)]) == RangeSet([(0, 2)])
    assert RangeSet([(0, 1)]) != RangeSet([(0, 2)])
    assert RangeSet() != [(0, 1)]
    assert repr(RangeSet([(1, 3)])) == "RangeSet([(1, 3)])"
