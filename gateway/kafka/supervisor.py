"""Supervision of the embedded broker: a JVM that dies is started again in place, or the
gateway is told it cannot go on."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import signal
import time
from collections.abc import Callable

from gateway.kafka.local import LocalKafka

log = logging.getLogger(__name__)
BROKER_CHECK_SECONDS = 1.0  # how often the supervisor looks at the embedded broker's JVM
BROKER_RESTART_WINDOW_SECONDS = 300.0  # --kafka-max-restarts counts deaths within this window
BROKER_RESTART_TIMEOUT = 120.0  # one restart: JVM start-up until the broker serves metadata


class BrokerSupervisor:
    """Watches the embedded broker's JVM and starts it again when it dies: the same node, so the
    same ports and data, and the bootstrap address every client holds stays valid. More than
    `max_restarts` deaths within `window` seconds, or a restart that fails, is fatal:
    `on_fatal(reason)` is called and the watch ends."""

    def __init__(
        self,
        kafka: LocalKafka,
        max_restarts: int,
        on_fatal: Callable[[str], None],
        *,
        check_seconds: float = BROKER_CHECK_SECONDS,
        window: float = BROKER_RESTART_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kafka = kafka
        self._bootstrap = kafka.bootstrap
        self._max_restarts = max_restarts
        self._on_fatal = on_fatal
        self._check_seconds = check_seconds
        self._window = window
        self._clock = clock
        self._deaths: collections.deque[float] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._restart: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="kafka-broker-supervisor")

    async def stop(self) -> None:
        """Stop watching; a restart under way is let finish (a JVM it started after the broker
        was stopped would outlive the gateway). Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        restart, self._restart = self._restart, None
        if restart is not None:
            with contextlib.suppress(Exception):
                await restart

    async def _watch(self) -> None:
        kafka = self._kafka
        while True:
            await asyncio.sleep(self._check_seconds)
            if kafka.running:
                continue
            now = self._clock()
            self._deaths.append(now)
            while self._deaths[0] < now - self._window:
                self._deaths.popleft()
            death = f"the embedded Kafka broker (pid {kafka.pid}) {_exit_text(kafka)}"
            fatal = f"the embedded Kafka broker died and could not be restarted; see {kafka.log_file}"
            if len(self._deaths) > self._max_restarts:
                log.error(
                    "%s: %d death(s) within %.0f s, more than --kafka-max-restarts %d allows; "
                    "giving up; broker log: %s",
                    death,
                    len(self._deaths),
                    self._window,
                    self._max_restarts,
                    kafka.log_file,
                )
                self._on_fatal(fatal)
                return
            log.error(
                "%s; restarting it on the same port and data (death %d of %d allowed within "
                "%.0f s); broker log: %s",
                death,
                len(self._deaths),
                self._max_restarts,
                self._window,
                kafka.log_file,
            )
            restart = self._restart = asyncio.create_task(asyncio.to_thread(_start_again, kafka))
            try:
                await asyncio.shield(restart)
            except Exception:
                log.error(
                    "restarting the embedded Kafka broker failed; broker log: %s",
                    kafka.log_file,
                    exc_info=True,
                )
                self._on_fatal(fatal)
                return
            finally:
                if restart.done():
                    self._restart = None
            log.warning("the embedded Kafka broker is back at %s (pid %s)", self._bootstrap, kafka.pid)


def _start_again(kafka: LocalKafka) -> None:
    """Start the dead node again in place: its ports, its data (even a temporary data dir,
    which `LocalKafka.start` would replace with an empty one)."""
    for node_id in kafka.node_ids():
        kafka.start_node(node_id, timeout=BROKER_RESTART_TIMEOUT)


def _exit_text(kafka: LocalKafka) -> str:
    code = kafka.exit_code
    if code is None:
        return "exited"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"
