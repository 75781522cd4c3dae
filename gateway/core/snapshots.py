"""Snapshots and Seek.

A snapshot captures a subscription's exact ack state: per partition the watermark and the
acked ranges above it, folded from the lease/ack log (so every confirmed ack is in it). It is
stored with the other resources. Seek starts a new epoch of the subscription: a checkpoint of
the new epoch is written to every log partition (from the snapshot, or at the offsets Kafka
finds for a time), the partition owners adopt it, move their consumers and forget leases of the
old epoch. Seeking to a time before what Kafka still retains cannot bring deleted records back:
the subscription then starts at the oldest record Kafka has.

As on Pub/Sub, a snapshot expires 7 days after the publish time of the oldest message it holds
unacknowledged (7 days after its creation when it holds none); CreateSnapshot refuses one that
would expire within the hour. An expired snapshot is gone: GetSnapshot, Seek and the lists no
longer find it, and the expiration janitor (core/expiration.py) deletes its record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.clock import now_ms
from gateway.core import masks
from gateway.core.lease_log import Position, write_epoch
from gateway.core.paging import page
from gateway.core.resources import Quota, Resource, ResourceStore, StoredSnapshot, StoredSubscription
from gateway.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from gateway.kafka import consumer as kafka_consumer
from gateway.kafka.admin import Admin
from gateway.kafka.producer import Producer
from gateway.leases.fold import fold
from gateway.translate import limits, names
from gateway.translate.meta import PartitionAcks, SnapshotMeta, SubscriptionMeta

log = logging.getLogger(__name__)
SNAPSHOT_LIFETIME_S = 7 * 24 * 3600
SNAPSHOT_MIN_LIFETIME_S = 3600  # CreateSnapshot's FAILED_PRECONDITION below this, as on Pub/Sub
# How long a Seek waits for the partitions' owners to adopt its new epoch (well past a dead
# owner's group session, 20 s by default, after which the group no longer lists it), and how
# often it looks: their log readers commit what they applied about every 0.25 s.
ADOPT_WAIT_SECONDS = 50.0
ADOPT_POLL_SECONDS = 0.1
UPDATABLE = {"labels", "expire_time"}


class SnapshotService:
    def __init__(
        self,
        store: ResourceStore,
        admin: Admin,
        producer: Producer,
        kafka_config: dict[str, Any],
        max_per_project: int = 5_000,
    ) -> None:
        self._max_per_project = max_per_project
        self._store = store
        self._admin = admin
        self._producer = producer
        self._config = kafka_config

    def get(self, name: str) -> StoredSnapshot:
        names.snapshot(name)
        found = self._store.require("snapshot", name)
        if expired(found, now_ms()):
            raise NotFound(f"Resource not found (resource={name}).")
        return found

    def _subscription(self, name: str) -> StoredSubscription:
        names.subscription(name)
        return self._store.require("subscription", name)

    async def create(self, name: str, subscription: str, labels: Mapping[str, str]) -> pubsub_pb2.Snapshot:
        names.snapshot(name)
        limits.check_labels(labels)
        sub = self._subscription(subscription)
        if self._store.get("snapshot", name) is not None:
            raise AlreadyExists(f"Snapshot already exists: {name}")
        quota = self.quota(name.split("/")[1])
        self._store.check_quota("snapshot", quota)
        if sub.proto.topic == names.DELETED_TOPIC:
            raise FailedPrecondition(f"The topic of {subscription} was deleted.")
        acks = await self._capture(sub)
        now = int(time.time())
        oldest = await self._oldest_unacked_ms(sub, acks)
        expires = now + SNAPSHOT_LIFETIME_S if oldest is None else oldest // 1000 + SNAPSHOT_LIFETIME_S
        if expires - now < SNAPSHOT_MIN_LIFETIME_S:
            raise FailedPrecondition(
                f"The subscription's backlog is too old for a snapshot: its oldest unacknowledged "
                f"message would make the snapshot expire in less than an hour ({subscription})."
            )
        proto = pubsub_pb2.Snapshot(name=name, topic=sub.proto.topic, labels=labels)
        proto.expire_time.FromSeconds(min(expires, now + SNAPSHOT_LIFETIME_S))
        res = Resource(name, proto, SnapshotMeta(sub.meta.kafka_topic, acks))
        self._store.check_size(res)
        stored = await self._store.create(res, quota)
        return stored.proto

    def quota(self, project: str) -> Quota:
        return Quota.per_project("snapshots", project, self._max_per_project, "--max-snapshots-per-project")

    async def _capture(self, sub: StoredSubscription) -> dict[str, PartitionAcks]:
        """Every partition's ack state, folded from the whole log (every confirmed ack is there)."""

        def read(p: int) -> PartitionAcks:
            entries = kafka_consumer.read_to_end(self._config, sub.meta.log_topic, p)
            state, _ = fold(p, 0, ((k, v) for _, k, v in entries), now_ms(), _no_key)
            return {"w": state.watermark, "acked": [list(r) for r in state.acked]}

        parts = range(sub.meta.partitions)
        captured = await asyncio.gather(*(asyncio.to_thread(read, p) for p in parts))
        return {str(p): acks for p, acks in zip(parts, captured, strict=True)}

    async def _oldest_unacked_ms(self, sub: StoredSubscription, acks: dict[str, PartitionAcks]) -> int | None:
        """The publish time of the oldest message the captured state holds unacknowledged, or
        None when it holds none: each partition's first record at or after its watermark outside
        its acked ranges."""

        def first(p: str, state: PartitionAcks) -> int | None:
            skip = [(int(a), int(b)) for a, b in state["acked"]]
            return kafka_consumer.first_timestamp(
                self._config, sub.meta.kafka_topic, int(p), int(state["w"]), skip
            )

        found = await asyncio.gather(*(asyncio.to_thread(first, p, a) for p, a in acks.items()))
        times = [t for t in found if t is not None]
        return min(times) if times else None

    async def update(self, snapshot: pubsub_pb2.Snapshot, mask: Sequence[str]) -> pubsub_pb2.Snapshot:
        def updated(res: StoredSnapshot) -> StoredSnapshot:
            proto = pubsub_pb2.Snapshot()
            proto.CopyFrom(res.proto)
            if "labels" in masks.apply(snapshot, proto, mask, UPDATABLE):
                limits.check_labels(proto.labels)
            return dataclasses.replace(res, proto=proto)

        return (await self._store.change(self.get(snapshot.name), updated)).proto

    async def delete(self, name: str) -> None:
        self.get(name)
        await self._store.delete("snapshot", name)

    def list_page(
        self, project: str, page_size: int, page_token: str
    ) -> tuple[list[pubsub_pb2.Snapshot], str]:
        names.project_name(project)
        now = now_ms()
        live = [
            n for n in self._store.names("snapshot", project + "/snapshots/") if not self._expired(n, now)
        ]
        chunk, token = page(live, page_size, page_token)
        found = (self._store.get("snapshot", n) for n in chunk)
        return [r.proto for r in found if r is not None], token

    def _expired(self, name: str, now: int) -> bool:
        found = self._store.get("snapshot", name)
        return found is None or expired(found, now)

    def for_topic(self, topic: str, page_size: int, page_token: str) -> tuple[list[str], str]:
        return page(
            sorted(
                r.name
                for r in self._store.all("snapshot")
                if r.proto.topic == topic and not expired(r, now_ms())
            ),
            page_size,
            page_token,
        )

    # -- Seek --------------------------------------------------------------------------------

    async def seek_to_time(self, subscription: str, when_ms: int) -> None:
        sub = self._subscription(subscription)
        parts = sub.meta.partitions
        offsets = await self._admin.offsets_for_time(sub.meta.kafka_topic, parts, when_ms)
        await self.start_epoch(sub, {p: Position(o) for p, o in offsets.items()})

    async def seek_to_snapshot(self, subscription: str, snapshot: str) -> None:
        sub = self._subscription(subscription)
        snap = self.get(snapshot)
        if snap.proto.topic != sub.proto.topic or snap.meta.kafka_topic != sub.meta.kafka_topic:
            raise FailedPrecondition(
                f"Snapshot {snapshot} belongs to topic {snap.proto.topic}, not to the topic of "
                f"{subscription}."
            )
        acks = snap.meta.acks
        await self.start_epoch(
            sub,
            {
                int(p): Position(int(a["w"]), tuple((int(s), int(e)) for s, e in a["acked"]))
                for p, a in acks.items()
            },
        )

    async def start_epoch(
        self,
        sub: StoredSubscription,
        state: dict[int, Position],
        also: Callable[[SubscriptionMeta, int], SubscriptionMeta] | None = None,
    ) -> int:
        """Start a new epoch of the lease/ack log at each partition's position in `state`: the
        record's epoch is raised first (by compare-and-set, with `also`'s change of the meta in
        the same write, given the new epoch: a truncation event), then a checkpoint of it is
        written to every log partition (lease_log.write_epoch); the owners adopt them
        (LeaseLog._adopt_seek), and this returns once every partition's owner has
        (`_await_adopted`): from then on no process delivers from the old epoch. Returns the epoch.

        NOT_FOUND when the subscription was deleted, or re-created, meanwhile. UNAVAILABLE when
        an owner did not confirm within ADOPT_WAIT_SECONDS: the new epoch stands all the same
        (an owner that cannot read the log delivers nothing from the old one meanwhile)."""
        uid = sub.meta.uid
        tried: list[int] = []  # the epoch of each try: the last one is what was written

        def raised(meta: SubscriptionMeta) -> SubscriptionMeta:
            if meta.uid != uid:
                raise NotFound(f"Subscription does not exist (resource={sub.name})")
            meta = dataclasses.replace(meta, epoch=meta.epoch + 1)
            tried.append(meta.epoch)
            return meta if also is None else also(meta, meta.epoch)

        await self._store.change_subscription(sub.name, raised)
        epoch = tried[-1]
        written = await write_epoch(self._producer, sub.meta.log_topic, state, epoch)
        log.info("%s: sought (epoch %d)", sub.name, epoch)
        await self._await_adopted(sub, written)
        return epoch

    async def _await_adopted(self, sub: StoredSubscription, checkpoints: dict[int, int]) -> None:
        """Wait until the owner of every partition in `checkpoints` (log partition -> the offset
        of the new epoch's checkpoint there) has applied its log past that offset, as the
        runners' log readers commit it to the subscription's `applied_group`. A partition
        nobody owns needs no wait: its next owner folds the whole log before it delivers. While
        the group rebalances its assignment is not known, so this waits for it to settle."""
        meta = sub.meta
        loop = asyncio.get_running_loop()
        give_up = loop.time() + ADOPT_WAIT_SECONDS
        while True:
            settled, owners = await self._admin.group_assignment(meta.group_id)
            owned = sorted(p for p in owners if p in checkpoints)
            behind = owned if not settled else []
            if settled and owned:
                applied = await self._admin.group_offsets(meta.applied_group, meta.log_topic, owned)
                behind = [p for p in owned if applied.get(p, -1) <= checkpoints[p]]
            if not behind and settled:
                return
            if loop.time() > give_up:
                raise Unavailable(
                    f"Seek of {sub.name}: the owners of partitions {behind or 'of a rebalancing group'} "
                    f"did not take the new position within {ADOPT_WAIT_SECONDS:.0f} s; it stands, "
                    "and they deliver nothing before it meanwhile."
                )
            await asyncio.sleep(ADOPT_POLL_SECONDS)


def check_seek_target(request: pubsub_pb2.SeekRequest) -> None:
    if not request.HasField("time") and not request.snapshot:
        raise InvalidArgument("Seek needs a time or a snapshot.")


def _no_key(_: object) -> None:
    """Snapshots record acks only; ordering keys play no part."""


def expired(snapshot: StoredSnapshot, now: int) -> bool:
    """Whether the snapshot's expire_time has passed (it is then gone, whether or not the
    janitor has deleted its record yet)."""
    proto = snapshot.proto
    return proto.HasField("expire_time") and proto.expire_time.ToMilliseconds() <= now
