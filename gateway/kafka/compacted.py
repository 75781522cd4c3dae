"""A compacted one-partition topic, read from its beginning and then followed while it runs.

The resource store (core/resources.py) and the push signing keys (push/keystore.py) each keep
one. Every record is handed to the event loop; each keyed one, in log order, to
`apply(key, value, offset)` (value None: a tombstone), while records without a key only count
as read. `start` returns once everything in the topic before it has been applied;
`caught_up(offset)` waits until the record at `offset` (one's own write, say) has been.

`apply` handles its own unreadable records: what it raises ends that batch on the event loop's
exception handler, the batch's later records not applied and no waiter woken by it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gateway.clock import within
from gateway.errors import Unavailable
from gateway.kafka import consumer as kafka_consumer

Apply = Callable[[bytes, bytes | None, int], None]
CATCH_UP_SECONDS = 30.0


class CompactedFollower:
    """Partition 0 of `topic`, followed from offset 0 by a TailReader called `name`. A wait
    that runs out raises UNAVAILABLE with the message `late`."""

    def __init__(self, kafka_config: dict[str, Any], topic: str, name: str, apply: Apply, late: str) -> None:
        self.topic = topic
        self._config = kafka_config
        self._name = name
        self._apply_record = apply
        self._late = late
        self.applied = -1  # the offset of the last record read
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._reader: kafka_consumer.TailReader | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, wait: float = CATCH_UP_SECONDS) -> None:
        """Follow the topic from its beginning; return once what it held is applied."""
        self._loop = asyncio.get_running_loop()
        end = await self.end_offset()
        self._reader = kafka_consumer.TailReader(self._config, self._name, self._on_messages)
        self._reader.start({(self.topic, 0): 0})
        await self.caught_up(end - 1, wait)

    async def stop(self) -> None:
        """Idempotent."""
        reader, self._reader = self._reader, None
        if reader is not None:
            await asyncio.to_thread(reader.stop)

    async def end_offset(self) -> int:
        """The topic's end offset now (librdkafka's own timeout bounds the call)."""
        return await asyncio.to_thread(kafka_consumer.end_offset, self._config, self.topic, 0)

    async def caught_up(self, offset: int, wait: float = CATCH_UP_SECONDS) -> None:
        """Wait until the record at `offset` has been applied; UNAVAILABLE after `wait` s."""
        if offset <= self.applied:
            return
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append((offset, fut))
        try:
            await within(fut, wait)
        except TimeoutError as exc:
            raise Unavailable(self._late) from exc

    def _on_messages(self, batch: list[kafka_consumer.TailEntry]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self.apply_batch, batch)

    def apply_batch(self, batch: list[kafka_consumer.TailEntry]) -> None:
        """Apply records as the reader hands them over (on the event loop); public for tests,
        which feed a follower by hand."""
        for _topic, _p, offset, key, value in batch:
            self.applied = max(self.applied, offset)
            if key is not None:
                self._apply_record(key, value, offset)
        done = [w for w in self._waiters if w[0] <= self.applied]
        self._waiters = [w for w in self._waiters if w[0] > self.applied]
        for _, fut in done:
            if not fut.done():
                fut.set_result(None)
