"""Rate control of one push subscription: the push window and the push backoff.

Both follow the published description of Pub/Sub push delivery and are pure: the caller passes
the time (a monotonic clock, in seconds).

- The **push window** is the most pushes outstanding at once. It starts small, grows by one per
  success below the slow-start limit (doubling every round trip) and by one per window's worth
  of successes above it (additive increase), and halves on a failure (multiplicative decrease).
  The limit is the documented 3,000 outstanding messages, so below `--push-max-outstanding`'s
  default of 1000 the window only ever grows exponentially: a backlog reaches full speed after a
  few round trips instead of creeping up by one per window's worth of successes.
- The **push backoff** pauses the whole subscription after a failure (a nack, an error status,
  a connection error or a request that outlived the ack deadline): 100 ms after the first,
  doubling with every further failure up to 60 s, halving with every success.

A burst of failures of requests that were all sent before the previous failure was seen counts
once, as TCP reduces its window once per round trip: twenty requests in flight when an endpoint
goes down halve the window and double the backoff once, not twenty times.

- The **push rate** answers push-back (gRPC push's UNAVAILABLE, docs/push.md "gRPC push"): an
  additive-increase / multiplicative-decrease limit on pushes started per second. It is off
  until the first push-back, which sets it to half the rate pushes were being sent at (measured
  over the last second or two) and its ceiling to twice that rate; every further push-back
  halves it (at least `MIN_RATE`); every success adds `RATE_STEP / limit`, i.e. `RATE_STEP`
  pushes per second for every second of successes at the limit. Past the ceiling the limit is
  lifted. The limit also caps the window at `RATE_HORIZON` seconds of pushes, so that what is
  taken can be sent well within the ack deadline instead of waiting in the queue.
"""

from __future__ import annotations

import dataclasses
import math

INITIAL_WINDOW = 3
SLOW_START_LIMIT = 3000  # outstanding messages; past them the window grows linearly
MIN_BACKOFF = 0.1
MAX_BACKOFF = 60.0
MIN_RATE = 1.0  # pushes per second: the slowest push-back makes a subscription
RATE_STEP = 10.0  # pushes per second added per second of successes at the limit
RATE_HORIZON = 2.0  # seconds of pushes at the limit that may be outstanding at once
MEASURE_SECONDS = 1.0  # the send rate is measured over the last one to two of these


@dataclasses.dataclass(slots=True)
class PushWindow:
    maximum: int = 1000
    initial: int = INITIAL_WINDOW
    slow_start_limit: int = SLOW_START_LIMIT
    size: float = dataclasses.field(init=False)
    _last_failure: float = dataclasses.field(init=False, default=float("-inf"))

    def __post_init__(self) -> None:
        if self.maximum < 1:
            raise ValueError("the push window needs a maximum of at least 1")
        self.size = float(min(max(1, self.initial), self.maximum))

    @property
    def limit(self) -> int:
        """Pushes that may be outstanding now."""
        return int(self.size)

    def on_success(self) -> None:
        step = 1.0 if self.size < self.slow_start_limit else 1.0 / self.size
        self.size = min(float(self.maximum), self.size + step)

    def on_failure(self, sent_at: float, now: float) -> None:
        """A push sent at `sent_at` failed at `now`."""
        if sent_at < self._last_failure:
            return  # already counted: this request was out before the last failure was seen
        self._last_failure = now
        self.size = max(1.0, self.size / 2)


@dataclasses.dataclass(slots=True)
class PushBackoff:
    minimum: float = MIN_BACKOFF
    maximum: float = MAX_BACKOFF
    delay: float = 0.0
    resume_at: float = float("-inf")
    _last_failure: float = float("-inf")

    def on_success(self) -> None:
        half = self.delay / 2
        self.delay = half if half >= self.minimum else 0.0

    def on_failure(self, sent_at: float, now: float) -> None:
        """A push sent at `sent_at` failed at `now`: no push starts for `delay` seconds."""
        if sent_at >= self._last_failure:
            self.delay = min(self.maximum, max(self.minimum, self.delay * 2))
            self._last_failure = now
        self.resume_at = max(self.resume_at, now + self.delay)

    def wait(self, now: float) -> float:
        """Seconds to wait before the next push may start."""
        # Clamped: resume_at - now can exceed the delay by a rounding error.
        return min(self.maximum, max(0.0, self.resume_at - now))


@dataclasses.dataclass(slots=True)
class PushRate:
    """The push-back rate control (module docstring). Times are monotonic seconds."""

    minimum: float = MIN_RATE
    step: float = RATE_STEP
    horizon: float = RATE_HORIZON
    limit: float | None = None  # pushes started per second; None: not limited
    ceiling: float = 0.0  # the limit is lifted when it grows past this
    _next: float = float("-inf")  # when the next push may start
    _last_push_back: float = float("-inf")
    _bucket: tuple[float, int] = (float("-inf"), 0)  # (start, sends) of the current second
    _previous: tuple[float, int] = (float("-inf"), 0)  # and of the one before

    def reserve(self, now: float) -> float:
        """A push is about to start: seconds it must wait for its turn (0 when not limited)."""
        start, sends = self._bucket
        if now - start >= MEASURE_SECONDS:
            self._previous, self._bucket = self._bucket, (now, 1)
        else:
            self._bucket = (start, sends + 1)
        if self.limit is None:
            return 0.0
        at = max(self._next, now)
        self._next = at + 1.0 / self.limit
        return at - now

    def sent_rate(self, now: float) -> float:
        """Pushes started per second over the last one to two seconds (at least one second)."""
        start, sends = self._previous
        if now - start > 2 * MEASURE_SECONDS:  # no previous second worth the name
            start, sends = self._bucket[0], 0
        total = sends + self._bucket[1]
        if total == 0:
            return 0.0
        return total / max(MEASURE_SECONDS, now - start)

    def on_success(self) -> None:
        if self.limit is None:
            return
        self.limit += self.step / self.limit
        if self.limit > self.ceiling:
            self.limit = None  # back to the window alone

    def on_push_back(self, sent_at: float, now: float) -> None:
        """A push sent at `sent_at` was pushed back at `now`. Push-backs of pushes sent before the
        previous one was seen count once (as the window's failures)."""
        if sent_at < self._last_push_back:
            return
        self._last_push_back = now
        if self.limit is None:
            rate = max(self.minimum, self.sent_rate(now))
            self.ceiling = 2 * rate
            self.limit = max(self.minimum, rate / 2)
        else:
            self.limit = max(self.minimum, self.limit / 2)

    def cap(self, window: int) -> int:
        """`window` capped to what the limit sends in `horizon` seconds (at least one)."""
        if self.limit is None:
            return window
        return max(1, min(window, math.ceil(self.limit * self.horizon)))
