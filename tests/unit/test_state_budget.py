"""A response's byte budget in PartitionState.take: what does not fit is neither leased nor
counted as a delivery attempt (gateway.leases.state.Budget)."""

from __future__ import annotations

import pytest

from gateway.leases.commands import Ack
from gateway.leases.state import Budget, PartitionState
from gateway.translate.records import MAX_GRPC_MESSAGE, RECEIVED_MESSAGE_OVERHEAD, record

T0 = 1_000_000
DL = T0 + 10_000


def _sized(
    *sizes: int, max_attempts: int | None = None, keys: tuple[str | None, ...] = ()
) -> PartitionState[tuple[int, bytes | None]]:
    """Records whose cost is their size, optionally keyed (ordered delivery)."""
    s: PartitionState[tuple[int, bytes | None]] = PartitionState(0, 0, key_of=lambda r: r[1])
    s.max_attempts = max_attempts
    ks = keys or (None,) * len(sizes)
    s.add_records((i, (n, k.encode() if k else None)) for i, (n, k) in enumerate(zip(sizes, ks, strict=True)))
    return s


def _cost(r: tuple[int, bytes | None]) -> int:
    return r[0]


def test_only_what_fits_is_leased() -> None:
    s = _sized(9, 9, 9)
    budget = Budget(20, _cost)
    taken = s.take(10, T0, DL, budget)
    assert [o for o, _, _ in taken] == [0, 1]
    assert budget.left == 2 and budget.paid == 2
    assert s.lease_of(2) is None and 2 not in s.attempts, "the third is untouched"
    assert s.ready_count == 1
    assert [(o, g) for o, g, _ in s.take(10, T0, DL, Budget(20, _cost))] == [(2, 1)]


def test_one_message_always_goes_whatever_it_costs() -> None:
    s = _sized(50, 1)
    taken = s.take(10, T0, DL, Budget(20, _cost))
    assert [o for o, _, _ in taken] == [0], "alone, and nothing after it in the same response"


def test_later_partitions_still_fill_what_is_left() -> None:
    budget = Budget(20, _cost)
    big, small = _sized(15, 15), _sized(4, 4)
    assert [o for o, _, _ in big.take(10, T0, DL, budget)] == [0]
    assert [o for o, _, _ in small.take(10, T0, DL, budget)] == [0], "4 fits the 5 left; 4+4 does not"
    assert budget.left == 1


def test_a_message_that_did_not_fit_spends_no_attempt_toward_dead_lettering() -> None:
    s = _sized(9, 9, 9, max_attempts=1)
    assert [o for o, _, _ in s.take(10, T0, DL, Budget(20, _cost))] == [0, 1]
    assert 2 not in s.attempts, "the third did not fit beside the first two"
    s.apply(Ack(0, ((0, 2),)), T0)
    assert s.take(10, T0, DL, Budget(20, _cost)) == [(2, 1, (9, None))], "its first delivery"
    assert s.take_dead() == []


def test_ordered_key_that_did_not_fit_keeps_its_order() -> None:
    s = _sized(9, 9, 9, keys=("k", "k", "k"))
    assert [o for o, _, _ in s.take(10, T0, DL, Budget(20, _cost))] == [0, 1]
    assert s.take(10, T0, DL, Budget(20, _cost)) == [], "2 waits for 0 and 1 to be acked"


def test_a_records_wire_size_covers_what_a_received_message_carries() -> None:
    r = record(0, 5, 0, b"key", b"x" * 1000, [("a", b"\xff" * 30), ("b", None)])
    assert r.wire_size >= 1000 + 3 + 2 * 1 + 40 + 2 + RECEIVED_MESSAGE_OVERHEAD
    assert record(0, 5, 0, None, None, None).wire_size == RECEIVED_MESSAGE_OVERHEAD


def test_the_response_limit_is_a_setting_within_what_grpc_sends() -> None:
    from gateway.settings import Settings, SettingsError

    assert Settings().pull_response_max_bytes == 4 * 1024 * 1024, "gRPC's default receive limit"
    Settings(pull_response_max_bytes=MAX_GRPC_MESSAGE).validate()
    for wrong in (MAX_GRPC_MESSAGE + 1, 1000):
        with pytest.raises(SettingsError, match="--pull-response-max-bytes"):
            Settings(pull_response_max_bytes=wrong).validate()
