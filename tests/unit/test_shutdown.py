"""The shutdown watchdog: a shutdown that never finishes still ends, saying what was stuck."""

from __future__ import annotations

import asyncio
import io
import threading
import time

import pytest

from gateway.settings import Settings, SettingsError
from gateway.shutdown import EXIT_SHUTDOWN_STUCK, ShutdownWatchdog


class Exits:
    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


async def test_a_stuck_shutdown_exits_with_status_4_naming_the_pending_task() -> None:
    stream, exits = io.StringIO(), Exits()
    stuck = asyncio.create_task(asyncio.Event().wait(), name="leave the group")
    ShutdownWatchdog(asyncio.get_running_loop(), 0.2, stream, exits).start()
    await asyncio.to_thread(exits.called.wait, 5)
    assert exits.codes == [EXIT_SHUTDOWN_STUCK]
    assert "task leave the group:" in stream.getvalue()
    assert "test_shutdown.py" in stream.getvalue()  # with its stack
    stuck.cancel()


async def test_a_shutdown_that_finishes_in_time_exits_normally() -> None:
    exits = Exits()
    watchdog = ShutdownWatchdog(asyncio.get_running_loop(), 0.3, io.StringIO(), exits).start()
    await asyncio.sleep(0.05)
    watchdog.finish()
    await asyncio.sleep(0.5)
    assert exits.codes == []


async def test_a_blocked_event_loop_is_reported_as_blocked() -> None:
    stream, exits = io.StringIO(), Exits()
    ShutdownWatchdog(asyncio.get_running_loop(), 0.1, stream, exits).start()
    deadline = time.monotonic() + 5
    while not exits.called.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)  # noqa: ASYNC251 -- blocks the loop, as a stuck synchronous call would
    assert exits.codes == [EXIT_SHUTDOWN_STUCK]
    assert "the event loop does not answer: it is blocked" in stream.getvalue()


async def test_a_second_signal_ends_the_shutdown_at_once() -> None:
    import os
    import signal

    stream, exits = io.StringIO(), Exits()
    ShutdownWatchdog(asyncio.get_running_loop(), 60, stream, exits).start()
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.to_thread(exits.called.wait, 5)
    assert exits.codes == [EXIT_SHUTDOWN_STUCK]
    asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
    asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)


@pytest.mark.parametrize(("timeout", "grace"), [(-1, 5), (9, 5), (1, 1)])
def test_a_bound_shorter_than_the_two_graces_is_refused(timeout: float, grace: float) -> None:
    with pytest.raises(SettingsError, match="shutdown-timeout-seconds"):
        Settings(shutdown_timeout_seconds=timeout, shutdown_grace_seconds=grace).validate()


def test_no_bound_and_the_default_are_accepted() -> None:
    Settings(shutdown_timeout_seconds=0).validate()
    assert Settings().shutdown_timeout_seconds >= 2 * Settings().shutdown_grace_seconds


async def test_a_shutdown_step_that_never_ends_is_left_behind_by_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from gateway.server import _bounded_step

    release = asyncio.Event()

    async def leave_the_group() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:  # the worst case: a step that ignores cancellation
                continue

    started = time.monotonic()
    await _bounded_step(leave_the_group, (), 0.2)
    assert time.monotonic() - started < 2
    assert "leave_the_group did not finish within 0.2 s; going on without it" in caplog.text
    release.set()


async def test_a_shutdown_step_that_fails_still_raises() -> None:
    from gateway.server import _bounded_step

    async def broken(what: str) -> None:
        raise OSError(what)

    with pytest.raises(OSError, match="socket"):
        await _bounded_step(broken, ("socket",), 5)


async def test_a_cancellation_as_the_awaited_thing_completes_is_not_lost() -> None:
    """What held a gateway's shutdown for ever: Python 3.11's asyncio.wait_for returns the
    result when the task is cancelled just as the awaited future completes, and the cancelled
    loop (the readiness probe) ran on while stop() awaited it. `within` lets it through."""
    from gateway.clock import within

    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    went_on: list[int] = []

    async def probe_loop() -> None:
        went_on.append(await within(fut, 10))

    task = asyncio.create_task(probe_loop())
    await asyncio.sleep(0)  # the task now waits on fut
    fut.set_result(1)
    task.cancel()  # in the same turn of the loop
    with pytest.raises(asyncio.CancelledError):
        await task
    assert went_on == []


async def test_within_times_out_and_passes_results_through() -> None:
    from gateway.clock import within

    assert await within(asyncio.sleep(0, "done"), 1) == "done"
    assert await within(asyncio.sleep(0, "no limit"), None) == "no limit"
    with pytest.raises(TimeoutError):
        await within(asyncio.Event().wait(), 0.05)
