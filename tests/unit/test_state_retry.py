"""Retry backoff and dead-lettering in PartitionState (time injected as ints)."""

from __future__ import annotations

from typing import Any

from gateway.leases.commands import Ack, Checkpoint, Lease, SetDeadline
from gateway.leases.state import PartitionState

P = 0
T0 = 1_000_000
DL = T0 + 10_000  # a lease deadline far enough not to interfere


def backoff(n: int) -> int:
    return 1000 * n


def _plain(n: int = 3, *, retry: bool = True, max_attempts: int | None = None) -> PartitionState[str]:
    s: PartitionState[str] = PartitionState(P, 0)
    if retry:
        s.backoff = backoff
    s.max_attempts = max_attempts
    s.add_records((o, f"r{o}") for o in range(n))
    return s


Keyed = PartitionState[tuple[int, bytes | None]]


def _ordered(*keys: str | None, retry: bool = True, max_attempts: int | None = None) -> Keyed:
    s: Keyed = PartitionState(P, 0, key_of=lambda r: r[1])
    if retry:
        s.backoff = backoff
    s.max_attempts = max_attempts
    s.add_records((i, (i, k.encode() if k else None)) for i, k in enumerate(keys))
    return s


def _offsets(taken: list[tuple[int, int, object]]) -> list[int]:
    return [o for o, _, _ in taken]


def _gens(taken: list[tuple[int, int, object]]) -> list[int]:
    return [g for _, g, _ in taken]


def nack(s: PartitionState[Any], offset: int, gen: int, now: int, epoch: int = 0) -> None:
    s.apply(SetDeadline(P, ((offset, gen),), now, epoch), now)


def ack(*offsets: int) -> Ack:
    return Ack(P, tuple((o, o + 1) for o in offsets))


# -- backoff after a nack or an expiry ---------------------------------------------------------


def test_nack_is_redelivered_only_after_the_backoff() -> None:
    s = _plain(3)
    assert s.take(1, T0, DL) == [(0, 1, "r0")]
    nack(s, 0, 1, T0 + 5)  # first failure: 1000 ms
    assert s.lease_of(0) is None
    assert s.ready_count == 2, "the backed-off message is not ready"
    assert _offsets(s.take(1, T0 + 6, DL)) == [1], "other messages flow meanwhile"
    assert s.take(10, T0 + 1004, DL) == [(2, 1, "r2")]
    assert s.take(10, T0 + 1004, DL) == []
    assert s.take(10, T0 + 1005, DL) == [(0, 2, "r0")]


def test_each_failure_waits_longer() -> None:
    s = _plain(1)
    s.take(1, T0, DL)
    nack(s, 0, 1, T0)
    assert s.take(1, T0 + 999, DL) == []
    assert s.take(1, T0 + 1000, DL) == [(0, 2, "r0")]
    nack(s, 0, 2, T0 + 1000)  # second failure: 2000 ms
    assert s.take(1, T0 + 2999, DL) == []
    assert s.next_expiry() == T0 + 3000
    assert s.take(1, T0 + 3000, DL) == [(0, 3, "r0")]
    nack(s, 0, 3, T0 + 3000)  # third: 3000 ms
    assert s.take(1, T0 + 5999, DL) == []
    assert s.take(1, T0 + 6000, DL) == [(0, 4, "r0")]


def test_expiry_is_redelivered_only_after_the_backoff() -> None:
    s = _plain(2)
    assert _offsets(s.take(1, T0, T0 + 100)) == [0]
    assert s.expire(T0 + 100) == 1
    assert s.lease_of(0) is None
    assert s.next_expiry() == T0 + 1100
    assert s.take(10, T0 + 100, DL) == [(1, 1, "r1")], "other messages flow meanwhile"
    assert s.take(10, T0 + 1099, DL) == []
    assert s.take(10, T0 + 1100, DL) == [(0, 2, "r0")]


def test_expiry_found_by_take_backs_off_from_then() -> None:
    s = _plain(1)
    s.take(1, T0, T0 + 100)
    assert s.take(1, T0 + 100, DL) == [], "expired just now: it waits"
    assert s.next_expiry() == T0 + 1100
    assert s.take(1, T0 + 1099, DL) == []
    assert s.take(1, T0 + 1100, DL) == [(0, 2, "r0")]


def test_stale_nack_does_not_back_off() -> None:
    s = _plain(1)
    s.take(1, T0, T0 + 100)
    s.take(1, T0 + 100, DL)  # expired: backing off
    assert s.take(1, T0 + 1100, DL) == [(0, 2, "r0")]
    nack(s, 0, 1, T0 + 1200)  # the first delivery's ack id: stale
    assert s.lease_of(0) == (2, DL)
    assert s.take(1, T0 + 1200, DL) == []


def test_a_zero_backoff_redelivers_at_once() -> None:
    s = _plain(1, retry=False)
    s.backoff = lambda n: 0
    s.take(1, T0, DL)
    nack(s, 0, 1, T0)
    assert s.take(1, T0, DL) == [(0, 2, "r0")]
    assert s.next_expiry() == DL


def test_without_backoff_a_nack_redelivers_at_once() -> None:
    s = _plain(1, retry=False)
    s.take(1, T0, DL)
    nack(s, 0, 1, T0)
    assert s.take(1, T0, DL) == [(0, 2, "r0")]


def test_release_after_a_failed_log_write_ignores_the_backoff() -> None:
    s = _plain(3)
    taken = s.take(2, T0, DL)
    assert _offsets(taken) == [0, 1]
    s.release((o, g) for o, g, _ in taken)
    assert s.lease_of(0) is None and s.lease_of(1) is None
    assert s.next_expiry() is None, "nothing leased, nothing backing off"
    again = s.take(10, T0, DL)
    assert _offsets(again) == [0, 1, 2]
    assert _gens(again) == [2, 2, 1], "a new generation: the old one may be in the log"


def test_release_of_a_superseded_generation_changes_nothing() -> None:
    s = _plain(1)
    s.take(1, T0, DL)
    s.release([(0, 7)])
    assert s.lease_of(0) == (1, DL)
    assert s.take(1, T0, DL) == []


def test_ack_while_backing_off_forgets_the_message() -> None:
    s = _plain(2)
    s.take(1, T0, DL)
    nack(s, 0, 1, T0)
    s.apply(ack(0), T0 + 10)
    assert s.watermark == 1
    assert s.take(10, T0 + 5000, DL) == [(1, 1, "r1")]
    assert s.take(10, T0 + 5000, DL) == []
    assert s.attempts == {1: 1}


def test_backoff_survives_a_new_epoch() -> None:
    s = _plain(2)
    s.apply(Checkpoint(P, 0, (), (), (), epoch=1), T0)  # a seek: everything from 0 again
    s.add_records((o, f"r{o}") for o in range(2))
    s.take(1, T0, DL)
    nack(s, 0, 1, T0)  # of the old epoch: ignored
    assert s.lease_of(0) == (1, DL)
    nack(s, 0, 1, T0, epoch=1)
    assert _offsets(s.take(10, T0 + 1, DL)) == [1]
    assert s.take(10, T0 + 999, DL) == []
    assert s.take(10, T0 + 1000, DL) == [(0, 2, "r0")]


# -- next_expiry -------------------------------------------------------------------------------


def test_next_expiry_is_the_earliest_of_leases_and_backoffs() -> None:
    s = _plain(3)
    s.take(1, T0, T0 + 5000)  # 0 leased until T0+5000
    s.take(1, T0, T0 + 500)  # 1 leased until T0+500
    assert s.next_expiry() == T0 + 500
    nack(s, 1, 1, T0 + 100)  # due T0+1100
    assert s.next_expiry() == T0 + 1100, "the backoff is due before the lease of 0 expires"
    s.take(1, T0 + 200, T0 + 900)  # 2 leased until T0+900
    assert s.next_expiry() == T0 + 900
    assert s.expire(T0 + 900) == 1  # 2 backs off until T0+1900
    assert s.next_expiry() == T0 + 1100
    assert _offsets(s.take(10, T0 + 1100, T0 + 8000)) == [1]
    assert s.next_expiry() == T0 + 1900
    assert _offsets(s.take(10, T0 + 1900, T0 + 8000)) == [2]
    assert s.next_expiry() == T0 + 5000
    s.apply(ack(0, 1, 2), T0 + 2000)
    assert s.next_expiry() is None


def test_next_expiry_with_backoff_later_than_the_lease() -> None:
    s = _plain(2)
    s.take(1, T0, DL)
    s.take(1, T0, T0 + 300)
    nack(s, 0, 1, T0 + 200)  # due T0+1200, after 1's lease ends at T0+300
    assert s.next_expiry() == T0 + 300


# -- ordered delivery --------------------------------------------------------------------------


def test_later_messages_of_a_key_wait_behind_a_backed_off_one() -> None:
    s = _ordered("a", "a", "b")
    assert _offsets(s.take(10, T0, DL)) == [0, 1, 2]
    nack(s, 0, 1, T0 + 1)  # 0 backs off until T0+1001; 1 comes back with it
    assert s.lease_of(0) is None and s.lease_of(1) is None
    assert s.lease_of(2) == (1, DL), "another key is untouched"
    s.add_records([(3, (3, b"a")), (4, (4, b"c"))])
    assert _offsets(s.take(10, T0 + 2, DL)) == [4], "key c flows; key a waits"
    assert s.take(10, T0 + 1000, DL) == []
    assert s.next_expiry() == T0 + 1001
    again = s.take(10, T0 + 1001, DL)
    assert _offsets(again) == [0, 1, 3], "key a resumes in order"
    assert _gens(again) == [2, 2, 1]


def test_a_backed_off_later_message_waits_for_the_earlier_one() -> None:
    s = _ordered("a", "a", "a")
    assert _offsets(s.take(10, T0, DL)) == [0, 1, 2]
    nack(s, 1, 1, T0)  # 1 backs off until T0+1000; 2 comes back
    assert s.lease_of(0) == (1, DL)
    assert s.lease_of(2) is None
    s.apply(ack(0), T0 + 10)
    assert s.take(10, T0 + 10, DL) == [], "2 may not overtake the backed-off 1"
    assert s.take(10, T0 + 999, DL) == []
    assert _offsets(s.take(10, T0 + 1000, DL)) == [1, 2]


def test_an_expired_key_backs_off_and_comes_back_in_order() -> None:
    s = _ordered("a", "a", None)
    assert _offsets(s.take(10, T0, T0 + 100)) == [0, 1, 2]
    s.apply(SetDeadline(P, ((1, 1), (2, 1)), DL), T0)  # 1 and 2 extended, 0 not
    assert s.expire(T0 + 100) == 1
    assert s.lease_of(1) is None, "the rest of the key comes back too"
    assert s.lease_of(2) == (1, DL)
    assert s.take(10, T0 + 1099, DL) == []
    assert _offsets(s.take(10, T0 + 1100, DL)) == [0, 1]


def test_ack_of_a_backed_off_keyed_message_frees_its_key() -> None:
    s = _ordered("a", "a")
    s.take(10, T0, DL)
    nack(s, 0, 1, T0)
    assert s.take(10, T0 + 1, DL) == []
    s.apply(ack(0), T0 + 2)
    assert s.take(10, T0 + 3, DL) == [(1, 2, (1, b"a"))]


def test_release_of_a_keyed_message_ignores_backoff_and_keeps_order() -> None:
    s = _ordered("a", "a")
    taken = s.take(10, T0, DL)
    s.release((o, g) for o, g, _ in taken)
    again = s.take(10, T0, DL)
    assert _offsets(again) == [0, 1]
    assert _gens(again) == [2, 2]


# -- dead-lettering ----------------------------------------------------------------------------


def _fail_three_times(s: PartitionState[str], offset: int = 0) -> None:
    for gen in (1, 2, 3):
        taken = s.take(1, T0 + gen * 10_000, T0 + gen * 10_000 + 100)
        assert taken == [(offset, gen, f"r{offset}")]
        nack(s, offset, gen, T0 + gen * 10_000 + 1)


def test_after_max_attempts_a_message_goes_to_the_dead_letters_once() -> None:
    s = _plain(1, retry=False, max_attempts=3)
    assert s.take_dead() == []
    _fail_three_times(s)
    assert s.take(10, T0 + 50_000, DL + 50_000) == [], "not delivered a fourth time"
    assert s.next_expiry() is None
    assert s.take_dead() == [(0, 3, "r0")]
    assert s.take_dead() == [], "in flight: not handed over twice"
    assert s.take(10, T0 + 60_000, DL + 60_000) == []
    s.return_dead([0])  # forwarding failed
    assert s.take_dead() == [(0, 3, "r0")]
    s.apply(ack(0), T0 + 70_000)  # forwarded, then acked
    assert s.take_dead() == []
    s.return_dead([0])
    assert s.take_dead() == []
    assert s.watermark == 1
    assert s.attempts == {} and s.records == {}


def test_dead_lettering_wins_over_backoff_and_other_messages_flow() -> None:
    s = _plain(3, max_attempts=2)
    assert _offsets(s.take(1, T0, DL)) == [0]
    nack(s, 0, 1, T0)  # 1st failure: backs off
    assert _offsets(s.take(1, T0 + 1, DL)) == [1]
    assert s.take(1, T0 + 1000, DL) == [(0, 2, "r0")]
    nack(s, 0, 2, T0 + 1000)  # 2nd failure: dead, no backoff
    assert s.next_expiry() == DL, "only the lease of 1 is left to wait for"
    assert s.take_dead() == [(0, 2, "r0")]
    assert _offsets(s.take(10, T0 + 10_000, DL + 10_000)) == [2]
    assert s.take(10, T0 + 100_000, DL + 100_000) == [(1, 2, "r1")], "1 expired (first failure)"


def test_expiry_counts_as_a_failed_delivery() -> None:
    s = _plain(1, retry=False, max_attempts=2)
    s.take(1, T0, T0 + 100)
    assert s.take(1, T0 + 100, T0 + 200) == [(0, 2, "r0")]
    assert s.expire(T0 + 200) == 1
    assert s.take(1, T0 + 200, T0 + 300) == []
    assert s.take_dead() == [(0, 2, "r0")]


def test_ack_of_a_dead_message_in_flight_removes_it() -> None:
    s = _plain(2, retry=False, max_attempts=1)
    s.take(2, T0, DL)
    nack(s, 0, 1, T0)
    nack(s, 1, 1, T0)
    assert _offsets(s.take_dead()) == [0, 1]
    s.apply(ack(1), T0)
    s.return_dead([0, 1])
    assert s.take_dead() == [(0, 1, "r0")]


def test_a_dead_keyed_message_holds_its_key_until_acked() -> None:
    s = _ordered("a", "a", "b", retry=False, max_attempts=1)
    assert _offsets(s.take(1, T0, DL)) == [0]
    assert _offsets(s.take(10, T0, DL)) == [2], "1 waits behind 0"
    nack(s, 0, 1, T0)
    assert s.take(10, T0 + 1, DL) == []
    assert s.take_dead() == [(0, 1, (0, b"a"))]
    assert s.take(10, T0 + 2, DL) == [], "1 waits until 0 is dead-lettered"
    s.apply(ack(0), T0 + 3)
    assert s.take(10, T0 + 4, DL) == [(1, 1, (1, b"a"))]


def test_a_key_stays_in_order_when_a_pulled_back_message_used_up_its_attempts() -> None:
    s = _ordered("a", "a", "a", retry=False, max_attempts=2)
    assert _offsets(s.take(2, T0, DL)) == [0, 1]
    nack(s, 0, 1, T0)  # 1 comes back with 0
    assert _offsets(s.take(2, T0 + 1, DL)) == [0, 1]
    nack(s, 0, 2, T0 + 2)  # 0 is used up; 1 comes back again, with 2 deliveries
    assert s.take(10, T0 + 3, DL) == [], "the key waits for 0"
    dead = _offsets(s.take_dead())
    assert 0 in dead
    s.apply(ack(0), T0 + 4)  # 0 dead-lettered
    taken = _offsets(s.take(10, T0 + 5, DL))
    if 2 in taken:
        assert 1 in taken or s.is_acked(1), f"2 overtook the unacked 1 (dead-letter set {dead})"


def test_a_rebuilt_state_hands_used_up_messages_to_the_dead_letters() -> None:
    s: PartitionState[str] = PartitionState(P, 0)
    s.backoff, s.max_attempts = backoff, 3
    s.apply(Checkpoint(P, 0, (), (), ((0, 1, 3), (1, 2, 2), (2, 3, 5))), T0)
    s.add_records((o, f"r{o}") for o in range(4))
    taken = s.take(10, T0, DL)
    assert taken == [(1, 3, "r1"), (3, 1, "r3")]
    assert sorted(s.take_dead()) == [(0, 3, "r0"), (2, 5, "r2")]
    assert s.take_dead() == []
    assert s.take(10, T0 + 1, DL) == []


def test_used_up_messages_go_dead_as_their_records_arrive_without_a_pull() -> None:
    # After a restart nobody may pull again: the dead-letter loop alone must find them.
    s: PartitionState[str] = PartitionState(P, 0)
    s.max_attempts = 3
    s.apply(Checkpoint(P, 0, (), (), ((0, 1, 3), (1, 2, 2))), T0)
    s.add_records((o, f"r{o}") for o in range(2))
    assert s.take_dead() == [(0, 3, "r0")]
    assert s.ready_count == 1


def test_an_expiry_found_without_a_pull_hands_a_last_attempt_to_the_dead_letters() -> None:
    s: PartitionState[str] = PartitionState(P, 0)
    s.max_attempts = 3
    s.apply(Checkpoint(P, 0, (), ((0, 1, 3, T0 + 100),), ((0, 1, 3),)), T0)
    s.add_records([(0, "r0")])
    assert s.take_dead() == []
    assert s.expire(T0 + 100) == 1
    assert s.take_dead() == [(0, 3, "r0")]


def test_a_rebuilt_lease_on_its_last_attempt_goes_dead_on_expiry() -> None:
    s: PartitionState[str] = PartitionState(P, 0)
    s.max_attempts = 3
    s.apply(Checkpoint(P, 0, (), ((0, 1, 3, T0 + 100),), ((0, 1, 3),)), T0)
    s.add_records([(0, "r0")])
    assert s.take(10, T0, DL) == []
    assert s.take_dead() == []
    assert s.take(10, T0 + 100, DL) == []
    assert s.take_dead() == [(0, 3, "r0")]


def test_a_lease_from_the_log_counts_toward_max_attempts() -> None:
    s = _plain(1, retry=False, max_attempts=3)
    s.apply(Lease(P, ((0, 3),), T0 + 100), T0)  # another process delivered it a third time
    assert s.take(1, T0, DL) == []
    nack(s, 0, 3, T0 + 1)
    assert s.take(1, T0 + 2, DL) == []
    assert s.take_dead() == [(0, 3, "r0")]


def test_a_rebuilt_used_up_keyed_message_still_holds_its_key() -> None:
    s: Keyed = PartitionState(P, 0, key_of=lambda r: r[1])
    s.max_attempts = 3
    s.apply(Checkpoint(P, 0, (), (), ((0, 1, 3),)), T0)
    s.add_records([(0, (0, b"a")), (1, (1, b"a")), (2, (2, b"b"))])
    assert _offsets(s.take(10, T0, DL)) == [2], "1 must wait behind the dead-letter-bound 0"
    assert s.take_dead() == [(0, 3, (0, b"a"))]
    s.apply(ack(0), T0 + 1)
    assert _offsets(s.take(10, T0 + 2, DL)) == [1]


def test_releases_do_not_use_up_the_attempts() -> None:
    s = _plain(1, max_attempts=3)
    for gen in (1, 2, 3):
        taken = s.take(1, T0, DL)
        assert taken == [(0, gen, "r0")]
        s.release([(0, gen)])
    assert _offsets(s.take(1, T0, DL)) == [0]
    assert s.take_dead() == []
