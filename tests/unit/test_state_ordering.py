"""Ordered delivery and exactly-once lease checks of PartitionState (time injected)."""

from __future__ import annotations

from gateway.leases.commands import Ack, SetDeadline
from gateway.leases.state import PartitionState

T0 = 1_000_000
DL = T0 + 10_000


def _ordered(*keys: str | None) -> PartitionState[tuple[int, bytes | None]]:
    state: PartitionState[tuple[int, bytes | None]] = PartitionState(0, 0, key_of=lambda r: r[1])
    state.add_records((i, (i, k.encode() if k else None)) for i, k in enumerate(keys))
    return state


def _offsets(taken: list[tuple[int, int, object]]) -> list[int]:
    return [o for o, _, _ in taken]


def test_a_key_waits_while_an_earlier_message_of_it_is_out() -> None:
    state = _ordered("a", "a", "b", None)
    assert _offsets(state.take(1, T0, DL)) == [0]
    assert _offsets(state.take(10, T0, DL)) == [2, 3], "b and unkeyed flow; the second a waits"
    state.apply(Ack(0, ((0, 1),)), T0)
    assert _offsets(state.take(10, T0, DL)) == [1]


def test_consecutive_messages_of_a_key_go_out_in_one_batch() -> None:
    state = _ordered("a", "a", "a")
    assert _offsets(state.take(10, T0, DL)) == [0, 1, 2]


def test_a_nack_redelivers_that_message_and_every_later_one_of_its_key_in_order() -> None:
    state = _ordered("a", "a", "a", "b")
    first = state.take(10, T0, DL)
    assert _offsets(first) == [0, 1, 2, 3]
    state.apply(SetDeadline(0, ((1, 1),), T0), T0 + 1)  # nack the middle a
    assert state.take(10, T0 + 2, DL) == [], "0 of the same key is still out: 1 and 2 wait"
    state.apply(Ack(0, ((0, 1),)), T0 + 3)
    again = state.take(10, T0 + 4, DL)
    assert _offsets(again) == [1, 2], "1 and the later 2 come back, in order"
    assert [g for _, g, _ in again] == [2, 2]


def test_expiry_of_a_keyed_message_brings_back_the_rest_of_the_key() -> None:
    state = _ordered("a", "a")
    state.take(10, T0, DL)
    state.apply(SetDeadline(0, ((1, 1),), DL + 50_000), T0)  # the later one was extended
    assert _offsets(state.take(10, DL + 1, DL + 20_000)) == [0, 1]


def test_without_key_of_nothing_is_held_back() -> None:
    state: PartitionState[tuple[int, bytes]] = PartitionState(0, 0)
    state.add_records((i, (i, b"a")) for i in range(3))
    assert _offsets(state.take(1, T0, DL)) == [0]
    assert _offsets(state.take(10, T0, DL)) == [1, 2]


def test_lease_validity_and_hold() -> None:
    state = _ordered(None, None)
    state.take(10, T0, DL)
    assert state.judge([(0, 1), (0, 2)], True, T0) == [True, False], "another generation"
    assert state.judge([(0, 1)], True, DL) == [False], "expired"
    assert state.judge([(0, 1)], True, T0, hold_until=DL + 5_000) == [True]
    assert state.judge([(0, 1)], True, DL + 1) == [True], "held"
    assert state.judge([(0, 7)], True, T0, hold_until=DL + 50_000) == [False]  # holds nothing
    assert state.judge([(0, 1)], True, DL + 5_000) == [False]


def _ack(state: PartitionState[tuple[int, bytes | None]], *offsets: int, at: int = T0) -> list[int]:
    """Ack as the ack path does for an ordered subscription: only what order_acks lets through."""
    now, _ = state.order_acks(offsets)
    if now:
        state.apply(Ack(0, tuple((o, o + 1) for o in now)), at)
    return now


def test_an_ack_behind_an_unacked_message_of_its_key_is_held_back() -> None:
    state = _ordered("a", "a", "a", "b")
    state.take(10, T0, DL)
    now, held = state.order_acks([1, 2, 3])
    assert (now, held) == ([3], [1, 2]), "b has nothing earlier out; 1 and 2 wait for 0"
    assert not state.is_acked(1) and state.lease_of(1) is not None


def test_acking_the_earlier_message_releases_the_held_acks() -> None:
    state = _ordered("a", "a", "a")
    state.take(10, T0, DL)
    assert _ack(state, 2) == []
    assert _ack(state, 0) == [0], "1 is still out: 2 waits for it too"
    assert _ack(state, 1) == [1, 2]
    assert state.watermark == 3


def test_acks_in_one_request_count_together() -> None:
    state = _ordered("a", "a", "a")
    state.take(10, T0, DL)
    assert state.order_acks([2, 0, 1]) == ([0, 1, 2], [])


def test_a_nack_redelivers_the_later_messages_of_its_key_even_if_acked() -> None:
    state = _ordered("a", "a", "a", "a")
    state.take(10, T0, DL)
    assert _ack(state, 0) == [0]
    assert _ack(state, 2, 3) == [], "1 is still out"
    state.apply(SetDeadline(0, ((1, 1),), T0), T0 + 1)  # nack 1
    again = state.take(10, T0 + 2, DL)
    assert _offsets(again) == [1, 2, 3], "the nacked one and every later one, acked or not, in order"
    assert [g for _, g, _ in again] == [2, 2, 2]
    assert state.order_acks([2, 3]) == ([], [2, 3]), "the old acks are gone: 1 is out again"


def test_a_held_ack_does_not_expire_but_comes_back_with_an_expired_earlier_message() -> None:
    state = _ordered("a", "a")
    state.take(10, T0, DL)
    state.apply(SetDeadline(0, ((0, 1),), DL + 50_000), T0)  # 0 is extended, 1 is not
    _ack(state, 1)
    assert state.next_expiry() == DL + 50_000, "the held ack's own deadline no longer counts"
    assert state.take(10, DL + 1, DL + 20_000) == []
    assert _offsets(state.take(10, DL + 50_001, DL + 90_000)) == [0, 1]


def test_held_acks_freed_by_an_ack_read_from_the_log_are_handed_over() -> None:
    state = _ordered("a", "a", "a")
    state.take(10, T0, DL)
    _ack(state, 1, 2)
    assert state.take_freed() == []
    state.apply(Ack(0, ((0, 1),)), T0)  # e.g. a Spark job's ack, read from the log
    assert state.take_freed() == [1, 2]
    assert state.take_freed() == []
    assert state.next_expiry() == DL, "to be written: their leases run again until applied"


def test_unordered_acks_are_never_held() -> None:
    state: PartitionState[tuple[int, bytes]] = PartitionState(0, 0)
    state.add_records((i, (i, b"a")) for i in range(3))
    state.take(10, T0, DL)
    assert state.order_acks([2]) == ([2], [])
