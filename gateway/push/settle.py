"""Acks and nacks of one push subscription, written in batches.

Whatever queues while one write is under way goes into the next, so a busy subscription writes
few large commands and an idle one answers at once. A failed write is logged and dropped: the
lease then expires and the message is delivered again, as Pub/Sub does when an ack is lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.core.delivery import DeliveryService

log = logging.getLogger(__name__)
CHUNK = 1000
CLOSE_WAIT = 10.0


class Settler:
    def __init__(self, delivery: DeliveryService, subscription: str) -> None:
        self._delivery = delivery
        self._name = subscription
        self._acks: list[str] = []
        self._nacks: list[str] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"push settle {self._name}")

    def ack(self, ack_id: str) -> None:
        self._acks.append(ack_id)
        self._wake.set()

    def nack(self, ack_id: str) -> None:
        self._nacks.append(ack_id)
        self._wake.set()

    async def close(self) -> None:
        """Write what is queued, then stop. Idempotent."""
        self._closing = True
        self._wake.set()
        task, self._task = self._task, None
        if task is None:
            return
        _, pending = await asyncio.wait([task], timeout=CLOSE_WAIT)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._flush()
            if self._closing and not (self._acks or self._nacks):
                return

    async def _flush(self) -> None:
        acks, self._acks = self._acks, []
        nacks, self._nacks = self._nacks, []
        await asyncio.gather(
            self._write("ack", acks, lambda ids: self._delivery.acknowledge(self._name, ids)),
            self._write("nack", nacks, lambda ids: self._delivery.modify_ack_deadline(self._name, ids, 0)),
        )

    async def _write(
        self, what: str, ids: list[str], call: Callable[[Sequence[str]], Awaitable[None]]
    ) -> None:
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start : start + CHUNK]
            try:
                await call(chunk)
            except GatewayError as exc:
                log.info("%s: %s of %d pushed messages failed: %s", self._name, what, len(chunk), exc.message)
            except Exception:
                log.exception("%s: %s of %d pushed messages failed", self._name, what, len(chunk))
