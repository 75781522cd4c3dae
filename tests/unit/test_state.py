"""A partition's delivery state, with time injected as ints (gateway.leases.state)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.leases import logformat
from gateway.leases.commands import Ack, Checkpoint, Lease, SetDeadline
from gateway.leases.state import PartitionState
from gateway.translate import ackids

P = 3
TAG = ackids.subscription_tag("projects/p/subscriptions/s", "0123abcd")


def fresh(offsets: list[int] | range = range(5), watermark: int = 0) -> PartitionState[str]:
    s: PartitionState[str] = PartitionState(P, watermark)
    s.add_records((o, f"r{o}") for o in offsets)
    return s


def offsets_of(taken: list[tuple[int, int, str]]) -> list[int]:
    return [o for o, _g, _r in taken]


def ack(*offsets: int) -> Ack:
    return Ack(P, tuple((o, o + 1) for o in offsets))


# -- delivery ------------------------------------------------------------------------------------


def test_take_oldest_first_generation_1() -> None:
    s = fresh(range(5))
    assert s.ready_count == 5
    taken = s.take(10, now_ms=0, deadline_ms=1000)
    assert taken == [(o, 1, f"r{o}") for o in range(5)]
    assert s.ready_count == 0
    assert s.take(10, now_ms=1, deadline_ms=1000) == []
    assert all(s.lease_of(o) == (1, 1000) for o in range(5))
    assert s.dirty


def test_take_respects_n() -> None:
    s = fresh(range(10))
    assert offsets_of(s.take(3, 0, 1000)) == [0, 1, 2]
    assert offsets_of(s.take(0, 0, 1000)) == []
    assert offsets_of(s.take(4, 0, 1000)) == [3, 4, 5, 6]
    assert offsets_of(s.take(100, 0, 1000)) == [7, 8, 9]


def test_records_added_out_of_turn_are_delivered_in_offset_order() -> None:
    s = fresh(range(3))
    s.take(1, 0, 100)  # offset 0 leased
    s.add_records([(3, "r3"), (4, "r4")])
    s.apply(SetDeadline(P, ((0, 1),), 0), now_ms=10)  # nack 0
    assert offsets_of(s.take(10, 10, 100)) == [0, 1, 2, 3, 4]


def test_ack_advances_watermark() -> None:
    s = fresh(range(5))
    s.take(5, 0, 1000)
    s.apply(ack(1, 2), now_ms=1)
    assert s.watermark == 0
    assert s.is_acked(1) and s.is_acked(2) and not s.is_acked(0)
    assert s.lease_of(1) is None
    s.apply(ack(0), now_ms=1)
    assert s.watermark == 3
    s.apply(Ack(P, ((3, 5),)), now_ms=1)
    assert s.watermark == 5
    assert s.leases == {} and s.attempts == {} and s.records == {}


def test_gaps_count_as_acked() -> None:
    s = fresh([0, 2, 5, 6])
    assert s.watermark == 0
    assert offsets_of(s.take(10, 0, 100)) == [0, 2, 5, 6]
    for gap in (1, 3, 4):
        assert s.is_acked(gap)
    s.apply(ack(0), 1)
    assert s.watermark == 2
    s.apply(ack(2), 1)
    assert s.watermark == 5
    s.apply(ack(6), 1)
    assert s.watermark == 5
    s.apply(ack(5), 1)
    assert s.watermark == 7


def test_leading_gap() -> None:
    s = fresh([4, 5], watermark=2)
    assert s.watermark == 4
    assert offsets_of(s.take(10, 0, 100)) == [4, 5]


def test_ack_before_fetch() -> None:
    s = fresh([])
    s.apply(Ack(P, ((0, 3),)), 0)
    s.apply(ack(5), 0)
    assert s.watermark == 3
    s.add_records((o, f"r{o}") for o in range(8))
    assert offsets_of(s.take(10, 0, 100)) == [3, 4, 6, 7]


def test_refetch_is_ignored() -> None:
    s = fresh(range(3))
    s.take(3, 0, 100)
    s.add_records((o, "again") for o in range(3))
    assert s.take(10, 1, 100) == []
    assert s.ready_count == 0


def test_expiry_redelivers_with_next_generation() -> None:
    s = fresh(range(2))
    first = s.take(10, 0, 100)
    assert s.take(10, 99, 200) == []
    assert s.next_expiry() == 100
    second = s.take(10, 100, 200)
    assert second == [(0, 2, "r0"), (1, 2, "r1")]
    ids = {ackids.encode(TAG, P, o, g) for o, g, _r in first + second}
    assert len(ids) == 4  # unique per delivery
    third = s.take(10, 200, 300)
    assert [g for _o, g, _r in third] == [3, 3]


def test_expire_counts_and_next_expiry() -> None:
    s = fresh(range(3))
    s.take(1, 0, 100)
    s.take(1, 0, 50)
    assert s.next_expiry() == 50
    assert s.expire(49) == 0
    assert s.expire(50) == 1
    assert s.next_expiry() == 100
    assert s.expire(1000) == 1
    assert s.next_expiry() is None
    assert s.ready_count == 3


@hsettings(max_examples=60, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from("tddddak"), st.integers(0, 9), st.integers(1, 3000)), max_size=400))
def test_expiry_follows_the_leases_however_often_they_move(ops: list[tuple[str, int, int]]) -> None:
    """Deadline changes and acks leave stale entries in the expiry queue, and the queue is
    rebuilt once they outnumber the leases: expiry still ends exactly the leases whose latest
    deadline has passed, and the queue stays bounded by the leases."""
    from unittest import mock

    from gateway.leases import state as state_module

    with mock.patch.object(state_module, "STALE_SLACK", 4):  # small: rebuilt often
        _expiry_follows_the_leases(ops, state_module.STALE_SLACK)


def _expiry_follows_the_leases(ops: list[tuple[str, int, int]], slack: int) -> None:
    s = fresh(range(10))
    model: dict[int, tuple[int, int]] = {}  # offset -> (generation, deadline)
    now = peak = 0
    for op, offset, ms in ops:
        if op == "t":
            for o, g, _r in s.take(3, now, now + ms):
                model[o] = (g, now + ms)
        elif op == "d" and offset in model:
            g = model[offset][0]
            s.apply(SetDeadline(P, ((offset, g),), now + ms), now_ms=now)
            model[offset] = (g, now + ms)
        elif op == "a" and offset in model:
            s.apply(ack(offset), now_ms=now)
            del model[offset]
        elif op == "k":
            now += ms // 10
            ended = {o for o, (_g, d) in model.items() if d <= now}
            assert s.expire(now) == len(ended)
            model = {o: lease for o, lease in model.items() if o not in ended}
        assert s.next_expiry() == min((d for _g, d in model.values()), default=None)
        assert {o: s.lease_of(o) for o in model} == model
        peak = max(peak, len(model))
        assert s._due_entries <= 2 * peak + slack + 3, "stale entries are dropped as they build up"
        assert s._due_entries == sum(map(len, s._due.values())) and len(s._expiry) == len(s._due)


def test_a_lease_moved_thousands_of_times_expires_once_at_its_last_deadline() -> None:
    """Each move leaves a stale entry behind the earliest lease, where nothing pops it: the
    queue is rebuilt as they build up, and keeps exactly one live entry per lease."""
    from gateway.leases import state as state_module

    s = fresh(range(2))
    s.take(2, 0, 100)
    for i in range(5000):
        s.apply(SetDeadline(P, ((1, 1),), 1000 + i), now_ms=0)
        assert s.next_expiry() == 100
        assert s._due_entries <= 2 * 2 + state_module.STALE_SLACK + 1
    assert s.expire(999) == 1  # offset 0
    assert s.next_expiry() == 5999
    assert s.expire(5998) == 0
    assert s.expire(5999) == 1
    assert s.next_expiry() is None


def test_judge_says_which_ids_name_current_leases() -> None:
    s = fresh(range(6))
    s.take(5, 0, 100)  # offsets 0-4, generation 1, until 100
    s.apply(ack(0), now_ms=0)
    s.apply(ack(3), now_ms=0)  # 3 is acked above the watermark (1)
    entries = [(1, 1), (2, 2), (0, 1), (3, 1), (5, 1), (4, 1)]
    # Acking: 0 (below the watermark) and 3 (in `acked`) again succeed; 2 names another
    # generation, 5 was never delivered.
    assert s.judge(entries, acking=True, now_ms=50) == [True, False, None, None, False, True]
    assert s.judge(entries, acking=False, now_ms=50) == [True, False, False, False, False, True]
    assert s.judge([(1, 1)], acking=True, now_ms=100) == [False], "expired at its deadline"
    # Held: a current lease runs at least until hold_until; a longer one is left alone.
    s.apply(SetDeadline(P, ((4, 1),), 900), now_ms=50)
    assert s.judge([(1, 1), (4, 1)], acking=True, now_ms=50, hold_until=500) == [True, True]
    assert s.lease_of(1) == (1, 500) and s.lease_of(4) == (1, 900)
    assert s.judge([(2, 1)], acking=True, now_ms=50, hold_until=None) == [True]
    assert s.lease_of(2) == (1, 100)


def test_set_deadline_extends() -> None:
    s = fresh(range(1))
    s.take(1, 0, 100)
    s.apply(SetDeadline(P, ((0, 1),), 500), now_ms=50)
    assert s.lease_of(0) == (1, 500)
    assert s.take(1, 100, 1000) == []
    assert s.take(1, 499, 1000) == []
    assert s.next_expiry() == 500
    assert s.take(1, 500, 1000) == [(0, 2, "r0")]


def test_set_deadline_shortens() -> None:
    s = fresh(range(1))
    s.take(1, 0, 1000)
    s.apply(SetDeadline(P, ((0, 1),), 200), now_ms=50)
    assert s.take(1, 199, 2000) == []
    assert offsets_of(s.take(1, 200, 2000)) == [0]


def test_set_deadline_in_the_past_is_a_nack() -> None:
    s = fresh(range(2))
    s.take(2, 0, 1000)
    s.apply(SetDeadline(P, ((1, 1),), 10), now_ms=10)  # deadline == now
    assert s.lease_of(1) is None
    assert s.ready_count == 1
    assert s.take(5, 10, 1000) == [(1, 2, "r1")]
    s.apply(SetDeadline(P, ((0, 1),), 0), now_ms=20)  # deadline < now
    assert s.take(5, 20, 1000) == [(0, 2, "r0")]


def test_stale_generation_set_deadline_is_ignored() -> None:
    s = fresh(range(1))
    s.take(1, 0, 100)
    s.take(1, 100, 200)  # redelivered as generation 2
    s.apply(SetDeadline(P, ((0, 1),), 10_000), now_ms=150)  # extend with the old ack id
    assert s.lease_of(0) == (2, 200)
    s.apply(SetDeadline(P, ((0, 1),), 0), now_ms=150)  # nack with the old ack id
    assert s.lease_of(0) == (2, 200)
    assert s.take(1, 150, 300) == []
    s.apply(SetDeadline(P, ((0, 3),), 0), now_ms=150)  # a generation never issued
    assert s.lease_of(0) == (2, 200)


def test_set_deadline_unknown_offset_is_ignored() -> None:
    s = fresh(range(1))
    s.apply(SetDeadline(P, ((0, 1),), 500), now_ms=0)  # not leased
    s.apply(SetDeadline(P, ((9, 1),), 500), now_ms=0)  # not fetched
    assert s.leases == {}
    assert offsets_of(s.take(1, 0, 100)) == [0]


def test_ack_of_old_generation_still_acks() -> None:
    s = fresh(range(2))
    s.take(2, 0, 100)
    s.take(2, 100, 200)  # both redelivered as generation 2
    s.apply(ack(0), 150)  # the client acks with its generation-1 id; acks carry no generation
    assert s.is_acked(0)
    assert s.watermark == 1
    assert s.take(5, 10_000, 20_000) == [(1, 3, "r1")]


def test_release() -> None:
    s = fresh(range(2))
    s.take(2, 0, 1000)
    s.release([(0, 1), (1, 7)])  # (1, 7) is not the current lease
    assert s.lease_of(0) is None
    assert s.lease_of(1) == (1, 1000)
    assert s.take(5, 0, 1000) == [(0, 2, "r0")]


def test_lease_from_another_owner_blocks_until_its_deadline() -> None:
    s = fresh(range(2))
    s.apply(Lease(P, ((0, 1),), 1000), now_ms=0)
    assert s.lease_of(0) == (1, 1000)
    assert s.take(5, 0, 5000) == [(1, 1, "r1")]
    assert s.take(5, 999, 5000) == []
    assert s.take(5, 1000, 5000) == [(0, 2, "r0")]


def test_lease_from_another_owner_supersedes_ours() -> None:
    s = fresh(range(1))
    s.take(1, 0, 100)
    s.apply(Lease(P, ((0, 2),), 5000), now_ms=10)
    assert s.lease_of(0) == (2, 5000)
    assert s.take(1, 100, 200) == []  # our old lease's expiry does not release theirs
    assert s.take(1, 5000, 6000) == [(0, 3, "r0")]


def test_lease_before_fetch() -> None:
    s = fresh([])
    s.apply(Lease(P, ((0, 4),), 1000), now_ms=0)
    s.add_records([(0, "r0"), (1, "r1")])
    assert s.take(5, 0, 5000) == [(1, 1, "r1")]
    assert s.take(5, 1000, 2000) == [(0, 5, "r0")]


def test_lease_expired_before_fetch() -> None:
    s = fresh([])
    s.apply(Lease(P, ((0, 1),), 10), now_ms=0)
    assert s.expire(10) == 1
    s.add_records([(0, "r0")])
    assert s.take(5, 20, 500) == [(0, 2, "r0")]


def test_own_lease_read_back_changes_nothing() -> None:
    s = fresh(range(2))
    taken = s.take(1, 0, 100)
    s.apply(SetDeadline(P, ((0, 1),), 700), now_ms=50)  # extended after the Lease was written
    before = (dict(s.leases), dict(s.attempts), s.ready_count, s.watermark)
    s.apply(Lease(P, tuple((o, g) for o, g, _r in taken), 100), now_ms=60)
    assert (dict(s.leases), dict(s.attempts), s.ready_count, s.watermark) == before
    assert s.take(5, 100, 800) == [(1, 1, "r1")]
    assert s.take(5, 699, 800) == []


def test_lease_of_acked_offset_is_ignored() -> None:
    s = fresh(range(3))
    s.apply(ack(1), 0)
    s.apply(Lease(P, ((1, 5),), 1000), 0)
    s.apply(Lease(P, ((0, 1),), 1000), 0)
    s.apply(ack(0), 0)
    assert s.leases == {}
    assert s.watermark == 2


def test_old_epoch_commands_are_ignored() -> None:
    s: PartitionState[str] = PartitionState(P, 0, epoch=2)
    s.add_records((o, f"r{o}") for o in range(3))
    s.apply(Ack(P, ((0, 3),), epoch=1), 0)
    s.apply(Lease(P, ((0, 1),), 1000, epoch=1), 0)
    assert s.watermark == 0
    assert s.leases == {}
    s.apply(Ack(P, ((0, 1),), epoch=2), 0)
    assert s.watermark == 1


def test_checkpoint_of_newer_epoch_resets() -> None:
    s = fresh(range(5))
    s.take(5, 0, 1000)
    s.apply(Checkpoint(P, 2, (), (), (), epoch=1), 0)
    assert s.epoch == 1
    assert s.watermark == 2
    assert s.leases == {} and s.attempts == {} and s.records == {}
    s.add_records((o, f"r{o}") for o in range(5))
    assert s.take(5, 0, 1000) == [(2, 1, "r2"), (3, 1, "r3"), (4, 1, "r4")]


def _lease_state_attributes() -> set[str]:
    """The attributes a seek starts over: those `_start_over` sets."""
    s: PartitionState[str] = PartitionState(P, 0)
    marks = {name: object() for name in vars(s)}
    for name, mark in marks.items():
        setattr(s, name, mark)
    s._start_over(0, 0)
    return {name for name, mark in marks.items() if getattr(s, name) is not mark}


def test_a_seek_keeps_everything_but_the_lease_state() -> None:
    """Every attribute construction sets besides the lease state (the partition, the ordering
    key, the retry and dead-letter policies, and any policy added later) survives a checkpoint
    of a newer epoch unchanged; the lease state becomes that of a fresh partition."""
    lease_state = _lease_state_attributes()
    s = _busy_state()
    kept = {name: object() for name in vars(s) if name not in lease_state}
    assert {"partition", "key_of", "backoff", "max_attempts"} <= kept.keys()
    for name, mark in kept.items():
        setattr(s, name, mark)
    s.apply(Checkpoint(P, 7, (), (), (), epoch=1), 0)
    assert {name: getattr(s, name) for name in kept} == kept
    started_over: PartitionState[str] = PartitionState(P, 7, epoch=1)
    compared = lease_state - {"dirty"}  # every command marks the state changed
    assert {name: getattr(s, name) for name in compared} == {
        name: getattr(started_over, name) for name in compared
    }


def test_large_ack_range() -> None:
    s = fresh([0, 10**9])
    s.take(2, 0, 100)
    s.apply(Ack(P, ((1, 10**12),)), 1)
    assert s.records == {0: "r0"}
    assert s.leases == {0: (1, 100)}
    s.apply(ack(0), 1)
    assert s.watermark == 10**12


# -- checkpoints ----------------------------------------------------------------------------------


def _busy_state() -> PartitionState[str]:
    """Offsets 0..9: 0, 1, 2 and 6 acked; 3 leased (gen 1, until 500); 4 delivered three times,
    now nacked and ready; 5 delivered twice, leased (gen 2, until 900); 7..9 never delivered."""
    s = fresh(range(10))
    assert offsets_of(s.take(6, 0, 100)) == [0, 1, 2, 3, 4, 5]
    s.apply(Ack(P, ((0, 2),)), 10)
    s.apply(ack(2, 6), 10)
    s.apply(SetDeadline(P, ((3, 1),), 500), 10)  # extend
    s.apply(SetDeadline(P, ((4, 1), (5, 1)), 10), 10)  # nack
    assert s.take(2, 20, 900) == [(4, 2, "r4"), (5, 2, "r5")]
    s.apply(SetDeadline(P, ((4, 2),), 0), 20)  # nack
    assert s.take(1, 21, 900) == [(4, 3, "r4")]
    s.apply(SetDeadline(P, ((4, 3),), 22), 22)  # nack
    assert s.watermark == 3
    return s


def test_checkpoint_runs_bridge_acked_gaps_only() -> None:
    """One pull leases a run; acks inside it do not split it, a message not delivered does."""
    s = fresh(range(10))
    assert offsets_of(s.take(8, 0, 100)) == list(range(8))  # 0..7 leased until 100, gen 1
    s.apply(ack(2, 5), 1)
    s.apply(SetDeadline(P, ((6, 1),), 0), 1)  # nack 6: ready again, one delivery used
    cp = s.checkpoint()
    assert cp.leases == ((0, 5, 1, 100), (7, 8, 1, 100))
    assert cp.attempts == ((0, 8, 1),)


@given(
    st.lists(
        st.tuples(st.sampled_from(["take", "ack", "nack"]), st.integers(0, 39), st.integers(1, 5)),
        max_size=40,
    )
)
@hsettings(max_examples=200, deadline=None, database=None)
def test_checkpoint_runs_rebuild_exactly_the_same_state(ops: list[tuple[str, int, int]]) -> None:
    s = fresh(range(40))
    now = 0
    for op, offset, n in ops:
        now += 1
        if op == "take":
            s.take(n, now, 1000 + n)
        elif op == "ack":
            s.apply(Ack(P, ((offset, offset + n),)), now)
        elif (lease := s.lease_of(offset)) is not None:
            s.apply(SetDeadline(P, ((offset, lease[0]),), 0), now)
    t: PartitionState[str] = PartitionState(P, 0)
    t.apply(logformat.decode(logformat.encode(s.checkpoint())), now)
    assert t.watermark == s.watermark and list(t.acked) == list(s.acked)
    assert t.leases == s.leases
    assert t.attempts == s.attempts


@given(watermark=st.sampled_from([0, 3]), via_log=st.booleans())
@hsettings(max_examples=10, deadline=None, database=None)
def test_checkpoint_round_trip(watermark: int, via_log: bool) -> None:
    s = _busy_state()
    cp = s.checkpoint()
    assert cp == Checkpoint(
        P, 3, ((6, 7),), ((3, 4, 1, 500), (5, 6, 2, 900)), ((3, 4, 1), (4, 5, 3), (5, 6, 2)), 0
    )
    if via_log:
        cp = logformat.decode(logformat.encode(cp))
    t: PartitionState[str] = PartitionState(P, watermark)
    t.apply(cp, now_ms=30)
    t.add_records((o, f"r{o}") for o in range(10))
    assert t.watermark == 3
    assert not t.is_acked(3) and t.is_acked(6)
    # 3 and 5 are still leased: not delivered before their deadlines
    assert t.take(100, 30, 2000) == [(4, 4, "r4"), (7, 1, "r7"), (8, 1, "r8"), (9, 1, "r9")]
    assert t.take(100, 499, 2000) == []
    assert t.take(100, 500, 2000) == [(3, 2, "r3")]
    assert t.take(100, 899, 2000) == []
    assert t.take(100, 900, 2000) == [(5, 3, "r5")]


def test_checkpoint_round_trip_at_once_after_deadlines() -> None:
    s = _busy_state()
    t: PartitionState[str] = PartitionState(P, 0)
    t.apply(s.checkpoint(), now_ms=5000)
    t.add_records((o, f"r{o}") for o in range(10))
    taken = t.take(100, 5000, 6000)
    assert taken == [(3, 2, "r3"), (4, 4, "r4"), (5, 3, "r5"), (7, 1, "r7"), (8, 1, "r8"), (9, 1, "r9")]


def test_checkpoint_is_idempotent() -> None:
    s = _busy_state()
    cp = s.checkpoint()
    s.apply(cp, now_ms=30)
    assert s.checkpoint() == cp
    s.apply(cp, now_ms=30)
    assert s.checkpoint() == cp
    assert s.take(100, 30, 2000) == [(4, 4, "r4"), (7, 1, "r7"), (8, 1, "r8"), (9, 1, "r9")]


def test_checkpoint_merge_never_undoes_an_ack() -> None:
    s = _busy_state()
    old = s.checkpoint()  # 3 and 5 leased, 4 ready, 7 not delivered
    s.apply(ack(3, 4, 5, 7), now_ms=40)
    after_ack = s.checkpoint()
    s.apply(old, now_ms=50)
    assert s.checkpoint() == after_ack
    for o in (3, 4, 5, 7):
        assert s.is_acked(o)
        assert s.lease_of(o) is None
    assert s.watermark == 8
    delivered = offsets_of(s.take(100, 10_000, 20_000))
    assert delivered == [8, 9]


def test_checkpoint_merge_never_undoes_a_watermark() -> None:
    s = fresh(range(5))
    old = s.checkpoint()
    s.take(5, 0, 100)
    s.apply(Ack(P, ((0, 5),)), 1)
    s.apply(old, 2)
    assert s.watermark == 5
    assert s.take(10, 10_000, 20_000) == []


def test_checkpoint_merge_keeps_the_newer_delivery() -> None:
    s = fresh(range(1))
    s.take(1, 0, 100)
    old = s.checkpoint()  # lease (0, 1, 100)
    s.take(1, 100, 300)  # redelivered: (0, 2, 300)
    s.apply(old, now_ms=150)
    assert s.lease_of(0) == (2, 300)
    assert s.take(1, 299, 1000) == []
    assert s.take(1, 300, 1000) == [(0, 3, "r0")]


def test_checkpoint_attempts_are_maxima() -> None:
    s = fresh(range(2))
    s.apply(Checkpoint(P, 0, (), (), ((0, 1, 4), (1, 2, 1))), 0)
    s.apply(Checkpoint(P, 0, (), (), ((0, 1, 2), (1, 2, 3))), 0)
    assert s.take(10, 0, 100) == [(0, 5, "r0"), (1, 4, "r1")]


# -- random interleavings -------------------------------------------------------------------------

RECORD_OFFSETS = st.lists(st.integers(0, 30), min_size=1, max_size=25, unique=True).map(sorted)

# Times move in steps of 5 ms, so that "now" often equals a deadline exactly.
FIVES = st.integers(1, 8).map(lambda x: 5 * x)
# Ack, nack and extend pick a delivery counted from the most recent one, old ones included.
step = st.one_of(
    st.tuples(st.just("fetch"), st.integers(1, 6), st.just(0)),
    st.tuples(st.just("tick"), FIVES, st.just(0)),
    st.tuples(st.just("take"), st.integers(0, 5), FIVES),
    st.tuples(st.just("ack"), st.integers(0, 8), st.just(0)),
    st.tuples(st.just("ack_range"), st.integers(0, 35), st.integers(0, 6)),
    st.tuples(st.just("nack"), st.integers(0, 8), st.just(0)),
    st.tuples(st.just("extend"), st.integers(0, 8), FIVES),
    st.tuples(st.just("restart"), st.just(0), st.just(0)),
    # the steps that make redeliveries, twice as likely as the others
    st.tuples(st.just("tick"), FIVES, st.just(0)),
    st.tuples(st.just("take"), st.integers(0, 5), FIVES),
    st.tuples(st.just("nack"), st.integers(0, 8), st.just(0)),
)


@dataclasses.dataclass
class Model:
    """What a correct partition state must look like, kept independently."""

    fetched: list[int] = dataclasses.field(default_factory=list)
    acked: set[int] = dataclasses.field(default_factory=set)  # including gaps
    deliveries: dict[int, int] = dataclasses.field(default_factory=dict)  # offset -> count
    deadline: dict[int, int] = dataclasses.field(default_factory=dict)  # latest delivery's lease
    released: set[int] = dataclasses.field(default_factory=set)  # latest delivery nacked

    def leased_at(self, offset: int, now: int) -> bool:
        return offset in self.deadline and offset not in self.released and self.deadline[offset] > now

    def ready_at(self, now: int) -> list[int]:
        return [o for o in self.fetched if o not in self.acked and not self.leased_at(o, now)]

    def smallest_unacked(self) -> int:
        w = 0
        while w in self.acked:
            w += 1
        return w


@given(record_offsets=RECORD_OFFSETS, steps=st.lists(step, min_size=15, max_size=80))
@hsettings(max_examples=200, deadline=None, database=None)
def test_random_interleavings(record_offsets: list[int], steps: list[tuple[str, int, int]]) -> None:
    s: PartitionState[str] = PartitionState(P, 0)
    m = Model()
    pending = list(record_offsets)
    now = 0
    issued: list[tuple[int, int]] = []  # every (offset, generation) ever delivered

    for op, a, b in steps:
        if op == "fetch":
            batch, pending = pending[:a], pending[a:]
            prev = m.fetched[-1] + 1 if m.fetched else 0
            for o in batch:
                m.acked.update(range(prev, o))  # the gap before o
                prev = o + 1
            m.fetched.extend(batch)
            s.add_records((o, f"r{o}") for o in batch)
        elif op == "tick":
            now += a
        elif op == "take":
            expected_ready = m.ready_at(now)
            taken = s.take(a, now, now + b)
            offs = offsets_of(taken)
            assert offs == expected_ready[:a], (offs, expected_ready)  # oldest first, exactly
            for o, g, r in taken:
                assert o not in m.acked, f"delivered acked offset {o}"
                assert not m.leased_at(o, now), f"offset {o} leased twice at once"
                assert g == m.deliveries.get(o, 0) + 1
                assert r == f"r{o}"
                m.deliveries[o] = g
                m.deadline[o] = now + b
                m.released.discard(o)
                issued.append((o, g))
            assert s.ready_count == len(expected_ready) - len(offs)
        elif op == "ack" and issued:
            o, _g = issued[-1 - a % len(issued)]  # any generation, old ones included
            s.apply(Ack(P, ((o, o + 1),)), now)
            m.acked.add(o)
        elif op == "ack_range":
            s.apply(Ack(P, ((a, a + b),)), now)
            m.acked.update(range(a, a + b))
        elif op == "nack" and issued:
            o, g = issued[-1 - a % len(issued)]
            s.apply(SetDeadline(P, ((o, g),), now), now)
            if g == m.deliveries.get(o) and o not in m.acked:
                m.released.add(o)
        elif op == "extend" and issued:
            o, g = issued[-1 - a % len(issued)]
            latest = g == m.deliveries.get(o)
            if latest and o not in m.acked and not m.leased_at(o, now):
                continue  # a late extension of an expired lease: either outcome is acceptable
            s.apply(SetDeadline(P, ((o, g),), now + b), now)
            if latest and o not in m.acked:
                m.deadline[o] = now + b
        elif op == "restart":
            cp = logformat.decode(logformat.encode(s.checkpoint()))
            s = PartitionState(P, 0)
            s.apply(cp, now)
            s.add_records((o, f"r{o}") for o in m.fetched)

        # invariants after every step
        assert s.watermark == m.smallest_unacked()
        for o in s.leases:
            assert o not in m.acked
        for o in m.acked:
            assert s.is_acked(o)
        for o in m.fetched:
            if o not in m.acked:
                assert not s.is_acked(o)

    # liveness: once every deadline has passed, everything unacked is delivered once more
    later = now + 10_000
    taken = s.take(1000, later, later + 1)
    assert offsets_of(taken) == m.ready_at(later)
    for o, g, _r in taken:
        assert g == m.deliveries.get(o, 0) + 1


def test_quiet_while_nothing_is_leased_dead_or_held() -> None:
    """The runner sweeps a quiet partition less often (runner.QUIET_SWEEP_SECONDS)."""
    s = fresh(range(3))
    assert s.quiet(), "ready records alone give a sweep nothing to do"
    s.take(1, now_ms=0, deadline_ms=10_000)
    assert not s.quiet(), "a lease can expire"
    s.apply(ack(0), now_ms=1)
    assert s.quiet()
    s.max_attempts = 1
    s.take(1, now_ms=2, deadline_ms=10_000)
    s.apply(SetDeadline(P, ((1, 1),), 0), now_ms=3)  # a nack of its last attempt
    assert s.lease_of(1) is None
    assert not s.quiet(), "a message waits for the dead-letter topic"
    assert offsets_of(s.take_dead()) == [1]
    s.apply(ack(1), now_ms=4)  # forwarded: acked on the subscription
    assert s.quiet()
