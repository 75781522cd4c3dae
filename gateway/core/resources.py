"""Topics, subscriptions, snapshots and schemas, stored in one compacted single-partition Kafka topic.

Every gateway process reads the whole topic at start (before serving) and then follows it, so
a change made through one process reaches the others within about one poll interval (0.1 s
plus Kafka's fetch wait, typically under a second). Writes wait until this process has read
its own write back, so a client sees what it just did. Concurrent creates of one name are
decided by log order: the first create wins, later ones are refused with ALREADY_EXISTS and
their writers re-write the winner so that compaction keeps the winner's record.

Quotas (resources of a kind per project) are decided by log order too: a create is refused when
the resources of its kind and project that came before it in the log already reach the limit.
Every process reads the log in the same order, so several processes sharing one Kafka never
admit more than the limit together (a resource deleted while a create is decided may make it
refuse one that would just have fit).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Generic, Literal, Self, TypeVar, cast, overload

from google.protobuf.message import Message

from gateway._pb.google.pubsub.v1 import pubsub_pb2, schema_pb2
from gateway.errors import Aborted, AlreadyExists, InvalidArgument, NotFound
from gateway.kafka.admin import Admin, TopicSpec
from gateway.kafka.compacted import CompactedFollower
from gateway.kafka.producer import Producer
from gateway.translate import limits
from gateway.translate import meta as meta_json
from gateway.translate.meta import (
    Kind,
    Meta,
    SchemaMeta,
    SchemaRevisionMeta,
    SnapshotMeta,
    SubscriptionMeta,
    TopicMeta,
)

log = logging.getLogger(__name__)
# Our own generator: drawing from `random`'s shared one would move the state of the program
# that embeds the gateway (tests, seeded or not, included).
_random = random.Random()
ProtoT = TypeVar("ProtoT", bound=Message)
MetaT = TypeVar("MetaT", bound=Meta)


@dataclasses.dataclass(frozen=True, slots=True)
class Resource(Generic[ProtoT, MetaT]):
    """A stored resource: its API proto plus the gateway's own facts about it (`meta`, typed
    per kind: translate/meta.py). Its kind is its meta's."""

    name: str
    proto: ProtoT
    meta: MetaT
    op: str = ""
    # A compare-and-set write (ResourceStore.replace): the op of the version it replaces. Every
    # process applies it only if that version is the one it holds when the record comes.
    base: str = ""

    @property
    def kind(self) -> Kind:
        return self.meta.KIND

    def key(self) -> bytes:
        return f"{self.kind}/{self.name}".encode()

    def with_iam_policy(self, encoded: str) -> Self:
        """A copy holding another IAM policy (core/access.py): every kind has one."""
        return dataclasses.replace(self, meta=dataclasses.replace(self.meta, iam_policy=encoded))

    def encode(self, create: bool) -> bytes:
        return json.dumps(
            {
                "kind": self.kind,
                "name": self.name,
                "meta": meta_json.to_json(self.meta),
                "op": self.op,
                **({"base": self.base} if self.base else {}),
                "create": create,
                "proto": base64.b64encode(self.proto.SerializeToString()).decode(),
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def decode(value: bytes) -> tuple[AnyResource, bool]:
        d = json.loads(value)
        name, op, base = d["name"], d.get("op", ""), d.get("base", "")
        raw = base64.b64decode(d["proto"])
        meta = meta_json.from_json(d["kind"], d["meta"])
        res: AnyResource
        if isinstance(meta, TopicMeta):
            res = Resource(name, pubsub_pb2.Topic.FromString(raw), meta, op, base)
        elif isinstance(meta, SubscriptionMeta):
            res = Resource(name, pubsub_pb2.Subscription.FromString(raw), meta, op, base)
        elif isinstance(meta, SnapshotMeta):
            res = Resource(name, pubsub_pb2.Snapshot.FromString(raw), meta, op, base)
        elif isinstance(meta, SchemaMeta):
            res = Resource(name, schema_pb2.Schema.FromString(raw), meta, op, base)
        else:
            res = Resource(name, schema_pb2.Schema.FromString(raw), meta, op, base)
        return res, bool(d["create"])


StoredTopic = Resource[pubsub_pb2.Topic, TopicMeta]
StoredSubscription = Resource[pubsub_pb2.Subscription, SubscriptionMeta]
StoredSnapshot = Resource[pubsub_pb2.Snapshot, SnapshotMeta]
StoredSchema = Resource[schema_pb2.Schema, SchemaMeta]
StoredSchemaRevision = Resource[schema_pb2.Schema, SchemaRevisionMeta]
AnyResource = StoredTopic | StoredSubscription | StoredSnapshot | StoredSchema | StoredSchemaRevision
R = TypeVar("R", StoredTopic, StoredSubscription, StoredSnapshot, StoredSchema, StoredSchemaRevision)


def subscription_or_none(res: AnyResource | None) -> StoredSubscription | None:
    """`res` if it is a subscription (for listeners, which hear of every kind)."""
    return res if res is not None and isinstance(res.meta, SubscriptionMeta) else None  # type: ignore[return-value]


Listener = Callable[[Kind, str, "AnyResource | None"], None]
# A key whose newest record was not applied is settled by its writer at once, or, when the writer
# died or lost Kafka first, by any process's sweep once it has been so this long (checked about
# every SWEEP_SECONDS). Compaction, which could make such a record hold for a process started
# later, comes no sooner than the resource topic's segments roll (hourly).
SETTLE_GRACE_SECONDS = 10.0
SWEEP_SECONDS = 5.0
# The value of a record saying its key holds nothing (ResourceStore._settle). Unlike a tombstone
# it deletes nothing: a process that holds a version of the key when it comes keeps it.
ABSENT = b'{"absent":true}'
RECORD_OVERHEAD = 512  # bytes of a Kafka record batch around one resource's key and value


@dataclasses.dataclass(frozen=True, slots=True)
class Quota:
    """At most `limit` resources whose names start with `prefix` (a kind in one project);
    `refusal(current)` is the error for a create that would exceed it."""

    prefix: str
    limit: int
    refusal: Callable[[int], Exception]

    @staticmethod
    def per_project(collection: str, project: str, limit: int, flag: str) -> Quota:
        """At most `limit` of `projects/{project}/{collection}/...`, refused as Pub/Sub words
        it, naming the setting (`flag`) that raises the gateway's limit."""
        return Quota(
            f"projects/{project}/{collection}/",
            limit,
            lambda current: limits.quota_exceeded(collection, project, current, limit, flag),
        )


class ResourceStore:
    def __init__(
        self,
        admin: Admin,
        producer: Producer,
        kafka_config: dict[str, Any],
        topic: str,
        replication_factor: int,
    ) -> None:
        self._admin = admin
        self._producer = producer
        self._topic = topic
        self._items: dict[bytes, AnyResource] = {}
        self._since: dict[bytes, int] = {}  # the log offset at which each resource appeared
        self._max_record = 1_000_000  # read from the topic at start
        self._follower = CompactedFollower(
            kafka_config,
            topic,
            "resources",
            self._on_record,
            late="the resource log did not catch up in time",
        )
        self._listeners: list[Listener] = []
        # replace(): whether each watched compare-and-set record was applied; the offset of the
        # latest record of each key; the keys whose latest record is a tombstone; the keys whose
        # latest record was not applied, with when that was seen (_settle)
        self._applied: dict[str, bool | None] = {}
        self._latest: dict[bytes, int] = {}
        self._deleted: set[bytes] = set()
        self._unsettled: dict[bytes, float] = {}
        self._sweeping: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # Compacted, or retention would delete the resources in a week; one partition, as
        # everything is read from partition 0.
        await self._admin.ensure_topic(
            TopicSpec(
                self._topic,
                1,
                {"cleanup.policy": "compact"},
                {
                    "min.cleanable.dirty.ratio": "0.1",
                    "segment.ms": "3600000",
                },
            )
        )
        configured = (await self._admin.topic_config(self._topic)).get("max.message.bytes", "")
        if configured.isdigit():
            self._max_record = int(configured)
        await self._follower.start()
        self._sweeping = asyncio.create_task(self._sweep(), name="resource-settle-sweep")
        log.info("resource store ready: %d resources from %s", len(self._items), self._topic)

    async def stop(self) -> None:
        if self._sweeping is not None:
            self._sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeping
        await self._follower.stop()

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(kind, name, resource-or-None)` on every change, from any process."""
        self._listeners.append(listener)

    # -- reading ---------------------------------------------------------------------------

    @overload
    def get(self, kind: Literal["topic"], name: str) -> StoredTopic | None: ...
    @overload
    def get(self, kind: Literal["subscription"], name: str) -> StoredSubscription | None: ...
    @overload
    def get(self, kind: Literal["snapshot"], name: str) -> StoredSnapshot | None: ...
    @overload
    def get(self, kind: Literal["schema"], name: str) -> StoredSchema | None: ...
    @overload
    def get(self, kind: Literal["schema_revision"], name: str) -> StoredSchemaRevision | None: ...
    @overload
    def get(self, kind: Kind, name: str) -> AnyResource | None: ...
    def get(self, kind: Kind, name: str) -> AnyResource | None:
        # Every record is held under its own kind (_apply_one), so the overloads hold.
        return self._items.get(f"{kind}/{name}".encode())

    @overload
    def require(self, kind: Literal["topic"], name: str) -> StoredTopic: ...
    @overload
    def require(self, kind: Literal["subscription"], name: str) -> StoredSubscription: ...
    @overload
    def require(self, kind: Literal["snapshot"], name: str) -> StoredSnapshot: ...
    @overload
    def require(self, kind: Literal["schema"], name: str) -> StoredSchema: ...
    def require(self, kind: Kind, name: str) -> AnyResource:
        """The resource, or NOT_FOUND as Pub/Sub words it."""
        res = self.get(kind, name)
        if res is None:
            raise NotFound(f"{kind.capitalize()} does not exist (resource={name})")
        return res

    def names(self, kind: Kind, prefix: str) -> list[str]:
        head = f"{kind}/{prefix}".encode()
        return sorted(k.decode().split("/", 1)[1] for k in self._items if k.startswith(head))

    @overload
    def all(self, kind: Literal["topic"]) -> Iterator[StoredTopic]: ...
    @overload
    def all(self, kind: Literal["subscription"]) -> Iterator[StoredSubscription]: ...
    @overload
    def all(self, kind: Literal["snapshot"]) -> Iterator[StoredSnapshot]: ...
    @overload
    def all(self, kind: Literal["schema"]) -> Iterator[StoredSchema]: ...
    def all(self, kind: Kind) -> Iterator[AnyResource]:
        return (r for r in self._items.values() if r.kind == kind)

    def count(self, kind: Kind, prefix: str, before: int | None = None) -> int:
        """How many resources of `kind` have names starting with `prefix` (those that appeared
        in the log before offset `before`, if given)."""
        head = f"{kind}/{prefix}".encode()
        return sum(
            1 for k, at in self._since.items() if k.startswith(head) and (before is None or at < before)
        )

    def check_quota(self, kind: Kind, quota: Quota) -> None:
        """Refuse a create at once when the quota is reached already (before any other write)."""
        current = self.count(kind, quota.prefix)
        if current >= quota.limit:
            raise quota.refusal(current)

    def check_size(self, res: AnyResource) -> None:
        """INVALID_ARGUMENT when the resource is too large for the resources topic."""
        size = len(res.key()) + len(res.encode(create=True))
        if size > self._max_record - RECORD_OVERHEAD:
            raise self._too_large(res, size)

    def _too_large(self, res: AnyResource, size: int) -> InvalidArgument:
        return InvalidArgument(
            f"The {res.kind} {res.name} takes {size} bytes when stored, more than the gateway's "
            f"resources topic {self._topic} accepts (max.message.bytes {self._max_record}, less "
            f"{RECORD_OVERHEAD} bytes of overhead); make its fields shorter."
        )

    # -- writing ---------------------------------------------------------------------------

    async def create(self, res: R, quota: Quota | None = None) -> R:
        """Store a new resource; ALREADY_EXISTS if the name is taken, RESOURCE_EXHAUSTED if the
        quota was reached before it (both decided by log order: see the module's doc). Either
        way nothing of it stays stored. UNAVAILABLE leaves it unknown whether it is: see
        `outcome`. `res.op` names this create (one is made when empty)."""
        if self.get(res.kind, res.name) is not None:
            raise AlreadyExists(f"{res.kind.capitalize()} already exists: {res.name}")
        if quota is not None:
            self.check_quota(res.kind, quota)
        mine = res if res.op else dataclasses.replace(res, op=uuid.uuid4().hex)
        try:
            offset = await self._write(mine.key(), mine.encode(create=True))
        except InvalidArgument as exc:  # Kafka refused the record as too large: not written
            size = len(mine.key()) + len(mine.encode(create=True))
            raise self._too_large(mine, size) from exc
        current = self._held(res)
        if current is None or current.op != mine.op:
            await self._settle_or_leave(mine.key())  # we lost a race: keep the winner
            raise AlreadyExists(f"{res.kind.capitalize()} already exists: {res.name}")
        if quota is not None:
            before = self.count(res.kind, quota.prefix, before=offset)
            if before >= quota.limit:  # others came first: ours goes again
                log.info(
                    "%s %s refused after all: %d came first in the log (limit %d)",
                    res.kind,
                    res.name,
                    before,
                    quota.limit,
                )
                await self._write(mine.key(), None)
                raise quota.refusal(before)
        return current

    async def outcome(self, kind: Kind, name: str, op: str, wait: float = 120.0) -> bool | None:
        """Whether the create `op` of (kind, name) is stored, once this process has read all
        that was written to the log until now (a create that failed with UNAVAILABLE may yet
        have been written); None when that cannot be told within `wait` seconds."""
        assert self._loop is not None
        deadline = self._loop.time() + wait
        while True:
            try:
                end = await self._follower.end_offset()
                await self._follower.caught_up(end - 1, max(1.0, deadline - self._loop.time()))
            except Exception as exc:  # noqa: BLE001 - Kafka still unreachable: try again
                if self._loop.time() >= deadline:
                    log.warning("could not tell whether %s %s was stored: %s", kind, name, exc)
                    return None
                await asyncio.sleep(1.0)
                continue
            current = self.get(kind, name)
            return current is not None and current.op == op

    async def replace(self, res: AnyResource, expected_op: str) -> None:
        """Write `res` over the stored version whose op is `expected_op`, or raise Aborted when
        another write came in between, in this process or another. The record names the version
        it replaces, and every process applies it only if that version is the one it holds
        when the record comes: log order decides, the same way everywhere. A record that was
        not applied is seen to by `_settle`."""
        current = self._items.get(res.key())
        if current is None:
            raise NotFound(f"{res.kind.capitalize()} does not exist (resource={res.name})")
        if current.op != expected_op:
            raise Aborted(f"The {res.kind} changed concurrently: read it again and retry.")
        mine = dataclasses.replace(res, op=uuid.uuid4().hex, base=expected_op)
        self._applied[mine.op] = None
        try:
            await self._write(mine.key(), mine.encode(create=False))
            applied = self._applied.get(mine.op)
        finally:
            self._applied.pop(mine.op, None)
        if not applied:
            await self._settle_or_leave(mine.key())
            raise Aborted(f"The {res.kind} changed concurrently: read it again and retry.")

    async def change(self, res: R, change: Callable[[R], R | None], attempts: int = 20) -> R:
        """Change the resource `res` names (its kind and name) by compare-and-set (`replace`):
        `change` gets the version held now and returns the new one (None: nothing to write; it
        may raise to give up), and is called again on the version that won whenever another
        write came in between, so no change made meanwhile is undone. Returns the resource as
        stored; NOT_FOUND when it is gone; ABORTED after `attempts` losses."""
        for _ in range(attempts):
            current = self._held(res)
            if current is None:
                raise NotFound(f"{res.kind.capitalize()} does not exist (resource={res.name})")
            new = change(current)
            if new is None:
                return current
            try:
                await self.replace(new, current.op)
            except Aborted:
                continue
            return self._held(res) or new
        raise Aborted(f"The {res.kind} {res.name} kept changing concurrently: try again.")

    async def change_subscription(
        self,
        name: str,
        change: Callable[[SubscriptionMeta], SubscriptionMeta | None],
        attempts: int = 20,
    ) -> StoredSubscription:
        """`change` of a subscription's meta: `change` gets the meta held now and returns the
        new one (None: nothing to write)."""

        def of_meta(current: StoredSubscription) -> StoredSubscription | None:
            meta = change(current.meta)
            return None if meta is None else dataclasses.replace(current, meta=meta)

        return await self.change(self.require("subscription", name), of_meta, attempts)

    async def _settle(self, key: bytes, attempts: int = 20) -> None:
        """While the newest record of `key` is one that was not applied (a compare-and-set or a
        create that lost, in this process or another), write there what this process holds: the
        held version as a compare-and-set record of itself (base = its op), or ABSENT when
        nothing is held. Compaction keeps each key's newest record and a process started later
        reads it alone, so a loser must not stay the newest. A plain record or a tombstone would
        undo a change or a create that came in between and whose writer was told it succeeded;
        these are applied only while what they name is still what every process holds. One that
        is not (another write came in between again) is followed in turn."""
        for _ in range(attempts):
            if key not in self._unsettled:
                return
            held = self._items.get(key)
            value = ABSENT if held is None else dataclasses.replace(held, base=held.op).encode(create=False)
            await self._write(key, value)
        log.warning("the newest record of %s is still one that was not applied", key.decode())

    async def _settle_or_leave(self, key: bytes) -> None:
        """`_settle` by the writer that lost; when Kafka fails it, the sweep does it later."""
        try:
            await self._settle(key)
        except Exception as exc:  # noqa: BLE001 - the loser's own answer (ABORTED) stands
            log.warning("left %s to the next sweep: %s", key.decode(), exc)

    async def _sweep(self) -> None:
        """Settle what writers left: one that died, or was cut off from Kafka, between its
        record and the clean-up. Any process may; a duplicate clean-up changes nothing."""
        assert self._loop is not None
        while True:
            await asyncio.sleep(_random.uniform(0.5, 1.5) * SWEEP_SECONDS)
            await self.sweep_once(self._loop.time())

    async def sweep_once(self, now: float) -> None:
        """Settle every key unsettled for SETTLE_GRACE_SECONDS by `now` (public for tests)."""
        for key, since in list(self._unsettled.items()):
            if now - since >= SETTLE_GRACE_SECONDS:
                try:
                    await self._settle(key)
                except Exception as exc:  # noqa: BLE001 - tried again at the next sweep
                    log.warning("could not settle %s: %s", key.decode(), exc)

    def _held(self, res: R) -> R | None:
        """The version of `res` this process holds (of the same kind: _apply_one holds every
        record under its own kind)."""
        return cast("R | None", self._items.get(res.key()))

    async def delete(self, kind: Kind, name: str) -> None:
        await self._write(f"{kind}/{name}".encode(), None)

    async def _write(self, key: bytes, value: bytes | None) -> int:
        _, offset = (await self._producer.send(self._topic, [(key, value, None)], partition=0))[0]
        await self._follower.caught_up(offset)
        return offset

    # -- following the log -----------------------------------------------------------------

    def _on_record(self, key: bytes, value: bytes | None, offset: int) -> None:
        try:
            self._apply_one(key, value, offset)
        except Exception:
            log.exception("unreadable resource record at offset %d", offset)

    def _apply_one(self, key: bytes, value: bytes | None, offset: int) -> None:
        kind, _, name = key.decode().partition("/")
        self._latest[key] = offset
        self._unsettled.pop(key, None)  # put back below when this record is not applied
        if value is None:
            self._since.pop(key, None)
            self._deleted.add(key)
            if self._items.pop(key, None) is not None:
                self._notify(kind, name, None)  # type: ignore[arg-type]
            return
        if value == ABSENT:  # nothing held here, unlike a tombstone applied only if so
            if key in self._items:
                self._unsettle(key)
            else:
                self._deleted.add(key)
            return
        res, create = Resource.decode(value)
        if res.kind != kind or res.name != name:
            raise ValueError(f"a {res.kind} record {res.name!r} under the key {key!r}")
        if create and key in self._items:
            self._unsettle(key)  # a create that lost the race
            return
        if res.base:
            held = self._items.get(key)
            # Without a held version, the record is applied unless the key was deleted: its
            # predecessors may have been compacted away.
            valid = held.op == res.base if held is not None else key not in self._deleted
            if res.op in self._applied and self._applied[res.op] is None:  # not a rewrite's
                self._applied[res.op] = valid
            if not valid:
                self._unsettle(key)
                return
            res = dataclasses.replace(res, base="")  # what is held (and rewritten) is plain
        self._deleted.discard(key)
        self._since.setdefault(key, offset)
        self._items[key] = res
        self._notify(res.kind, res.name, res)

    def _unsettle(self, key: bytes) -> None:
        self._unsettled[key] = self._loop.time() if self._loop is not None else 0.0

    def _notify(self, kind: Kind, name: str, res: AnyResource | None) -> None:
        for listener in self._listeners:
            try:
                listener(kind, name, res)
            except Exception:
                log.exception("resource listener failed for %s %s", kind, name)


Step = Callable[[], Awaitable[None]]


class Rollback:
    """What a create made so far (Kafka topics, a consumer group, a config), undone in reverse
    order when the create fails half way. An undo step that fails is tried again a few times;
    what still cannot be undone is logged as a WARNING naming it."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._steps: list[tuple[str, Step]] = []

    def add(self, thing: str, undo: Step) -> None:
        self._steps.append((thing, undo))

    async def run(self, attempts: int = 5) -> None:
        for thing, undo in reversed(self._steps):
            wait = 0.5
            for attempt in range(1, attempts + 1):
                try:
                    await undo()
                    break
                except Exception as exc:  # noqa: BLE001 - logged; the next step still runs
                    if attempt == attempts:
                        log.warning("%s failed half way and %s is left behind: %s", self._what, thing, exc)
                        break
                    await asyncio.sleep(wait)
                    wait *= 2
        self._steps.clear()
