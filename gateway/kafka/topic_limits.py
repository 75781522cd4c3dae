"""The largest record batch each Kafka topic takes (its max.message.bytes), as one process last
read it from Kafka.

The gateway makes its own topics take 11 MiB batches. A topic adopted with the label
`kafka-topic` keeps its own limit, which may be below the producer's batch.size (1 MiB): its
batches must then be cut to fit (Producer.fitted_batch), or the broker refuses whole batches of
messages that each fit. A limit is read when a process first publishes to the topic, and again
REFRESH_SECONDS later or after the broker refused a batch as too large (`forget`), so a limit
an operator changes is followed; a read that fails keeps what was known and is tried again
RETRY_SECONDS later. Without DescribeConfigs on the topic the limit is unknown: the producer's
batch.size is used, and a warning says what to grant.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.errors import GatewayError, PermissionDenied
from gateway.kafka.admin import Admin

log = logging.getLogger(__name__)

REFRESH_SECONDS = 60.0
RETRY_SECONDS = 5.0  # after a read that failed


class TopicLimits:
    def __init__(self, admin: Admin, clock: Callable[[], float] = time.monotonic) -> None:
        self._admin = admin
        self._clock = clock
        self._known: dict[str, tuple[float, int | None]] = {}  # topic -> (read at, limit)
        self._reading: dict[str, asyncio.Future[int | None]] = {}
        self._warned: set[str] = set()

    async def of(self, topic: str) -> int | None:
        """The topic's max.message.bytes; None when Kafka would not say (no DescribeConfigs)."""
        known = self._known.get(topic)
        if known is not None and self._clock() - known[0] < REFRESH_SECONDS:
            return known[1]
        reading = self._reading.get(topic)
        if reading is None:  # one read at a time per topic, whoever asks meanwhile waits for it
            reading = self._reading[topic] = asyncio.ensure_future(self._read(topic))
            reading.add_done_callback(lambda _: self._reading.pop(topic, None))
        return await asyncio.shield(reading)

    def forget(self, topic: str) -> None:
        """The broker refused a batch as too large: read the limit again before the next write."""
        self._known.pop(topic, None)

    async def _read(self, topic: str) -> int | None:
        try:
            raw = (await self._admin.topic_config(topic)).get("max.message.bytes")
        except PermissionDenied as exc:
            if topic not in self._warned:
                self._warned.add(topic)
                log.warning(
                    "cannot read max.message.bytes of Kafka topic %s (%s): batches to it are cut to "
                    "batch.size only; grant DescribeConfigs on it if it takes less",
                    topic,
                    exc,
                )
            self._known[topic] = (self._clock(), None)
            return None
        except GatewayError as exc:  # gone, unreachable, ...: the write itself meets it
            # What was known stays, and is asked again after RETRY_SECONDS, not per write.
            log.info("max.message.bytes of Kafka topic %s not read: %s", topic, exc)
            known = self._known.get(topic)
            limit = known[1] if known is not None else None
            self._known[topic] = (self._clock() - REFRESH_SECONDS + RETRY_SECONDS, limit)
            return limit
        limit = int(raw) if raw is not None and raw.isdigit() else None
        self._known[topic] = (self._clock(), limit)
        return limit
