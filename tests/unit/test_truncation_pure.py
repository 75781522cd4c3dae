"""The pure parts of the seed API's truncation (docs/truncation.md): truncation events' ack ids
(gateway.translate.ackids), what a TruncationPolicy drops (gateway.leases.trim), the event's
count in the subscription's record and the policy in Policies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.core import policies
from gateway.core.truncation import is_event_ack_id, split_ack_ids
from gateway.leases import trim
from gateway.leases.trim import PartitionView
from gateway.translate import ackids, meta
from gateway.translate.meta import SubscriptionMeta
from gateway.translate.records import record as make_record

HYP = hsettings(max_examples=200, deadline=None, database=None)
uids = st.from_regex(r"[0-9a-f]{8}", fullmatch=True)
seqs = st.integers(1, 2**63 - 1)


# -- event ack ids ------------------------------------------------------------------------------


@HYP
@given(uid=uids, seq=seqs)
def test_event_ids_round_trip_and_are_never_message_ids(uid: str, seq: int) -> None:
    event_id = ackids.encode_event(uid, seq)
    assert event_id.isascii() and is_event_ack_id(event_id)
    assert ackids.decode_event(event_id) == ackids.EventRef(uid, seq)
    with pytest.raises(ackids.MalformedAckId):
        ackids.decode(event_id)


@HYP
@given(
    tag=uids,
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
    generation=st.integers(1, 2**32 - 1),
)
def test_message_ids_are_never_event_ids(tag: str, partition: int, offset: int, generation: int) -> None:
    message_id = ackids.encode(tag, partition, offset, generation)
    assert not is_event_ack_id(message_id)
    with pytest.raises(ackids.MalformedAckId):
        ackids.decode_event(message_id)


@pytest.mark.parametrize(
    "bad", ["trunc:", "trunc:abc", "trunc:abc:", "trunc:abc:0", "trunc:a b:1", "trunc:abc:xyz"]
)
def test_malformed_event_ids_are_refused(bad: str) -> None:
    assert is_event_ack_id(bad)
    with pytest.raises(ackids.MalformedAckId):
        ackids.decode_event(bad)


def test_split_keeps_the_order_of_each_kind() -> None:
    e1, e2 = ackids.encode_event("u", 1), ackids.encode_event("u", 2)
    m1, m2 = ackids.encode("0" * 8, 0, 1, 1), ackids.encode("0" * 8, 0, 2, 1)
    assert split_ack_ids([m1, e1, m2, e2]) == ([e1, e2], [m1, m2])


# -- the record ----------------------------------------------------------------------------------


def _sub(**fields: int) -> SubscriptionMeta:
    return SubscriptionMeta(uid="u", kafka_topic="t", partitions=1, log_topic="l", group_id="g", **fields)


def test_an_event_is_pending_while_raised_exceeds_acked_and_is_the_latest() -> None:
    assert _sub().truncation_pending == 0
    assert _sub(legacy_truncations=3, legacy_truncations_acked=1).truncation_pending == 3
    assert _sub(legacy_truncations=3, legacy_truncations_acked=3).truncation_pending == 0


def test_the_counts_survive_the_json_form_and_are_left_out_at_zero() -> None:
    m = _sub(legacy_truncations=4, legacy_truncations_acked=2)
    assert meta.from_json("subscription", meta.to_json(m)) == m
    assert "legacy_truncations" not in meta.to_json(_sub())


def test_the_policy_comes_from_the_record() -> None:
    proto = pubsub_pb2.Subscription()
    assert not policies.of(proto, None).truncates
    assert not policies.of(proto, None, _sub()).truncates
    by_age = policies.of(proto, None, _sub(legacy_truncate_max_age_seconds=5))
    assert (by_age.truncate_max_age_ms, by_age.truncate_max_bytes, by_age.truncates) == (5000, 0, True)
    by_size = policies.of(proto, None, _sub(legacy_truncate_max_bytes=1000))
    assert (by_size.truncate_max_age_ms, by_size.truncate_max_bytes) == (0, 1000)


# -- what a policy drops ------------------------------------------------------------------------


def test_stored_size_counts_data_key_and_attributes() -> None:
    record = make_record(0, 0, 0, b"key", b"12345", [("a", b"xy"), ("b", None)])
    assert trim.stored_size(record) == 5 + 3 + 1 + 2 + 1
    assert trim.held({7: record}) == [(7, 0, 12)]


def test_by_age_drops_what_is_at_least_that_old() -> None:
    parts = {
        0: PartitionView([(0, 100, 10), (1, 200, 10), (2, 300, 10)], 3),
        1: PartitionView([(5, 250, 10)], 6),
        2: PartitionView([], 0),
    }
    assert trim.by_age(parts, 200) == {0: [0, 1]}
    assert trim.by_age(parts, 99) == {}


def test_by_bytes_drops_the_oldest_across_partitions_until_under() -> None:
    parts = {
        0: PartitionView([(0, 100, 10), (1, 300, 10)], 2),
        1: PartitionView([(4, 200, 10), (5, 400, 10)], 6),
    }
    assert trim.estimate(parts) == 40
    assert trim.by_bytes(parts, 40) == {}
    assert trim.by_bytes(parts, 25) == {0: [0], 1: [4]}
    assert trim.by_bytes(parts, 0) == {0: [0, 1], 1: [4, 5]}


def test_the_unfetched_tail_counts_at_the_held_average_and_its_oldest_part_goes() -> None:
    parts = {
        0: PartitionView([(0, 100, 10), (1, 100, 30)], 2, end=12),  # 10 unfetched at 20 bytes
        1: PartitionView([], 0, end=0),
    }
    assert trim.estimate(parts) == 40 + 200
    # 240 - 100 = 140 too many: both held (40), then 100 bytes = 5 messages of the tail
    assert trim.by_bytes(parts, 100) == {0: [0, 1, 2, 3, 4, 5, 6]}


def test_the_unfetched_tail_is_estimated_rounded_up() -> None:
    # 41 bytes held in 2 records: an unfetched one counts 21 bytes (20.5 rounded up), so a
    # max_bytes of 20 drops it too instead of keeping 20.5 bytes' worth (found by the property below).
    parts = {0: PartitionView([(0, 0, 20), (1, 7, 21)], 2, 3)}
    assert trim.estimate(parts) == 62
    assert trim.by_bytes(parts, 20) == {0: [0, 1, 2]}


def test_nothing_held_means_nothing_to_estimate() -> None:
    assert trim.by_bytes({0: PartitionView([], 0, end=1000)}, 1) == {}


@HYP
@given(
    sizes=st.lists(st.lists(st.integers(0, 500), max_size=20), min_size=1, max_size=4),
    tails=st.lists(st.integers(0, 50), min_size=4, max_size=4),
    max_bytes=st.integers(0, 5000),
)
def test_by_bytes_leaves_at_most_max_bytes_by_the_estimate(
    sizes: list[list[int]], tails: list[int], max_bytes: int
) -> None:
    parts = {
        p: PartitionView([(o, o * 7 + p, s) for o, s in enumerate(held)], len(held), len(held) + tails[p])
        for p, held in enumerate(sizes)
    }
    drops = trim.by_bytes(parts, max_bytes)
    held_left = sum(s for p, v in parts.items() for o, _, s in v.held if o not in drops.get(p, []))
    count = sum(len(v.held) for v in parts.values())
    if count == 0:
        assert drops == {}
        return
    average = sum(s for v in parts.values() for _, _, s in v.held) / count
    tail_left = sum(
        v.unfetched - len([o for o in drops.get(p, []) if o >= v.next_offset]) for p, v in parts.items()
    )
    assert held_left + tail_left * average <= max(max_bytes, 0) + 1e-6 or average == 0
    for p, view in parts.items():  # each partition loses its oldest held records, without a gap
        held_offsets = [o for o, _, _ in view.held]
        gone = [o for o in drops.get(p, []) if o < view.next_offset]
        assert gone == held_offsets[: len(gone)]
