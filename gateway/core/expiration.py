"""Expiration: subscriptions idle for longer than their TTL, and snapshots past their
expire_time, are deleted by exactly one gateway process.

The processes elect that one with Kafka itself: each joins the consumer group
`<prefix>.janitor` on the single-partition resource topic, and the member that owns the
partition is the janitor (it never reads the partition; the group only decides). Activity
(pulls, streams, acks) is recorded on the subscription resource at most every
min(1 hour, TTL / 4), so every process sees the same last-active time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.clock import now_ms, to_ms
from gateway.core import snapshots
from gateway.core.resources import ResourceStore, StoredSubscription
from gateway.errors import GatewayError
from gateway.kafka import consumer as kafka_consumer
from gateway.translate.meta import SubscriptionMeta
from gateway.translate.records import Record

log = logging.getLogger(__name__)


def ttl_ms(res: StoredSubscription) -> int | None:
    """The subscription's TTL, or None when it never expires."""
    policy = res.proto.expiration_policy
    if not res.proto.HasField("expiration_policy") or not policy.HasField("ttl"):
        return None
    return to_ms(policy.ttl)


def last_active_ms(res: StoredSubscription) -> int:
    return res.meta.active_ms


class ActivityRecorder:
    """Writes a subscription's last-active time, rarely enough to cost nothing."""

    def __init__(self, store: ResourceStore) -> None:
        self._store = store
        self._pending: set[str] = set()

    def touch(self, res: StoredSubscription) -> None:
        ttl = ttl_ms(res)
        if ttl is None or res.name in self._pending:
            return
        now = now_ms()
        if now - last_active_ms(res) < min(3_600_000, ttl // 4):
            return
        self._pending.add(res.name)
        task = asyncio.get_running_loop().create_task(self._write(res.name, now))
        task.add_done_callback(lambda _: self._pending.discard(res.name))

    async def _write(self, name: str, now: int) -> None:
        # By compare-and-set: a plain write of a copy read a moment ago would undo what another
        # process changed meanwhile (a Seek's epoch, a truncation event: core/truncation.py).
        def touched(meta: SubscriptionMeta) -> SubscriptionMeta | None:
            return None if meta.last_active_ms >= now else dataclasses.replace(meta, last_active_ms=now)

        if self._store.get("subscription", name) is None:
            return
        try:
            await self._store.change_subscription(name, touched)
        except GatewayError as exc:
            log.info("recording activity of %s failed: %s", name, exc)


class Janitor(kafka_consumer.FetchListener):
    def __init__(
        self,
        store: ResourceStore,
        delete: Callable[[str], Awaitable[None]],
        kafka_config: dict[str, Any],
        group: str,
        resource_topic: str,
        session_timeout_ms: int,
        interval: float,
    ) -> None:
        self._store = store
        self._delete = delete
        self._interval = interval
        self.leader = False
        self._fetcher = kafka_consumer.GroupFetcher(
            kafka_config, group, resource_topic, self, session_timeout_ms
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._fetcher.start()
        self._task = asyncio.create_task(self._loop(), name="expiration janitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await asyncio.to_thread(self._fetcher.stop)

    # The group only elects; nothing is read or committed.
    def on_assigned(self, partitions: list[int], committed: dict[int, int]) -> dict[int, int]:
        self.leader = True
        return dict.fromkeys(partitions, kafka_consumer.OFFSET_END)

    def on_revoked(self, partitions: list[int], lost: bool) -> dict[int, int]:
        self.leader = False
        return {}

    def on_records(self, records: list[Record]) -> None:
        pass

    def wants_records(self) -> bool:
        return False

    def on_seeked(self, done: dict[int, int]) -> None:
        pass

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            if self.leader:
                await self.sweep(now_ms())

    async def sweep(self, now: int) -> None:
        for res in list(self._store.all("subscription")):
            ttl = ttl_ms(res)
            if ttl is not None and now - last_active_ms(res) > ttl:
                log.info("%s: no activity for its TTL of %d s; deleting it", res.name, ttl // 1000)
                try:
                    await self._delete(res.name)
                except GatewayError as exc:
                    log.warning("expiring %s failed: %s", res.name, exc)
        for snap in list(self._store.all("snapshot")):
            if snapshots.expired(snap, now):
                log.info("%s: past its expire_time; deleting it", snap.name)
                try:
                    await self._store.delete("snapshot", snap.name)
                except GatewayError as exc:
                    log.warning("expiring %s failed: %s", snap.name, exc)
