"""Topics: administration and Publish.

A topic's Kafka topic is derived from its name (see translate.names), or, with the label
`kafka-topic`, an existing Kafka topic is adopted as it is. The label `kafka-partitions` sets the
partition count of a new Kafka topic.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.core import masks
from gateway.core.paging import page
from gateway.core.resources import Resource, ResourceStore
from gateway.errors import AlreadyExists, InvalidArgument, NotFound
from gateway.kafka.admin import Admin
from gateway.kafka.producer import Producer
from gateway.settings import Settings
from gateway.translate import limits, names, records

log = logging.getLogger(__name__)
ADOPT_LABEL = "kafka-topic"
PARTITIONS_LABEL = "kafka-partitions"
MAX_MESSAGE_BYTES = 11 * 1024 * 1024  # Pub/Sub allows 10 MB messages; Kafka's default is 1 MB
UPDATABLE = {"labels", "message_storage_policy", "kms_key_name", "schema_settings",
             "message_retention_duration", "ingestion_data_source_settings",
             "message_transforms"}


class TopicService:
    def __init__(self, settings: Settings, store: ResourceStore, admin: Admin, producer: Producer) -> None:
        self._settings = settings
        self._store = store
        self._admin = admin
        self._producer = producer

    def get(self, name: str) -> Resource:
        names.topic(name)
        res = self._store.get("topic", name)
        if res is None:
            raise NotFound(f"Topic not found (resource={name})")
        return res

    async def create(self, topic: Any) -> Any:
        name = names.topic(topic.name)
        if self._store.get("topic", name) is not None:
            raise AlreadyExists(f"Topic already exists: {name}")
        partitions = self._partitions(topic.labels)
        adopted = ADOPT_LABEL in topic.labels
        if adopted:
            kafka = names.check_kafka_topic(topic.labels[ADOPT_LABEL])
            self._refuse_reserved(kafka, f"the label {ADOPT_LABEL}")
            found = await self._admin.partitions(kafka)
            if found is None:
                raise NotFound(f"Kafka topic {kafka} to adopt for {name} does not exist")
            partitions = found
        else:
            kafka = names.kafka_topic_for(name)
            self._refuse_reserved(kafka, "the topic's name")
            config = {"max.message.bytes": str(MAX_MESSAGE_BYTES), **_retention(topic)}
            existing = await self._admin.partitions(kafka)
            if existing is None:
                await self._admin.create_topic_retrying(kafka, partitions, config)
            else:
                await self._take_on(name, kafka, existing, partitions, config)
        proto = pubsub_pb2.Topic()
        proto.CopyFrom(topic)
        proto.state = pubsub_pb2.Topic.State.ACTIVE
        if adopted and topic.HasField("message_retention_duration"):
            await self._admin.set_topic_config(kafka, _retention(topic))
        res = Resource("topic", name, proto, {
            "kafka_topic": kafka, "partitions": partitions, "adopted": adopted,
        })
        stored = await self._store.create(res)
        log.info("created topic %s on Kafka topic %s (%d partitions)", name, kafka, partitions)
        return stored.proto

    def _refuse_reserved(self, kafka: str, source: str) -> None:
        if names.reserved_kafka_topic(kafka, self._settings.internal_prefix):
            raise InvalidArgument(
                f"Invalid Kafka topic {kafka!r} (from {source}): names starting with '__' or "
                f"{self._settings.internal_prefix!r} belong to Kafka or to the gateway itself."
            )

    async def _take_on(self, name: str, kafka: str, found: int, partitions: int,
                       config: dict[str, str]) -> None:
        """A Kafka topic of the derived name exists without a Pub/Sub topic: left over from a
        create interrupted after the Kafka step, it has the partitions and configs we give; any
        other topic of that name is somebody else's and is not taken silently."""
        current = await self._admin.topic_config(kafka)
        if found != partitions or any(current.get(k) != v for k, v in config.items()):
            raise AlreadyExists(
                f"Topic {name} needs the Kafka topic {kafka}, which exists already with "
                f"{found} partitions (not made by this gateway); adopt it with the label "
                f"{ADOPT_LABEL}: {kafka}, or delete it from Kafka first")

    def _partitions(self, labels: Any) -> int:
        raw = labels.get(PARTITIONS_LABEL)
        if raw is None:
            return self._settings.default_partitions
        if not raw.isdigit() or not 1 <= int(raw) <= 10_000:
            raise InvalidArgument(f"Label {PARTITIONS_LABEL} must be a number 1..10000, got {raw!r}")
        return int(raw)

    async def update(self, topic: Any, mask: Sequence[str]) -> Any:
        res = self.get(topic.name)
        proto = pubsub_pb2.Topic()
        proto.CopyFrom(res.proto)
        masks.apply(topic, proto, mask, UPDATABLE)
        if "message_retention_duration" in mask:
            config: dict[str, str | None] = {**_retention(proto)} or {"retention.ms": None}  # default
            await self._admin.set_topic_config(res.meta["kafka_topic"], config)
        for label in (ADOPT_LABEL, PARTITIONS_LABEL):
            if proto.labels.get(label) != res.proto.labels.get(label):
                raise InvalidArgument(f"The label {label} cannot change after the topic is created.")
        stored = await self._store.update(Resource("topic", res.name, proto, res.meta))
        return stored.proto

    def list_page(self, project: str, page_size: int, page_token: str) -> tuple[list[Any], str]:
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
                proto = pubsub_pb2.Subscription()
                proto.CopyFrom(sub.proto)
                proto.topic = names.DELETED_TOPIC
                # Its Kafka topic goes too: a topic re-created under the name must never feed it.
                meta = {**sub.meta, "topic_deleted": True}
                await self._store.update(Resource("subscription", sub.name, proto, meta))
        await self._store.delete("topic", name)
        if not res.meta.get("adopted"):
            await self._admin.delete_topic(res.meta["kafka_topic"])
        log.info("deleted topic %s", name)

    async def publish(self, name: str, messages: Sequence[limits.OutgoingMessage]) -> list[str]:
        limits.check_publish(messages)
        res = self.get(name)
        self._refuse_reserved(res.meta["kafka_topic"], "a topic stored by an older gateway")
        out = [records.to_record(m.data, m.attributes, m.ordering_key) for m in messages]
        # Records without an ordering key go to any of the partitions the topic had when it
        # was made or adopted (one per call), away from any whose broker is gone.
        done = await self._producer.send(res.meta["kafka_topic"], out,
                                         spread=int(res.meta.get("partitions") or 0))
        return [records.message_id(p, o) for p, o in done]


MIN_RETENTION_S, MAX_RETENTION_S = 600, 31 * 24 * 3600


def _retention(topic: Any) -> dict[str, str]:
    """Kafka's retention.ms for a topic's message_retention_duration (10 minutes to 31 days)."""
    if not topic.HasField("message_retention_duration"):
        return {}
    d = topic.message_retention_duration
    seconds = d.seconds + d.nanos / 1e9
    if not MIN_RETENTION_S <= seconds <= MAX_RETENTION_S:
        raise InvalidArgument(
            "Invalid message_retention_duration: it must be between 10 minutes and 31 days."
        )
    return {"retention.ms": str(int(seconds * 1000))}
