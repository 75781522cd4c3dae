"""One run at a time of a coroutine per key, shared by whoever asks while it runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class OnePerKey(Generic[K, T]):
    """`run(key, make)` awaits `make()`, unless a run for `key` is under way: then it awaits
    that one's result (or exception). A caller cancelled does not cancel the run for the others
    (it is shielded). A key's next call after the run ended starts a new one: nothing is kept."""

    def __init__(self) -> None:
        self._running: dict[K, asyncio.Future[T]] = {}

    async def run(self, key: K, make: Callable[[], Awaitable[T]]) -> T:
        running = self._running.get(key)
        if running is None:
            running = self._running[key] = asyncio.ensure_future(make())
            running.add_done_callback(lambda _: self._running.pop(key, None))
        return await asyncio.shield(running)
