"""The push-back rate control (gateway.push.window.PushRate): additive increase, multiplicative
decrease, its bounds, its pacing and the window cap. Pure: times are passed in."""

from __future__ import annotations

import itertools
import math

import pytest

from gateway.push.window import MIN_RATE, RATE_HORIZON, RATE_STEP, PushRate


def _send(rate: PushRate, count: int, start: float, interval: float) -> float:
    """`count` pushes started `interval` apart from `start` (as if each waited its turn)."""
    now = start
    for _ in range(count):
        now += rate.reserve(now)
        now += interval
    return now


def test_off_until_pushed_back() -> None:
    rate = PushRate()
    assert rate.limit is None
    assert [rate.reserve(t / 1000) for t in range(100)] == [0.0] * 100
    assert rate.cap(500) == 500
    rate.on_success()
    assert rate.limit is None


def test_the_first_push_back_halves_the_measured_rate_and_sets_the_ceiling_to_twice_it() -> None:
    rate = PushRate()
    now = _send(rate, 400, 0.0, 0.005)  # 200 pushes per second for two seconds
    rate.on_push_back(now - 0.01, now)
    assert rate.limit == pytest.approx(100, rel=0.05)
    assert rate.ceiling == pytest.approx(400, rel=0.05)
    assert rate.cap(1000) == math.ceil(rate.limit * RATE_HORIZON)
    assert rate.cap(10) == 10, "the cap never raises the window"


def test_push_backs_halve_down_to_the_minimum() -> None:
    rate = PushRate()
    now = _send(rate, 100, 0.0, 0.01)
    limits = []
    for _i in range(12):
        now += 1.0
        rate.on_push_back(now, now)  # each sent after the previous push-back was seen
        assert rate.limit is not None
        limits.append(rate.limit)
    assert all(b == max(MIN_RATE, a / 2) for a, b in itertools.pairwise(limits))
    assert limits[-1] == MIN_RATE
    assert rate.cap(1000) == math.ceil(MIN_RATE * RATE_HORIZON)


def test_push_backs_of_pushes_sent_before_the_last_one_was_seen_count_once() -> None:
    rate = PushRate()
    now = _send(rate, 100, 0.0, 0.01)
    rate.on_push_back(now - 0.5, now)
    first = rate.limit
    for late in range(20):  # the rest of a burst in flight when the endpoint began to refuse
        rate.on_push_back(now - 0.4, now + 0.001 * late)
    assert rate.limit == first


def test_successes_add_the_step_per_second_at_the_limit_and_lift_it_past_the_ceiling() -> None:
    rate = PushRate()
    now = _send(rate, 200, 0.0, 0.01)  # ~100/s
    rate.on_push_back(now, now)
    assert rate.limit is not None
    start = rate.limit
    for _ in range(round(start)):  # one second of successes at the limit
        rate.on_success()
    assert rate.limit == pytest.approx(start + RATE_STEP, rel=0.05), "additive: +RATE_STEP per second"
    successes = 0
    while rate.limit is not None:
        rate.on_success()
        successes += 1
        assert successes < 100_000
    # From ~60/s to past the ceiling of ~200/s at +10/s per second: ~14 s of successes.
    assert 1000 < successes < 3000


def test_a_limit_paces_pushes_evenly() -> None:
    rate = PushRate()
    rate.limit, rate.ceiling = 20.0, 100.0
    waits = [rate.reserve(0.0) for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert rate.reserve(10.0) == 0.0, "an idle subscription does not bank turns"
    assert rate.reserve(10.0) == pytest.approx(0.05)


def test_after_a_push_back_the_next_turns_follow_the_new_limit() -> None:
    rate = PushRate()
    rate.limit, rate.ceiling = 8.0, 100.0
    assert [rate.reserve(0.0) for _ in range(3)] == pytest.approx([0.0, 0.125, 0.25])
    rate.on_push_back(0.0, 0.0)
    assert rate.limit == 4.0
    assert [rate.reserve(0.0) for _ in range(2)] == pytest.approx([0.375, 0.625])


def test_the_measured_rate_counts_the_current_and_the_previous_second() -> None:
    rate = PushRate()
    now = _send(rate, 500, 0.0, 0.001)  # 500 in half a second: counted over at least a second
    assert rate.sent_rate(now) == pytest.approx(500, rel=0.01)
    now = _send(rate, 300, 1.0, 0.002)  # a new second began: both count
    assert rate.sent_rate(now) == pytest.approx(800 / now, rel=0.01)
    _send(rate, 10, 5.0, 0.01)  # after a pause only the new second counts
    assert rate.sent_rate(5.2) == pytest.approx(10, rel=0.01)
