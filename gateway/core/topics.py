"""Topics: administration and Publish.

A topic's Kafka topic is derived from its name (see translate.names), or, with the label
`kafka-topic`, an existing Kafka topic is adopted as it is. The label `kafka-partitions` sets the
partition count of a new Kafka topic, at most --max-partitions-per-topic (every subscription's
lease/ack log gets as many). A create checks everything it can before it writes anything; one
that fails after making its Kafka topic deletes it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.clock import to_ms, within
from gateway.core import masks
from gateway.core.paging import page
from gateway.core.resources import Quota, Resource, ResourceStore, Rollback, StoredSubscription, StoredTopic
from gateway.core.tally import Tallies, TopicTally
from gateway.core.topic_schemas import TopicSchemas
from gateway.errors import (
    AlreadyExists,
    FailedPrecondition,
    GatewayError,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from gateway.kafka.admin import Admin
from gateway.kafka.producer import OutRecord, Producer, UnknownTopic, alone_bytes
from gateway.kafka.topic_limits import TopicLimits
from gateway.once import OnePerKey
from gateway.settings import Settings
from gateway.translate import limits, names, records, unsupported
from gateway.translate.meta import TopicMeta

log = logging.getLogger(__name__)
ADOPT_LABEL = "kafka-topic"
PARTITIONS_LABEL = "kafka-partitions"
# A Kafka topic made just before the CreateTopic that adopts it may not be known to the broker
# asked yet (its metadata follows the controller's): looked for this long before NOT_FOUND.
ADOPT_WAIT_SECONDS = 3.0
# How long DeleteTopic waits for the broker to stop listing the deleted Kafka topic, so that a
# CreateTopic of the same name right after does not find it (Admin.delete_topic); past it,
# DeleteTopic answers anyway: the resource is gone.
DELETE_SETTLE_SECONDS = 5.0
# How often CreateTopic tries to make its Kafka topic or take on a left-over one, while the one
# it finds goes away between the two (a deletion landing): each try ends in one or the other.
TAKE_ON_TRIES = 3
# A Publish whose Kafka topic the producer does not know looks at the cluster, for this long
# while the topic is not found (a broker's metadata follows the controller's), before NOT_FOUND.
GONE_WAIT_SECONDS = 2.0
# The look takes at most this long in all: when Kafka is down, the write's own UNAVAILABLE.
GONE_LOOK_SECONDS = 5.0
MAX_MESSAGE_BYTES = 11 * 1024 * 1024  # Pub/Sub allows 10 MB messages; Kafka's default is 1 MB
# More than a record batch holding one record without headers takes beyond the record's key
# and value: the batch header (61 bytes) and the record's length, attributes, deltas and
# field lengths. Records with headers are sized exactly (alone_bytes).
RECORD_OVERHEAD = 100
OWN_LABELS = {ADOPT_LABEL: names.KAFKA_TOPIC_MAX, PARTITIONS_LABEL: limits.MAX_LABEL_CHARS}
UPDATABLE = {
    "labels",
    "message_storage_policy",
    "kms_key_name",
    "schema_settings",
    "message_retention_duration",
    "ingestion_data_source_settings",
    "message_transforms",
}


class NewTopic(NamedTuple):
    """What CreateTopic makes of a request that passed its own checks (`TopicService.check_new`)."""

    name: names.TopicName
    kafka: names.KafkaTopic
    partitions: int
    adopted: bool
    retention: dict[str, str]  # Kafka's retention.ms, when the request sets a retention


class TopicService:
    def __init__(
        self,
        settings: Settings,
        store: ResourceStore,
        admin: Admin,
        producer: Producer,
        schemas: TopicSchemas,
    ) -> None:
        self._settings = settings
        self._store = store
        self._admin = admin
        self._producer = producer
        self._schemas = schemas
        self._limits = TopicLimits(admin)  # adopted topics' max.message.bytes
        # Publish calls failing together (an outage, a deletion) share one look at their topic.
        self._looks: OnePerKey[str, int | None] = OnePerKey()
        self._undoing: set[asyncio.Task[None]] = set()
        self.tallies = Tallies(TopicTally, settings.metrics_max_topics)  # publishes, for /metrics

    def get(self, name: str) -> StoredTopic:
        names.topic(name)
        res = self._store.get("topic", name)
        if res is None:
            raise NotFound(f"Topic not found (resource={name})")
        return res

    async def check_new(self, topic: pubsub_pb2.Topic) -> NewTopic:
        """Every check CreateTopic makes of the request itself before it writes anything: its
        name, settings never acted on, labels, retention and partitions, and an adopted Kafka
        topic's name and existence. What depends on the other resources stored (the name free,
        the project's quota, the schema named) is left to `create`, and to the bootstrap file's
        check (gateway/bootstrap), which knows what the file makes besides."""
        name = names.topic(topic.name)
        unsupported.check_topic(topic)
        limits.check_labels(topic.labels, OWN_LABELS)
        retention = _retention(topic)
        partitions = self._partitions(topic.labels)
        adopted = ADOPT_LABEL in topic.labels
        if adopted:
            kafka = names.check_kafka_topic(topic.labels[ADOPT_LABEL])
            self._refuse_reserved(kafka, f"the label {ADOPT_LABEL}")
            found = await self._admin.partitions(kafka, wait=ADOPT_WAIT_SECONDS)
            if found is None:
                raise NotFound(f"Kafka topic {kafka} to adopt for {name} does not exist")
            self._check_adoptable(kafka, found)
            partitions = found
        else:
            kafka = names.kafka_topic_for(name)
            self._refuse_reserved(kafka, "the topic's name")
        return NewTopic(name, kafka, partitions, adopted, retention)

    async def create(self, topic: pubsub_pb2.Topic) -> pubsub_pb2.Topic:
        name, kafka, partitions, adopted, retention = await self.check_new(topic)
        if self._store.get("topic", name) is not None:
            raise AlreadyExists(f"Topic already exists: {name}")
        quota = self.quota(name.split("/")[1])
        self._store.check_quota("topic", quota)
        first, last = self.check_schema(topic)
        proto = pubsub_pb2.Topic()
        proto.CopyFrom(topic)
        unsupported.scrub_topic(proto)
        proto.state = pubsub_pb2.Topic.State.ACTIVE
        meta = TopicMeta(kafka, partitions, adopted, schema_first_seq=first, schema_last_seq=last)
        res = Resource(name, proto, meta, op=uuid.uuid4().hex)
        self._store.check_size(res)
        undo, storing = Rollback(f"CreateTopic {name}"), False
        try:
            if adopted:
                if retention:
                    old = await self._admin.topic_overrides(kafka)
                    await self._admin.set_topic_config(kafka, retention)
                    undo.add(
                        f"the retention.ms set on Kafka topic {kafka}",
                        lambda: self._admin.set_topic_config(
                            kafka, {"retention.ms": old.get("retention.ms")}
                        ),
                    )
            else:
                config = {"max.message.bytes": str(MAX_MESSAGE_BYTES), **retention}
                # Needs DESCRIBE, as all the gateway does with the topic later: refused here,
                # naming it, before anything is made. Its answer decides nothing (see below).
                await self._admin.partitions(kafka)
                await self._make_or_take_on(name, kafka, partitions, config, undo)
            storing = True
            stored = await self._store.create(res, quota)
        except BaseException as exc:
            unknown = storing and isinstance(exc, (Unavailable, asyncio.CancelledError))
            await self._undo(undo, res, unknown)
            raise
        log.info("created topic %s on Kafka topic %s (%d partitions)", name, kafka, partitions)
        return stored.proto

    async def _make_or_take_on(
        self, name: str, kafka: str, partitions: int, config: dict[str, str], undo: Rollback
    ) -> None:
        """The Kafka topic of a new Pub/Sub topic of a derived name: made, or taken on if it is
        left over from a create interrupted after the Kafka step (`_take_on`).

        Made first, and taken on only if Kafka's controller says it exists: the broker a look-up
        reaches answers from its copy of the cluster's metadata, which may list for a moment
        longer a Kafka topic deleted just now (a DeleteTopic of the same name; on a cluster,
        another broker than the one DeleteTopic waited for). Taken on, that topic would leave
        the Pub/Sub topic on a Kafka topic about to go."""
        for _ in range(TAKE_ON_TRIES):
            try:
                await self._create_kafka_topic(kafka, partitions, config, undo)
                return
            except AlreadyExists:
                pass  # it exists, for the controller and for the broker asked
            found = await self._admin.partitions(kafka)
            if found is None:
                continue  # gone again since
            try:
                await self._take_on(name, kafka, found, partitions, config)
                return
            except NotFound:
                continue  # gone since its look-up
        raise Unavailable(f"Kafka topic {kafka} came and went while {name} was created; try again")

    async def _create_kafka_topic(
        self, kafka: str, partitions: int, config: dict[str, str], undo: Rollback
    ) -> None:
        try:
            await self._admin.create_topic_retrying(kafka, partitions, config)
        except AlreadyExists:
            raise  # made meanwhile by another create of the same name: not ours to delete
        except BaseException:
            undo.add(f"Kafka topic {kafka}", lambda: self._admin.remove_topic(kafka))
            raise  # a create that timed out may finish yet
        undo.add(f"Kafka topic {kafka}", lambda: self._admin.remove_topic(kafka))

    async def _undo(self, undo: Rollback, res: StoredTopic, unknown: bool) -> None:
        """Undo a create that failed half way, unless its topic is stored after all (or by
        another create of the same name, using the same Kafka topic).

        When the write of the resource itself ended without an answer it may yet be stored:
        the Kafka topic is then kept, and a retried create takes it on (see _take_on)."""
        kafka = res.meta.kafka_topic
        stored = self._store.get("topic", res.name)
        if stored is not None and stored.meta.kafka_topic == kafka:
            return
        if unknown:
            log.warning(
                "CreateTopic %s: not known whether it was stored; its Kafka topic %s is "
                "kept for a retry to take on",
                res.name,
                kafka,
            )
            return
        task = asyncio.get_running_loop().create_task(undo.run())
        self._undoing.add(task)
        task.add_done_callback(self._undoing.discard)
        await asyncio.shield(task)  # cancelled or not, the undo runs to its end

    def quota(self, project: str) -> Quota:
        return Quota.per_project(
            "topics", project, self._settings.max_topics_per_project, "--max-topics-per-project"
        )

    def _check_adoptable(self, kafka: str, partitions: int) -> None:
        """Every subscription of a topic gets a lease/ack log of as many partitions."""
        most = self._settings.max_partitions_per_topic
        if partitions > most:
            raise FailedPrecondition(
                f"Kafka topic {kafka} has {partitions} partitions; this gateway adopts topics of "
                f"at most {most} (--max-partitions-per-topic), as every subscription gets a "
                "lease/ack log of as many partitions"
            )

    def _refuse_reserved(self, kafka: str, source: str) -> None:
        if names.reserved_kafka_topic(kafka, self._settings.internal_prefix):
            raise InvalidArgument(
                f"Invalid Kafka topic {kafka!r} (from {source}): names starting with '__' or "
                f"{self._settings.internal_prefix!r} belong to Kafka or to the gateway itself."
            )

    async def _take_on(
        self, name: str, kafka: str, found: int, partitions: int, config: dict[str, str]
    ) -> None:
        """A Kafka topic of the derived name exists without a Pub/Sub topic: left over from a
        create interrupted after the Kafka step, it has the partitions and configs we give; any
        other topic of that name is somebody else's and is not taken silently. NOT_FOUND if it
        is gone by the time its configs are read: the broker that described it had not yet
        learnt of its deletion (a DeleteTopic of the same name a moment ago)."""
        current = await self._admin.topic_config(kafka)
        if found != partitions or any(current.get(k) != v for k, v in config.items()):
            raise AlreadyExists(
                f"Topic {name} needs the Kafka topic {kafka}, which exists already with "
                f"{found} partitions (not made by this gateway); adopt it with the label "
                f"{ADOPT_LABEL}: {kafka}, or delete it from Kafka first"
            )

    def check_schema(self, topic: pubsub_pb2.Topic) -> tuple[int, int]:
        """A topic's schema_settings checked (core/topic_schemas.py); its revision bounds. Settings
        with every field empty are no schema."""
        if topic.schema_settings == pubsub_pb2.SchemaSettings():
            return 0, 0
        return self._schemas.check(topic.schema_settings)

    def _partitions(self, labels: Mapping[str, str]) -> int:
        raw = labels.get(PARTITIONS_LABEL)
        if raw is None:
            return self._settings.default_partitions
        most = self._settings.max_partitions_per_topic
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= most:
            raise InvalidArgument(
                f"Label {PARTITIONS_LABEL} must be a number 1..{most} "
                f"(--max-partitions-per-topic), got {limits.echo(raw)}"
            )
        return int(raw)

    def checked_update(self, topic: pubsub_pb2.Topic, mask: Sequence[str], res: StoredTopic) -> StoredTopic:
        """`res` with the masked fields of `topic` over it, once every check UpdateTopic makes
        has passed (nothing is written: `update` stores it)."""
        proto = pubsub_pb2.Topic()
        proto.CopyFrom(res.proto)
        fields = masks.apply(topic, proto, mask, UPDATABLE)
        unsupported.check_topic(proto, fields)
        if "labels" in fields:
            limits.check_labels(proto.labels, OWN_LABELS)
        for label in (ADOPT_LABEL, PARTITIONS_LABEL):
            if proto.labels.get(label) != res.proto.labels.get(label):
                raise InvalidArgument(f"The label {label} cannot change after the topic is created.")
        meta = res.meta
        if "schema_settings" in fields:
            first, last = self.check_schema(proto)
            meta = dataclasses.replace(meta, schema_first_seq=first, schema_last_seq=last)
        return dataclasses.replace(res, proto=proto, meta=meta)

    async def update(self, topic: pubsub_pb2.Topic, mask: Sequence[str]) -> pubsub_pb2.Topic:
        """The masked fields over the stored version, by compare-and-set: what changed meanwhile
        (an IAM policy, a schema's deletion marking the topic) is kept (ResourceStore.change)."""
        updated = functools.partial(self.checked_update, topic, mask)
        res = self.get(topic.name)
        checked = updated(res)  # refused before anything changes
        if "message_retention_duration" in masks.touched(mask):
            config: dict[str, str | None] = {**_retention(checked.proto)} or {"retention.ms": None}  # default
            await self._admin.set_topic_config(res.meta.kafka_topic, config)
        return (await self._store.change(res, updated)).proto

    def list_page(self, project: str, page_size: int, page_token: str) -> tuple[list[pubsub_pb2.Topic], str]:
        names.project_name(project)
        chunk, token = page(self._store.names("topic", project + "/topics/"), page_size, page_token)
        found = (self._store.get("topic", n) for n in chunk)
        return [r.proto for r in found if r is not None], token

    def subscriptions(self, name: str, page_size: int, page_token: str) -> tuple[list[str], str]:
        self.get(name)
        subs = sorted(r.name for r in self._store.all("subscription") if r.proto.topic == name)
        return page(subs, page_size, page_token)

    async def delete(self, name: str) -> None:
        res = self.get(name)
        for sub in list(self._store.all("subscription")):
            if sub.proto.topic == name:
                # Its Kafka topic goes too: a topic re-created under the name must never feed it.
                # One deleted meanwhile stays gone (the plain write used before brought it back).
                with contextlib.suppress(NotFound):
                    await self._store.change(sub, functools.partial(_topic_deleted, name))
        await self._store.delete("topic", name)
        if not res.meta.adopted:  # the name is reusable once this answers
            await self._admin.delete_topic(res.meta.kafka_topic, settle=DELETE_SETTLE_SECONDS)
        log.info("deleted topic %s", name)

    async def publish(self, name: str, messages: Sequence[limits.OutgoingMessage]) -> list[str]:
        size = limits.check_publish(messages)
        res = self.get(name)
        self._refuse_reserved(res.meta.kafka_topic, "a topic stored by an older gateway")
        if res.proto.schema_settings.schema:
            messages = await self._schemas.stamp(res, messages)
        out = [records.to_record(m.data, m.attributes, m.ordering_key, m.numeric) for m in messages]
        kafka = res.meta.kafka_topic
        batch_bytes = await self._fitted_batch(kafka, out) if res.meta.adopted else None
        # Records without an ordering key go to any of the partitions the topic had when it
        # was made or adopted (one per call), away from any whose broker is gone.
        try:
            done = await self._producer.send(kafka, out, spread=res.meta.partitions, batch_bytes=batch_bytes)
        except (InvalidArgument, FailedPrecondition):  # the broker refused: its configs changed?
            if res.meta.adopted:
                self._limits.forget(kafka)
            raise
        except UnknownTopic as unknown:
            gone = await kafka_topic_gone(self._admin, self._looks, name, kafka, res.meta.partitions)
            raise gone or unknown from unknown
        self.tallies.of(name).on_published(len(messages), size)
        return records.message_ids(done)

    async def _fitted_batch(self, kafka: str, out: Sequence[OutRecord]) -> int | None:
        """For an adopted Kafka topic: the batch size that fits its max.message.bytes, if the
        producer's own does not (None). A message that no batch of the topic could hold is
        refused before anything is written (when batches go uncompressed; compressed, only the
        broker knows their size), and so is one without an ordering key to a compacted topic."""
        config = await self._limits.of(kafka)
        if config.compacted:
            for i, (key, _, _) in enumerate(out):
                if key is None:
                    raise FailedPrecondition(
                        f"Message {i} has no ordering key, and Kafka topic {kafka} is compacted "
                        "(cleanup.policy=compact): it takes only records with a key. Give the "
                        "messages ordering keys, or adopt a topic that is not compacted"
                    )
        limit = config.max_message_bytes
        if limit is None:
            return None
        if not self._producer.compresses:
            roomy = limit - RECORD_OVERHEAD
            for i, record in enumerate(out):
                key, value, headers = record
                if headers is None and len(value or b"") + len(key or b"") <= roomy:
                    continue
                if (need := alone_bytes(record)) > limit:
                    raise InvalidArgument(
                        f"Message {i} takes {need} bytes as a Kafka record; Kafka topic {kafka} "
                        f"takes at most {limit} (its max.message.bytes)"
                    )
        return self._producer.fitted_batch(limit)


async def kafka_topic_gone(
    admin: Admin, looks: OnePerKey[str, int | None], topic: str, kafka: str, partitions: int
) -> GatewayError | None:
    """After a write the producer could not place or gave up on, why, if for good: `topic`'s
    Kafka topic is gone (deleted outside the gateway: NOT_FOUND, as Publish to a topic that does
    not exist), or has fewer than the `partitions` it was made or adopted with
    (FAILED_PRECONDITION). None while it is there as it was, or the cluster cannot tell within
    GONE_LOOK_SECONDS: the write's own UNAVAILABLE stands, and the client retries. Calls that
    look at the same Kafka topic meanwhile share one look (`looks`)."""
    look = functools.partial(admin.partitions, kafka, wait=GONE_WAIT_SECONDS)
    try:
        found = await within(looks.run(kafka, look), GONE_LOOK_SECONDS)
    except (GatewayError, TimeoutError):
        return None
    if found is None:
        return NotFound(
            f"Kafka topic {kafka}, which holds the messages of {topic}, does not exist: "
            "deleted outside the gateway? Make it again, or delete the topic and create it anew"
        )
    if found < partitions:
        return FailedPrecondition(
            f"Kafka topic {kafka}, which holds the messages of {topic}, has only {found} of the "
            f"{partitions} partitions it had when the topic was made or adopted: made again "
            "outside the gateway? Give it its partitions back, or delete the topic and create it anew"
        )
    return None


def _topic_deleted(topic: str, sub: StoredSubscription) -> StoredSubscription | None:
    """A subscription of the deleted `topic`: it names `_deleted-topic_` and delivers no more
    (None when it names another topic by now: one deleted and made again under its name)."""
    if sub.proto.topic != topic:
        return None
    proto = pubsub_pb2.Subscription()
    proto.CopyFrom(sub.proto)
    proto.topic = names.DELETED_TOPIC
    return dataclasses.replace(sub, proto=proto, meta=dataclasses.replace(sub.meta, topic_deleted=True))


def _retention(topic: pubsub_pb2.Topic) -> dict[str, str]:
    """Kafka's retention.ms for a topic's message_retention_duration (10 minutes to 31 days)."""
    if not topic.HasField("message_retention_duration"):
        return {}
    d = topic.message_retention_duration
    seconds = d.seconds + d.nanos / 1e9
    if not limits.MIN_RETENTION <= seconds <= limits.MAX_RETENTION:
        raise InvalidArgument(
            "Invalid message_retention_duration: it must be between 10 minutes and 31 days."
        )
    return {"retention.ms": str(to_ms(d))}
