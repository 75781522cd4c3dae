"""OnePerKey: one run at a time per key, shared by the callers that come meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from gateway.once import OnePerKey


class Work:
    """Counts its runs; each waits for `release`, then answers its run's number or raises."""

    def __init__(self, fails: bool = False) -> None:
        self.runs = 0
        self.fails = fails
        self.release = asyncio.Event()

    async def __call__(self) -> int:
        self.runs += 1
        run = self.runs
        await self.release.wait()
        if self.fails:
            raise RuntimeError(f"run {run} failed")
        return run


def test_callers_meanwhile_share_a_run_and_other_keys_run_apart() -> None:
    async def go() -> tuple[list[int], int, int]:
        once: OnePerKey[str, int] = OnePerKey()
        a, b = Work(), Work()
        tasks = [asyncio.ensure_future(once.run("a", a)) for _ in range(5)]
        other = asyncio.ensure_future(once.run("b", b))
        await asyncio.sleep(0)
        a.release.set()
        b.release.set()
        return list(await asyncio.gather(*tasks)), await other, a.runs + b.runs

    results, other, runs = asyncio.run(go())
    assert results == [1] * 5
    assert other == 1
    assert runs == 2


def test_a_run_that_fails_fails_every_caller_and_the_next_call_runs_again() -> None:
    async def go() -> tuple[list[BaseException | int], int]:
        once: OnePerKey[str, int] = OnePerKey()
        work = Work(fails=True)
        tasks = [asyncio.ensure_future(once.run("k", work)) for _ in range(3)]
        await asyncio.sleep(0)
        work.release.set()
        failed = await asyncio.gather(*tasks, return_exceptions=True)
        work.fails = False
        return failed, await once.run("k", work)

    failed, again = asyncio.run(go())
    assert [str(e) for e in failed] == ["run 1 failed"] * 3
    assert again == 2


def test_a_caller_cancelled_does_not_cancel_the_run_for_the_others() -> None:
    async def go() -> int:
        once: OnePerKey[str, int] = OnePerKey()
        work = Work()
        first = asyncio.ensure_future(once.run("k", work))
        second = asyncio.ensure_future(once.run("k", work))
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        work.release.set()
        return await second

    assert asyncio.run(go()) == 1
