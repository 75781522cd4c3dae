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
"""

from __future__ import annotations

import dataclasses

INITIAL_WINDOW = 3
SLOW_START_LIMIT = 3000  # outstanding messages; past them the window grows linearly
MIN_BACKOFF = 0.1
MAX_BACKOFF = 60.0


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
