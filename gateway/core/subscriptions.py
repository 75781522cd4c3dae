"""Subscriptions: administration.

A subscription is a consumer group on its topic's Kafka topic plus a compacted lease/ack log
topic with one partition per source partition. Creating one fixes the subscription point: the
log gets a checkpoint at each partition's current end and the group commits those offsets, so
everything published after CreateSubscription returns is delivered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import uuid
from collections.abc import Coroutine, Sequence

from google.protobuf import duration_pb2

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.clock import now_ms
from gateway.core import masks
from gateway.core.lease_log import Position, write_epoch
from gateway.core.paging import page
from gateway.core.resources import Quota, Resource, ResourceStore, Rollback, StoredSubscription, StoredTopic
from gateway.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from gateway.kafka.admin import Admin, TopicSpec
from gateway.kafka.producer import Producer
from gateway.settings import Settings
from gateway.translate import endpoints, filters, limits, names, unsupported
from gateway.translate.meta import SubscriptionMeta

log = logging.getLogger(__name__)
DAY = 24 * 3600
UPDATABLE = {
    "ack_deadline_seconds",
    "push_config",
    "message_retention_duration",
    "retain_acked_messages",
    "labels",
    "expiration_policy",
    "dead_letter_policy",
    "retry_policy",
    "enable_exactly_once_delivery",
    "bigquery_config",
    "cloud_storage_config",
    "bigtable_config",
    "message_transforms",
}


def log_topic_spec(meta: SubscriptionMeta) -> TopicSpec:
    """A subscription's lease/ack log: one partition per partition of its Kafka topic;
    compacted (latest checkpoint per partition, commands until folded); room for a lease of
    the largest pull."""
    return TopicSpec(
        meta.log_topic,
        meta.partitions,
        required={"cleanup.policy": "compact", "max.message.bytes": str(16 * 1024 * 1024)},
        config={"min.cleanable.dirty.ratio": "0.1", "segment.ms": "600000"},
    )


def _seconds(d: duration_pb2.Duration) -> float:
    return d.seconds + d.nanos / 1e9


def validate(
    sub: pubsub_pb2.Subscription,
    min_ttl_seconds: int = DAY,
    *,
    destinations: endpoints.Policy,
    filter_max_bytes: int | None = filters.MAX_FILTER_BYTES,
) -> None:
    """Field checks shared by create and update (all before any write). `filter_max_bytes` is
    None for a filter the gateway wrote (an early-API query's translation, docs/legacy-api.md),
    which may be longer than v1's 256 bytes."""
    sub.ack_deadline_seconds = limits.ack_deadline(sub.ack_deadline_seconds)
    if sub.HasField("message_retention_duration"):
        s = _seconds(sub.message_retention_duration)
        if not limits.MIN_RETENTION <= s <= limits.MAX_RETENTION:
            raise InvalidArgument(
                "Invalid message_retention_duration: it must be between 10 minutes and 31 days."
            )
    else:
        sub.message_retention_duration.seconds = limits.DEFAULT_RETENTION
    if sub.HasField("dead_letter_policy"):
        dlp = sub.dead_letter_policy
        if dlp.max_delivery_attempts == 0:
            dlp.max_delivery_attempts = 5
        if not 5 <= dlp.max_delivery_attempts <= 100:
            raise InvalidArgument(
                "Invalid dead_letter_policy.max_delivery_attempts: it must be between 5 and 100."
            )
        if dlp.dead_letter_topic:
            names.topic(dlp.dead_letter_topic)
    if sub.HasField("retry_policy"):
        rp = sub.retry_policy
        lo = _seconds(rp.minimum_backoff) if rp.HasField("minimum_backoff") else 10
        hi = _seconds(rp.maximum_backoff) if rp.HasField("maximum_backoff") else 600
        if not (0 <= lo <= 600 and 0 <= hi <= 600 and lo <= hi):
            raise InvalidArgument("Invalid retry_policy: backoffs must be 0..600 s, minimum <= maximum.")
    policy = sub.expiration_policy
    has_ttl = sub.HasField("expiration_policy") and policy.HasField("ttl")
    if has_ttl and _seconds(policy.ttl) < min_ttl_seconds:
        raise InvalidArgument(f"Invalid expiration_policy.ttl: the minimum is {min_ttl_seconds} s (1 day).")
    filters.parse(sub.filter, max_bytes=filter_max_bytes)  # INVALID_ARGUMENT naming the position
    if sub.push_config.push_endpoint:
        check_endpoint(sub.push_config.push_endpoint, destinations)


def fill_push_version(push: pubsub_pb2.PushConfig, before: pubsub_pb2.PushConfig | None = None) -> None:
    """A push subscription always names its push format in `attributes["x-goog-version"]`, as
    Pub/Sub returns it: not given on create, the API's version (v1); not given on a change,
    the one it had."""
    if push.push_endpoint and unsupported.PUSH_VERSION_KEY not in push.attributes:
        had = before.attributes.get(unsupported.PUSH_VERSION_KEY, "") if before is not None else ""
        push.attributes[unsupported.PUSH_VERSION_KEY] = had or "v1"


def check_push_only(push: pubsub_pb2.PushConfig) -> None:
    """INVALID_ARGUMENT, as Pub/Sub answers, for settings of how to push (a token, the raw body)
    on a pull subscription, where nothing would ever use them. Checked where a push config is
    given (create, an update naming it, ModifyPushConfig), so that subscriptions stored earlier
    stay updatable."""
    if push.push_endpoint:
        return
    for field in ("oidc_token", "no_wrapper"):
        if push.HasField(field):
            raise InvalidArgument(
                f"Invalid push_config.{field}: it applies to push subscriptions only, and "
                "push_config.push_endpoint is empty."
            )


def check_endpoint(url: str, destinations: endpoints.Policy) -> None:
    """INVALID_ARGUMENT, showing the URL masked, unless `url` is an endpoint pushes may go to
    (names are judged when pushing: docs/push.md, "Destinations")."""
    problem = endpoints.problem(url, destinations)
    if problem is not None:
        raise InvalidArgument(f"Invalid push_config.push_endpoint {endpoints.mask(url)!r}: {problem}.")


def detached(res: StoredSubscription) -> StoredSubscription:
    """The subscription detached (DetachSubscription): it delivers no more."""
    proto = pubsub_pb2.Subscription()
    proto.CopyFrom(res.proto)
    proto.detached = True
    return dataclasses.replace(res, proto=proto, meta=dataclasses.replace(res.meta, detached=True))


def _filter_limit(legacy_query: str) -> int | None:
    """The filter's size limit: v1's, unless the filter is an early-API query's translation,
    whose size the query's own limit bounds (gateway/legacy/query.py)."""
    return None if legacy_query else filters.MAX_FILTER_BYTES


class SubscriptionService:
    def __init__(self, settings: Settings, store: ResourceStore, admin: Admin, producer: Producer) -> None:
        self._settings = settings
        self._store = store
        self._admin = admin
        self._producer = producer
        self._cleanups: set[asyncio.Task[None]] = set()

    def get(self, name: str) -> StoredSubscription:
        names.subscription(name)
        return self._store.require("subscription", name)

    async def create(
        self,
        request: pubsub_pb2.Subscription,
        *,
        legacy_query: str = "",
        legacy_push_endpoint: str = "",
        legacy_truncate_max_bytes: int = 0,
        legacy_truncate_max_age_seconds: int = 0,
    ) -> pubsub_pb2.Subscription:
        """Create the subscription `request` describes. The early API (gateway/legacy) passes
        the settings v1 has no field for (its query, push endpoint and truncation policy),
        stored in the same record as the rest."""
        sub = self.prepare(request, legacy_query=legacy_query)
        name = names.subscription(sub.name)
        if self._store.get("subscription", name) is not None:
            raise AlreadyExists(f"Subscription already exists: {name}")
        quota = self.quota(name.split("/")[1])
        self._store.check_quota("subscription", quota)
        topic = self._store.get("topic", sub.topic)
        if topic is None:
            raise NotFound(f"Topic not found (resource={sub.topic})")
        dead_letter = sub.dead_letter_policy.dead_letter_topic
        if dead_letter and self._store.get("topic", dead_letter) is None:
            raise NotFound(f"Dead letter topic not found (resource={dead_letter})")
        self.check_source(sub, topic)
        sub.state = pubsub_pb2.Subscription.State.ACTIVE
        if topic.proto.HasField("message_retention_duration"):
            sub.topic_message_retention_duration.CopyFrom(topic.proto.message_retention_duration)
        uid = uuid.uuid4().hex[:8]
        kafka_topic, partitions = topic.meta.kafka_topic, topic.meta.partitions
        meta = SubscriptionMeta(
            uid=uid,
            kafka_topic=kafka_topic,
            partitions=partitions,
            log_topic=names.internal_topic(self._settings.internal_prefix, "acks", name, uid),
            group_id=f"{self._settings.internal_prefix}.{name}.{uid}",
            created_ms=now_ms(),
            detached=sub.detached,  # created detached: never delivers, as DetachSubscription makes it
            legacy_query=legacy_query,
            legacy_push_endpoint=legacy_push_endpoint,
            legacy_truncate_max_bytes=legacy_truncate_max_bytes,
            legacy_truncate_max_age_seconds=legacy_truncate_max_age_seconds,
        )
        res = Resource(name, sub, meta, op=uuid.uuid4().hex)
        self._store.check_size(res)
        storing = False
        try:
            # The lease log and the group are this create's own (named by its uid): undone
            # whatever happened to them, a create that timed out may finish yet.
            await self._admin.ensure_topic(log_topic_spec(meta))
            ends = await self._admin.end_offsets(kafka_topic, partitions)
            await write_epoch(
                self._producer, meta.log_topic, {p: Position(end) for p, end in ends.items()}, 0
            )
            await self._admin.commit_group_offsets(meta.group_id, kafka_topic, ends)
            storing = True
            stored = await self._store.create(res, quota)
        except BaseException as exc:
            unknown = storing and isinstance(exc, (Unavailable, asyncio.CancelledError))
            undoing = self._undo(res, unknown)
            if not unknown:  # answered once undone (cancelled or not, the undo runs to its end)
                await asyncio.shield(undoing)
            raise
        log.info("created subscription %s on %s", name, sub.topic)
        return stored.proto

    def prepare(self, request: pubsub_pb2.Subscription, *, legacy_query: str = "") -> pubsub_pb2.Subscription:
        """The subscription CreateSubscription would store of `request` (its defaults filled in),
        once every check of the request itself has passed. What depends on the other resources
        stored (the name free, the quota, the topics named: `check_source`) is left to `create`,
        and to the bootstrap file's check (gateway/bootstrap), which knows what the file makes."""
        names.subscription(request.name)
        names.topic(request.topic)
        unsupported.check_subscription(request)
        check_push_only(request.push_config)
        sub = pubsub_pb2.Subscription()
        sub.CopyFrom(request)
        unsupported.scrub_subscription(sub)
        fill_push_version(sub.push_config)
        validate(
            sub,
            self._settings.min_expiration_ttl_seconds,
            destinations=self._settings.push_destinations,
            filter_max_bytes=_filter_limit(legacy_query),
        )
        limits.check_labels(sub.labels)
        if not sub.HasField("expiration_policy"):
            sub.expiration_policy.ttl.seconds = 31 * DAY
        return sub

    def check_source(self, sub: pubsub_pb2.Subscription, topic: StoredTopic) -> None:
        """Refuse a subscription that `topic`, as stored, cannot feed."""
        kafka_topic, partitions = topic.meta.kafka_topic, topic.meta.partitions
        if names.reserved_kafka_topic(kafka_topic, self._settings.internal_prefix):
            # Only a topic stored by an older gateway, which let the label name any topic.
            raise FailedPrecondition(
                f"The topic {sub.topic} reads the Kafka topic {kafka_topic}, which belongs to "
                "Kafka or to the gateway: no subscription may read it."
            )
        most = self._settings.max_partitions_per_topic
        if partitions > most:  # stored before the limit was lowered
            raise FailedPrecondition(
                f"The topic {sub.topic} has {partitions} partitions, and a subscription's lease/ack "
                f"log would get as many; this gateway allows at most {most} "
                "(--max-partitions-per-topic)."
            )

    def quota(self, project: str) -> Quota:
        return Quota.per_project(
            "subscriptions",
            project,
            self._settings.max_subscriptions_per_project,
            "--max-subscriptions-per-project",
        )

    def _undo(self, res: StoredSubscription, unknown: bool) -> asyncio.Task[None]:
        """Remove the lease log and the group of a create that failed half way (both are its
        own, named by its uid; removed even when their own creation failed, as a create that
        timed out may finish yet). When the write of the resource ended without an answer,
        only once it is known not to be stored."""

        async def run() -> None:
            if unknown and await self._store.outcome("subscription", res.name, res.op) is not False:
                log.warning(
                    "CreateSubscription %s: its lease/ack log %s and consumer group %s are "
                    "kept: the subscription is stored, or that could not be told",
                    res.name,
                    res.meta.log_topic,
                    res.meta.group_id,
                )
                return
            undo = Rollback(f"CreateSubscription {res.name}")
            undo.add(f"consumer group {res.meta.group_id}", lambda: self._remove_group(res))
            undo.add(
                f"lease/ack log {res.meta.log_topic}",
                lambda: self._admin.remove_topic(res.meta.log_topic),
            )
            await undo.run()

        return self._spawn(run())

    async def update(self, request: pubsub_pb2.Subscription, mask: Sequence[str]) -> pubsub_pb2.Subscription:
        """The masked fields over the stored version, by compare-and-set: a concurrent Seek's
        epoch or a truncation count written meanwhile is kept (ResourceStore.change)."""
        updated = functools.partial(self.checked_update, request, mask)
        return (await self._store.change(self.get(request.name), updated)).proto

    def checked_update(
        self, request: pubsub_pb2.Subscription, mask: Sequence[str], res: StoredSubscription
    ) -> StoredSubscription:
        """`res` with the masked fields of `request` over it, once every check
        UpdateSubscription makes has passed (nothing is written: `update` stores it)."""
        proto = pubsub_pb2.Subscription()
        proto.CopyFrom(res.proto)
        fields = masks.apply(request, proto, mask, UPDATABLE)
        unsupported.check_subscription(proto, fields)
        if "push_config" in fields:
            check_push_only(proto.push_config)
            fill_push_version(proto.push_config, res.proto.push_config)
        self._validate(proto, res)
        if "labels" in fields:
            limits.check_labels(proto.labels)
        return dataclasses.replace(res, proto=proto)

    def list_page(
        self, project: str, page_size: int, page_token: str
    ) -> tuple[list[pubsub_pb2.Subscription], str]:
        names.project_name(project)
        chunk, token = page(
            self._store.names("subscription", project + "/subscriptions/"), page_size, page_token
        )
        found = (self._store.get("subscription", n) for n in chunk)
        return [r.proto for r in found if r is not None], token

    async def delete(self, name: str) -> None:
        res = self.get(name)
        await self._store.delete("subscription", name)
        self._cleanup(res)
        log.info("deleted subscription %s", name)

    async def detach(self, name: str) -> None:
        await self._store.change(self.get(name), detached)

    def _cleanup(self, res: StoredSubscription) -> None:
        """Drop the log topic and the consumer group once every process has let go."""

        async def run() -> None:
            await self._admin.delete_topic(res.meta.log_topic)
            await self._remove_group(res)
            # Offsets only, never members: gone at once (a failure leaves Kafka to expire them).
            await self._admin.delete_group(res.meta.applied_group)

        self._spawn(run())

    async def _remove_group(self, res: StoredSubscription) -> None:
        """Delete the subscription's consumer group once it is empty.

        Every process drops its runner of a deleted subscription as soon as it reads the
        deletion (within about a second), writing nothing more; a member that died instead
        leaves the group within one session timeout."""
        wait, waited = 0.5, 0.0
        limit = 3 * self._settings.session_timeout_ms / 1000
        while not await self._admin.delete_group(res.meta.group_id):
            if waited >= limit:
                log.warning(
                    "consumer group %s of deleted subscription %s still has members "
                    "after %.0f s; it is left for Kafka to expire",
                    res.meta.group_id,
                    res.name,
                    waited,
                )
                return
            await asyncio.sleep(wait)
            waited, wait = waited + wait, min(wait * 2, 5.0)

    def _spawn(self, work: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        return task

    async def stop(self) -> None:
        for task in list(self._cleanups):
            task.cancel()

    def _validate(self, proto: pubsub_pb2.Subscription, res: StoredSubscription) -> None:
        """`validate` of a changed version of `res`, with this gateway's settings."""
        validate(
            proto,
            self._settings.min_expiration_ttl_seconds,
            destinations=self._settings.push_destinations,
            filter_max_bytes=_filter_limit(res.meta.legacy_query),
        )

    async def modify_push_config(self, name: str, push_config: pubsub_pb2.PushConfig) -> None:
        res = self.get(name)
        unsupported.check_push_config(push_config)
        check_push_only(push_config)

        def configured(res: StoredSubscription) -> StoredSubscription:
            proto = pubsub_pb2.Subscription()
            proto.CopyFrom(res.proto)
            proto.push_config.CopyFrom(push_config)
            fill_push_version(proto.push_config, res.proto.push_config)
            self._validate(proto, res)
            return dataclasses.replace(res, proto=proto)

        await self._store.change(res, configured)
