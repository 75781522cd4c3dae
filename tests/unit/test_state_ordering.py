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
    assert state.lease_valid(0, 1, T0)
    assert not state.lease_valid(0, 2, T0), "another generation"
    assert not state.lease_valid(0, 1, DL), "expired"
    state.hold(0, 1, DL + 5_000)
    assert state.lease_valid(0, 1, DL + 1)
    state.hold(0, 7, DL + 50_000)  # a stale generation holds nothing
    assert not state.lease_valid(0, 1, DL + 5_000)
