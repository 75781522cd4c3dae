"""Ack ids (gateway.translate.ackids)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.translate import ackids

HYP = hsettings(max_examples=200, deadline=None, database=None)

tags = st.from_regex(r"[0-9a-f]{8}", fullmatch=True)
partitions = st.integers(0, 2**31 - 1)  # Kafka partitions are int32
offsets = st.integers(0, 2**63 - 1)  # Kafka offsets are int64
generations = st.integers(1, 2**32 - 1)


@HYP
@given(tag=tags, partition=partitions, offset=offsets, generation=generations)
def test_round_trip(tag: str, partition: int, offset: int, generation: int) -> None:
    ack_id = ackids.encode(tag, partition, offset, generation)
    assert ack_id.isascii()
    assert len(ack_id) <= 64
    assert ackids.decode(ack_id) == ackids.AckRef(tag, partition, offset, generation)


@HYP
@given(tags, st.lists(st.tuples(st.integers(0, 300), offsets, generations), max_size=20))
def test_encode_each_is_encode_of_each(tag: str, refs: list[tuple[int, int, int]]) -> None:
    deliveries = [(p, o, g, object()) for p, o, g in refs]
    assert ackids.encode_each(tag, deliveries) == [ackids.encode(tag, p, o, g) for p, o, g in refs]


def test_longest_id() -> None:
    ack_id = ackids.encode("ffffffff", 2**32 - 1, 2**64 - 1, 2**32 - 1)
    assert len(ack_id) == 43
    assert ackids.decode(ack_id).offset == 2**64 - 1


def test_example() -> None:
    assert ackids.encode("0123abcd", 10, 255, 1) == "0123abcd-a-ff-1"


@HYP
@given(
    a=st.tuples(tags, partitions, offsets, generations),
    b=st.tuples(tags, partitions, offsets, generations),
)
def test_distinct_deliveries_have_distinct_ids(
    a: tuple[str, int, int, int], b: tuple[str, int, int, int]
) -> None:
    assert (ackids.encode(*a) == ackids.encode(*b)) == (a == b)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "0123abcd",
        "0123abcd-1-2",  # too few parts
        "0123abcd-1-2-3-4",  # too many parts
        "0123abcd--2-3",
        "0123ABCD-1-2-3",  # uppercase
        "0123abcd-A-2-3",
        "0123abcd-1-2-F",
        "0123abcg-1-2-3",  # non-hex
        "0123abcd-1-x-3",
        "0123abc-1-2-3",  # short tag
        "0123abcde-1-2-3",  # long tag
        "0123abcd-1-2-0",  # generation 0
        "0123abcd-1-2-00000000",
        "0123abcd-+1-2-3",  # signs
        "0123abcd--1-2-3",
        "0123abcd-1-2--3",
        "0123abcd-1-2-+3",
        " 0123abcd-1-2-3",  # spaces
        "0123abcd-1-2-3 ",
        "0123abcd-1 -2-3",
        "0123abcd-1-2-3\n",
        "0123abcd-123456789-2-3",  # overlong parts
        "0123abcd-1-12345678901234567-3",
        "0123abcd-1-2-123456789",
        "0123abcd-1-2-3" + "0" * 60,
        "0123abcd-0x1-2-3",
        "0123abcd-1_0-2-3",
        "0123abcd-\u0661-2-3",  # ARABIC-INDIC DIGIT ONE
        "0123abcd:1:2:3",
    ],
)
def test_malformed(bad: str) -> None:
    with pytest.raises(ackids.MalformedAckId):
        ackids.decode(bad)


def test_malformed_is_value_error() -> None:
    assert issubclass(ackids.MalformedAckId, ValueError)


@HYP
@given(st.text(max_size=80))
def test_decode_accepts_only_the_documented_form(text: str) -> None:
    form = re.compile(r"[0-9a-f]{8}-[0-9a-f]{1,8}-[0-9a-f]{1,16}-[0-9a-f]{1,8}")
    try:
        ref = ackids.decode(text)
    except ackids.MalformedAckId:
        assert not form.fullmatch(text) or int(text.rsplit("-", 1)[1], 16) == 0
        return
    assert form.fullmatch(text)
    assert ref.generation >= 1


def _expected(ack_ids: list[str], tag: str) -> str | dict[int, ackids.Named]:
    """What `by_partition` gives, worked out one id at a time with `decode`: the first id it
    refuses, or the ids of `tag` by partition, in order."""
    refs = []
    for ack_id in ack_ids:
        try:
            refs.append((ack_id, ackids.decode(ack_id)))
        except ackids.MalformedAckId:
            return ack_id
    out: dict[int, ackids.Named] = {}
    for ack_id, ref in refs:
        if ref.tag == tag:
            named = out.setdefault(ref.partition, ackids.Named([], [], []))
            named.ids.append(ack_id)
            named.offsets.append(ref.offset)
            named.generations.append(ref.generation)
    return out


valid_ids = st.builds(
    ackids.encode, st.sampled_from(["0123abcd", "fedc4321"]), st.integers(0, 300), offsets, generations
)
# Near misses: the documented form with one character changed, inserted or dropped, or a newline,
# which the batch decoder splits on.
near_misses = st.tuples(
    valid_ids, st.integers(0, 42), st.sampled_from(["", "0", "g", "-", "\n", "\r", " "])
).map(lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + 1 :])


@HYP
@given(st.lists(st.one_of(valid_ids, near_misses, st.text(max_size=50)), max_size=30))
def test_by_partition_is_decode_of_each(ack_ids: list[str]) -> None:
    """The whole call's ids at once: those of the tag, by partition and in order, or
    MalformedAckId naming the first id that `decode` refuses, whatever its tag."""
    expected = _expected(ack_ids, "0123abcd")
    if isinstance(expected, str):
        with pytest.raises(ackids.MalformedAckId) as bad:
            ackids.by_partition(ack_ids, "0123abcd")
        assert str(bad.value) == expected
        return
    assert ackids.by_partition(ack_ids, "0123abcd") == expected


def test_by_partition_of_many_valid_ids() -> None:
    ids = [ackids.encode("0123abcd", i % 7, 10**12 + i, 1 + i % 300) for i in range(5000)]
    got = ackids.by_partition(ids, "0123abcd")
    assert got == _expected(ids, "0123abcd")
    assert sorted(got) == list(range(7))
    assert sum(len(n.ids) for n in got.values()) == 5000
    assert ackids.by_partition(ids, "fedc4321") == {}  # another subscription's: none of ours
    with pytest.raises(ackids.MalformedAckId) as bad:
        ackids.by_partition([*ids[:10], "0123abcd-1-2-0", *ids[10:]], "0123abcd")  # generation 0
    assert str(bad.value) == "0123abcd-1-2-0"
    with pytest.raises(ackids.MalformedAckId) as bad:  # of another tag, and still refused
        ackids.by_partition([*ids[:10], "fedc4321-1-2-000", *ids[10:]], "0123abcd")
    assert str(bad.value) == "fedc4321-1-2-000"
    # Two ids in one string beside one that is none: as many matches as ids, but not one each.
    with pytest.raises(ackids.MalformedAckId) as bad:
        ackids.by_partition([f"{ids[0]}\n{ids[1]}", "x"], "0123abcd")
    assert str(bad.value) == f"{ids[0]}\n{ids[1]}"


def test_by_partition_joins_a_partition_written_two_ways() -> None:
    """Leading zeros are allowed (the form says 1-8 hex digits): "01" and "1" name one partition."""
    got = ackids.by_partition(["0123abcd-1-5-1", "0123abcd-2-9-1", "0123abcd-01-6-2"], "0123abcd")
    assert got == {
        1: ackids.Named(["0123abcd-1-5-1", "0123abcd-01-6-2"], [5, 6], [1, 2]),
        2: ackids.Named(["0123abcd-2-9-1"], [9], [1]),
    }


def test_tag_form() -> None:
    tag = ackids.subscription_tag("projects/p/subscriptions/s", "0123abcd")
    assert re.fullmatch(r"[0-9a-f]{8}", tag)
    assert tag == ackids.subscription_tag("projects/p/subscriptions/s", "0123abcd")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("projects/p/subscriptions/s", "u1"), ("projects/p/subscriptions/s", "u2")),
        (("projects/p/subscriptions/s", "u1"), ("projects/p/subscriptions/t", "u1")),
        (("ab", "c"), ("a", "bc")),  # the separator matters
        (("projects/p/subscriptions/s", ""), ("projects/p/subscriptions/s", "0")),
    ],
)
def test_tag_differs(a: tuple[str, str], b: tuple[str, str]) -> None:
    assert ackids.subscription_tag(*a) != ackids.subscription_tag(*b)


@hsettings(max_examples=50, deadline=None, database=None)
@given(st.lists(st.tuples(st.text(max_size=30), st.text(max_size=10)), min_size=2, max_size=20, unique=True))
def test_tags_differ_per_incarnation(pairs: list[tuple[str, str]]) -> None:
    # 32-bit tags: a collision among 20 pairs has probability ~1e-7, so any is a defect.
    pairs = [(s.replace("\0", ""), u.replace("\0", "")) for s, u in pairs]
    tags_ = {ackids.subscription_tag(s, u) for s, u in set(pairs)}
    assert len(tags_) == len(set(pairs))
