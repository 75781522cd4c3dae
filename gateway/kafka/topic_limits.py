"""What each Kafka topic takes, as one process last read it from Kafka: the largest record batch
(its max.message.bytes), and whether it is compacted (cleanup.policy), which refuses records
without a key.

The gateway makes its own topics take 11 MiB batches. A topic adopted with the label
`kafka-topic` keeps its own configs. Its limit may be below the producer's batch.size (1 MiB):
its batches must then be cut to fit (Producer.fitted_batch), or the broker refuses whole
batches of messages that each fit. A compacted one refuses every message without an ordering
key. A topic's configs are read when a process first publishes to it, again REFRESH_SECONDS
later, and after the broker refused a write (`forget`), so a config an operator changes is
followed; a read that fails keeps what was known and is tried again RETRY_SECONDS later.
Without DescribeConfigs on the topic they are unknown: the producer's batch.size is used, the
broker alone refuses what it refuses, and a warning says what to grant.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import NamedTuple

from gateway.errors import GatewayError, PermissionDenied
from gateway.kafka.admin import Admin
from gateway.once import OnePerKey

log = logging.getLogger(__name__)

REFRESH_SECONDS = 60.0
RETRY_SECONDS = 5.0  # after a read that failed


class TopicConfig(NamedTuple):
    max_message_bytes: int | None  # None: not known
    compacted: bool


UNKNOWN = TopicConfig(None, False)


class TopicLimits:
    def __init__(self, admin: Admin, clock: Callable[[], float] = time.monotonic) -> None:
        self._admin = admin
        self._clock = clock
        self._known: dict[str, tuple[float, TopicConfig]] = {}  # topic -> (read at, config)
        self._reading: OnePerKey[str, TopicConfig] = OnePerKey()  # whoever asks meanwhile waits
        self._warned: set[str] = set()

    async def of(self, topic: str) -> TopicConfig:
        """The topic's configs that decide what it takes; UNKNOWN when Kafka would not say (no
        DescribeConfigs)."""
        known = self._known.get(topic)
        if known is not None and self._clock() - known[0] < REFRESH_SECONDS:
            return known[1]
        return await self._reading.run(topic, lambda: self._read(topic))

    def forget(self, topic: str) -> None:
        """The broker refused a write: read the topic's configs again before the next one."""
        self._known.pop(topic, None)

    async def _read(self, topic: str) -> TopicConfig:
        try:
            configs = await self._admin.topic_config(topic)
        except PermissionDenied as exc:
            if topic not in self._warned:
                self._warned.add(topic)
                log.warning(
                    "cannot read the configs of Kafka topic %s (%s): batches to it are cut to "
                    "batch.size only; grant DescribeConfigs on it if it takes less",
                    topic,
                    exc,
                )
            self._known[topic] = (self._clock(), UNKNOWN)
            return UNKNOWN
        except GatewayError as exc:  # gone, unreachable, ...: the write itself meets it
            # What was known stays, and is asked again after RETRY_SECONDS, not per write.
            log.info("the configs of Kafka topic %s not read: %s", topic, exc)
            known = self._known.get(topic)
            config = known[1] if known is not None else UNKNOWN
            self._known[topic] = (self._clock() - REFRESH_SECONDS + RETRY_SECONDS, config)
            return config
        raw = configs.get("max.message.bytes")
        policies = {p.strip() for p in configs.get("cleanup.policy", "delete").split(",")}
        config = TopicConfig(int(raw) if raw is not None and raw.isdigit() else None, "compact" in policies)
        self._known[topic] = (self._clock(), config)
        return config
