"""Topics and subscriptions, stored in one compacted single-partition Kafka topic.

Every gateway process reads the whole topic at start (before serving) and then follows it, so
a change made through one process reaches the others within about one poll interval (0.1 s
plus Kafka's fetch wait, typically under a second). Writes wait until this process has read
its own write back, so a client sees what it just did. Concurrent creates of one name are
decided by log order: the first create wins, later ones are refused with ALREADY_EXISTS and
their writers re-write the winner so that compaction keeps the winner's record.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Literal

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.errors import AlreadyExists, NotFound, Unavailable
from gateway.kafka import consumer as kafka_consumer
from gateway.kafka.admin import Admin, TopicSpec
from gateway.kafka.producer import Producer

log = logging.getLogger(__name__)
Kind = Literal["topic", "subscription", "snapshot"]
_PROTO: dict[str, type[Any]] = {
    "topic": pubsub_pb2.Topic,
    "subscription": pubsub_pb2.Subscription,
    "snapshot": pubsub_pb2.Snapshot,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """A stored resource: its API proto plus the gateway's own facts about it (`meta`)."""

    kind: Kind
    name: str
    proto: Any
    meta: dict[str, Any]
    op: str = ""

    def key(self) -> bytes:
        return f"{self.kind}/{self.name}".encode()

    @property
    def delivers(self) -> bool:
        """A subscription that may still deliver: not detached, and its topic not deleted."""
        return not (self.meta.get("detached") or self.meta.get("topic_deleted"))

    def encode(self, create: bool) -> bytes:
        return json.dumps({
            "kind": self.kind, "name": self.name, "meta": self.meta, "op": self.op,
            "create": create, "proto": base64.b64encode(self.proto.SerializeToString()).decode(),
        }, separators=(",", ":")).encode()

    @staticmethod
    def decode(value: bytes) -> tuple[Resource, bool]:
        d = json.loads(value)
        proto = _PROTO[d["kind"]].FromString(base64.b64decode(d["proto"]))
        return Resource(d["kind"], d["name"], proto, d["meta"], d.get("op", "")), bool(d["create"])


Listener = Callable[[Kind, str, "Resource | None"], None]


class ResourceStore:
    def __init__(self, admin: Admin, producer: Producer, kafka_config: dict[str, Any], topic: str,
                 replication_factor: int) -> None:
        self._admin = admin
        self._producer = producer
        self._config = kafka_config
        self._topic = topic
        self._items: dict[bytes, Resource] = {}
        self._applied = -1
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._reader: kafka_consumer.TailReader | None = None
        self._listeners: list[Listener] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # Compacted, or retention would delete the resources in a week; one partition, as
        # everything is read from partition 0.
        await self._admin.ensure_topic(TopicSpec(self._topic, 1, {"cleanup.policy": "compact"}, {
            "min.cleanable.dirty.ratio": "0.1", "segment.ms": "3600000",
        }))
        end = await asyncio.to_thread(kafka_consumer.end_offset, self._config, self._topic, 0)
        self._reader = kafka_consumer.TailReader(self._config, "resources", self._on_messages)
        self._reader.start({(self._topic, 0): 0})
        await self._caught_up(end - 1)
        log.info("resource store ready: %d resources from %s", len(self._items), self._topic)

    async def stop(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            await asyncio.to_thread(reader.stop)

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(kind, name, resource-or-None)` on every change, from any process."""
        self._listeners.append(listener)

    # -- reading ---------------------------------------------------------------------------

    def get(self, kind: Kind, name: str) -> Resource | None:
        return self._items.get(f"{kind}/{name}".encode())

    def require(self, kind: Kind, name: str) -> Resource:
        """The resource, or NOT_FOUND as Pub/Sub words it."""
        res = self.get(kind, name)
        if res is None:
            raise NotFound(f"{kind.capitalize()} does not exist (resource={name})")
        return res

    def names(self, kind: Kind, prefix: str) -> list[str]:
        head = f"{kind}/{prefix}".encode()
        return sorted(k.decode().split("/", 1)[1] for k in self._items if k.startswith(head))

    def all(self, kind: Kind) -> Iterator[Resource]:
        return (r for r in self._items.values() if r.kind == kind)

    # -- writing ---------------------------------------------------------------------------

    async def create(self, res: Resource) -> Resource:
        """Store a new resource; ALREADY_EXISTS if the name is taken (decided by log order)."""
        if self.get(res.kind, res.name) is not None:
            raise AlreadyExists(f"{res.kind.capitalize()} already exists: {res.name}")
        mine = dataclasses.replace(res, op=uuid.uuid4().hex)
        await self._write(mine.key(), mine.encode(create=True))
        current = self.get(res.kind, res.name)
        if current is None or current.op != mine.op:
            if current is not None:  # we lost a race: make the winner the last record again
                await self._write(current.key(), current.encode(create=False))
            raise AlreadyExists(f"{res.kind.capitalize()} already exists: {res.name}")
        return current

    async def update(self, res: Resource) -> Resource:
        mine = dataclasses.replace(res, op=uuid.uuid4().hex)
        await self._write(mine.key(), mine.encode(create=False))
        return self.get(res.kind, res.name) or mine

    async def delete(self, kind: Kind, name: str) -> None:
        await self._write(f"{kind}/{name}".encode(), None)

    async def _write(self, key: bytes, value: bytes | None) -> None:
        _, offset = (await self._producer.send(self._topic, [(key, value, None)], partition=0))[0]
        await self._caught_up(offset)

    async def _caught_up(self, offset: int, wait: float = 30.0) -> None:
        if offset <= self._applied:
            return
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append((offset, fut))
        try:
            await asyncio.wait_for(fut, wait)
        except TimeoutError as exc:
            raise Unavailable("the resource log did not catch up in time") from exc

    # -- following the log -----------------------------------------------------------------

    def _on_messages(self, batch: list[tuple[str, int, int, bytes | None, bytes | None]]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._apply, batch)

    def _apply(self, batch: list[tuple[str, int, int, bytes | None, bytes | None]]) -> None:
        for _topic, _p, offset, key, value in batch:
            self._applied = max(self._applied, offset)
            if key is None:
                continue
            try:
                self._apply_one(key, value)
            except Exception:
                log.exception("unreadable resource record at offset %d", offset)
        done = [w for w in self._waiters if w[0] <= self._applied]
        self._waiters = [w for w in self._waiters if w[0] > self._applied]
        for _, fut in done:
            if not fut.done():
                fut.set_result(None)

    def _apply_one(self, key: bytes, value: bytes | None) -> None:
        kind, _, name = key.decode().partition("/")
        if value is None:
            if self._items.pop(key, None) is not None:
                self._notify(kind, name, None)  # type: ignore[arg-type]
            return
        res, create = Resource.decode(value)
        if create and key in self._items:
            return  # a create that lost the race
        self._items[key] = res
        self._notify(res.kind, res.name, res)

    def _notify(self, kind: Kind, name: str, res: Resource | None) -> None:
        for listener in self._listeners:
            try:
                listener(kind, name, res)
            except Exception:
                log.exception("resource listener failed for %s %s", kind, name)
