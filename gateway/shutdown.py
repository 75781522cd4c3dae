"""A bound on shutdown. After SIGTERM the gateway closes its ports, ends streams and leaves its
consumer groups; each of those steps waits on something outside the process (a client, the
broker). Should one never finish, an operator's SIGTERM must still end the process: past
`--shutdown-timeout-seconds` the watchdog prints what is still running (the event loop's tasks
with their stacks, then every thread's stack) and exits with status 6. That is as safe as a kill:
the gateway answers OK only for what Kafka already holds (docs/lease-log.md), and leases held by a
process that vanished expire and are delivered again.

A second SIGTERM or SIGINT during the shutdown ends the process the same way, at once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import faulthandler
import io
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TextIO

log = logging.getLogger(__name__)

EXIT_SHUTDOWN_STUCK = 6
LOOP_ANSWER_SECONDS = 2.0  # a loop that cannot list its tasks in this time is blocked


class ShutdownWatchdog:
    """Started when the shutdown starts, `finish()`ed when it ends. `exit` is replaced in the
    unit tests only."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        seconds: float,
        stream: TextIO = sys.stderr,
        exit: Callable[[int], object] | None = None,
    ) -> None:
        self._loop = loop
        self._seconds = seconds
        self._stream = stream
        self._exit = exit or os._exit
        self._finished = threading.Event()
        self._fired = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="shutdown watchdog", daemon=True)

    def start(self) -> ShutdownWatchdog:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(sig, self._again, sig)
        if self._seconds > 0:
            self._thread.start()
        return self

    def finish(self) -> None:
        self._finished.set()

    def _again(self, sig: signal.Signals) -> None:
        # On the loop: it is running, so the tasks can be listed here and now.
        self._give_up(f"{sig.name} during the shutdown", _describe_tasks())

    def _watch(self) -> None:
        if self._finished.wait(self._seconds):
            return
        answer: concurrent.futures.Future[str] = concurrent.futures.Future()

        def describe() -> None:
            answer.set_result(_describe_tasks())

        try:
            self._loop.call_soon_threadsafe(describe)
            tasks = answer.result(LOOP_ANSWER_SECONDS)
        except (RuntimeError, concurrent.futures.TimeoutError):  # closed, or blocked
            tasks = "the event loop does not answer: it is blocked (see its thread's stack below)\n"
        if not self._finished.is_set():
            self._give_up(f"the shutdown took longer than {self._seconds:g} s", tasks)

    def _give_up(self, why: str, tasks: str) -> None:
        if not self._fired.acquire(blocking=False):
            return
        stream = self._stream
        log.error("%s: exiting with status %d; what was still running follows", why, EXIT_SHUTDOWN_STUCK)
        stream.write(f"--- asyncio tasks still pending ---\n{tasks}--- thread stacks ---\n")
        stream.flush()
        try:
            faulthandler.dump_traceback(file=stream, all_threads=True)
        except (ValueError, io.UnsupportedOperation):  # no file descriptor (a test's StringIO)
            pass
        stream.flush()
        self._exit(EXIT_SHUTDOWN_STUCK)


def _describe_tasks() -> str:
    out = io.StringIO()
    current = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is current or task.done():
            continue
        out.write(f"task {task.get_name()}:\n")
        task.print_stack(limit=12, file=out)
    return out.getvalue() or "(none)\n"
