"""The early API's TruncationPolicy as the owner of partitions applies it (docs/truncation.md):
what is too old or beyond the byte budget is acked in the lease/ack log by the partitions' owner,
and the subscription is told, which raises its truncation event (TruncationService.raise_event).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core.lease_log import LeaseLog
from gateway.core.policies import Policies
from gateway.kafka import consumer as kafka_consumer
from gateway.leases import trim
from gateway.leases.commands import Ack, Command
from gateway.leases.ranges import to_ranges

log = logging.getLogger(__name__)
# How often, while fetching is paused (a backlog beyond PREFETCH_HIGH), the owner asks Kafka
# where its partitions end to estimate the bytes not fetched yet.
TRUNCATION_ENDS_SECONDS = 10.0


class PolicyTruncation:
    """`fetching` says whether the runner fetches (else part of the backlog is in Kafka only);
    `settled` tells the streams that acks ended deliveries of theirs; `on_truncated` is told of
    every round that dropped messages."""

    def __init__(
        self,
        *,
        name: str,
        kafka_topic: str,
        kafka_config: dict[str, Any],
        lease_log: LeaseLog,
        fetching: Callable[[], bool],
        settled: Callable[[int, Command], None],
        on_truncated: Callable[[str], Awaitable[None]] | None,
    ) -> None:
        self.name = name
        self._kafka_topic = kafka_topic
        self._config = kafka_config
        self._log = lease_log
        self._fetching = fetching
        self._settled = settled
        self._on_truncated = on_truncated
        self.dropped = 0  # messages dropped and not yet told (those too old when fetched too)
        self._ends: tuple[float, dict[int, int]] = (0.0, {})  # as last asked (monotonic time)

    async def apply(self, policies: Policies, now: int) -> int:
        """Drop what the policy says must go, from the partitions this process owns: acked in
        the lease/ack log as their owner. Returns how many messages went (with those dropped
        as they were fetched since the last round); the subscription is told when any did."""
        states = self._log.states
        views = {p: trim.PartitionView(trim.held(s.records), s.next_offset) for p, s in states.items()}
        drops: dict[int, list[int]] = {}
        if policies.truncate_max_age_ms:
            drops = trim.by_age(views, now - policies.truncate_max_age_ms)
        elif policies.truncate_max_bytes:
            ends = await self._partition_ends() if not self._fetching() else {}
            views = {p: dataclasses.replace(v, end=ends.get(p)) for p, v in views.items()}
            drops = trim.by_bytes(views, policies.truncate_max_bytes)
        try:
            for p, offsets in drops.items():
                state = states.get(p)
                if state is None:
                    continue
                ack = Ack(p, tuple(to_ranges(offsets)), state.epoch)
                written = await self._log.write(p, [ack])
                self._log.apply(p, ack, written[0].key)
                self._settled(p, ack)
                self.dropped += len(offsets)
        finally:
            if drops:
                self._log.on_change()
        # Counted until the event is raised: a write or a raise that failed is told next round.
        dropped = self.dropped
        if dropped:
            log.info("%s: truncation policy dropped %d messages", self.name, dropped)
            if self._on_truncated is not None:
                await self._on_truncated(self.name)
            self.dropped -= dropped
        return dropped

    async def _partition_ends(self) -> dict[int, int]:
        """Where the owned partitions end, asked of Kafka at most every TRUNCATION_ENDS_SECONDS."""
        asked, ends = self._ends
        if time.monotonic() - asked < TRUNCATION_ENDS_SECONDS:
            return ends

        def ask() -> dict[int, int]:
            return {
                p: kafka_consumer.end_offset(self._config, self._kafka_topic, p)
                for p in list(self._log.states)
            }

        ends = await asyncio.to_thread(ask)
        self._ends = (time.monotonic(), ends)
        return ends
