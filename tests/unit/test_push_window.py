"""The push window and the push backoff (gateway.push.window): pure, time passed in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.push.window import MAX_BACKOFF, MIN_BACKOFF, PushBackoff, PushWindow


def test_window_starts_small_and_doubles_per_round_in_slow_start() -> None:
    w = PushWindow(maximum=1000)
    assert 1 <= w.limit <= 10
    for _ in range(5):  # one round: every outstanding push succeeds
        for _ in range(w.limit):
            before = w.limit
            w.on_success()
        assert w.limit == before + 1
    assert w.limit == 3 * 2**5


def test_window_grows_additively_past_the_slow_start_limit() -> None:
    w = PushWindow(maximum=1000, initial=50, slow_start_limit=50)
    for _ in range(52):
        w.on_success()
    assert w.limit == 51, "about one more per window's worth of successes"


def test_window_halves_on_failure_and_stays_within_bounds() -> None:
    w = PushWindow(maximum=40, initial=40)
    w.on_failure(sent_at=1.0, now=2.0)
    assert w.limit == 20
    for i in range(20):
        w.on_failure(sent_at=10.0 + i, now=10.5 + i)
    assert w.limit == 1
    for _ in range(1000):
        w.on_success()
    assert w.limit == 40


def test_a_burst_of_failures_sent_before_the_first_is_seen_counts_once() -> None:
    w = PushWindow(maximum=100, initial=64)
    b = PushBackoff()
    for _ in range(20):  # twenty pushes sent at t=1, all fail from t=2 on
        w.on_failure(sent_at=1.0, now=2.0)
        b.on_failure(sent_at=1.0, now=2.0)
    assert w.limit == 32
    assert b.delay == MIN_BACKOFF
    w.on_failure(sent_at=2.5, now=3.0)  # sent after the failure was seen: new evidence
    b.on_failure(sent_at=2.5, now=3.0)
    assert w.limit == 16
    assert b.delay == 2 * MIN_BACKOFF


def test_backoff_doubles_from_100ms_to_60s_and_pauses_everything() -> None:
    b = PushBackoff()
    assert b.wait(0.0) == 0.0
    now, delays = 0.0, []
    for _ in range(14):
        now += b.wait(now) + 0.01
        b.on_failure(sent_at=now, now=now)
        delays.append(b.delay)
    assert delays[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8])
    assert delays[-1] == MAX_BACKOFF
    assert b.wait(now) == pytest.approx(MAX_BACKOFF)
    assert b.wait(now + MAX_BACKOFF) == 0.0


def test_backoff_halves_per_success_down_to_none() -> None:
    b = PushBackoff(delay=8.0)
    b.on_success()
    assert b.delay == 4.0
    for _ in range(6):
        b.on_success()
    assert b.delay == 0.0


@hsettings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(0, 5)), max_size=300))
def test_window_and_backoff_stay_in_range(events: list[tuple[bool, float]]) -> None:
    w, b, now = PushWindow(maximum=50), PushBackoff(), 0.0
    for ok, step in events:
        sent, now = now, now + step
        if ok:
            w.on_success()
            b.on_success()
        else:
            w.on_failure(sent, now)
            b.on_failure(sent, now)
        assert 1 <= w.limit <= 50
        assert b.delay == 0.0 or MIN_BACKOFF <= b.delay <= MAX_BACKOFF
        assert 0.0 <= b.wait(now) <= MAX_BACKOFF
