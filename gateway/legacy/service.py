"""The semantics of the early API (tech.pubsub) on the core services that serve v1.

Every call goes to the same TopicService, SubscriptionService and DeliveryService as v1's, so
topics, subscriptions, leases and acks are shared. What the early API has and v1 lacks lives
here: the label query over listed resources, DeleteTopic deleting its subscriptions,
subscription names assigned when none is given, the settings stored in the subscription's
record (its query as given, its gRPC push endpoint, its truncation policy), and truncation
events delivered before messages (the core's TruncationService: docs/truncation.md).
docs/legacy-api.md.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as v1
from gateway._pb.tech.pubsub import pubsub_pb2 as lpb
from gateway.clock import to_ms
from gateway.core.delivery import DeliveryService
from gateway.core.paging import page
from gateway.core.resources import ResourceStore, StoredSubscription, StoredTopic
from gateway.core.runner import Delivery
from gateway.core.subscriptions import SubscriptionService
from gateway.core.topics import TopicService
from gateway.core.truncation import TruncationService, split_ack_ids
from gateway.errors import AckIdsFailed, InvalidArgument, NotFound, Unavailable
from gateway.legacy import labels, query
from gateway.legacy.names import LegacyNames, assigned_subscription, push_endpoint
from gateway.settings import Settings
from gateway.translate.limits import OutgoingMessage

log = logging.getLogger(__name__)
# Synthetic labels a ListTopics / ListSubscriptions query may name besides the resource's own
# v1 labels (whose keys never hold a '.'): the names as the early API shows them.
NAME_LABEL = "pubsub.name"
TOPIC_LABEL = "pubsub.topic"
DEFAULT_MAX_EVENTS = 100
MAX_EVENTS = 1000
MAX_DURATION_SECONDS = 315_576_000_000  # google.protobuf.Duration's range (10,000 years)


class LegacyService:
    def __init__(
        self,
        settings: Settings,
        store: ResourceStore,
        topics: TopicService,
        subscriptions: SubscriptionService,
        delivery: DeliveryService,
        truncation: TruncationService,
    ) -> None:
        self._settings = settings
        self._store = store
        self._topics = topics
        self._subs = subscriptions
        self._delivery = delivery
        self._truncation = truncation
        self.names = LegacyNames(settings.legacy_project)

    # -- topics ----------------------------------------------------------------------------

    async def create_topic(self, name: str) -> None:
        await self._topics.create(v1.Topic(name=name))

    def get_topic(self, name: str) -> StoredTopic:
        return self._topics.get(name)

    def list_topics(self, text: str, max_results: int, page_token: str) -> tuple[list[str], str]:
        """One page of the legacy project's topics whose labels match the query `text`."""
        found = self._store.names("topic", self.names.parent + "/topics/")
        if text:
            q = query.parse(text)
            found = [
                n for n in found if (r := self._store.get("topic", n)) and q.matches(self.topic_labels(r))
            ]
        return page(found, max(0, max_results), page_token)  # 0: 100; at most 1000

    def topic_labels(self, res: StoredTopic) -> dict[str, str]:
        return {**res.proto.labels, NAME_LABEL: self.names.show(res.name)}

    async def delete_topic(self, name: str) -> None:
        """Delete the topic and, as the early API says, every subscription attached to it (v1
        would keep them, detached from `_deleted-topic_`)."""
        self._topics.get(name)
        for sub in [s.name for s in self._store.all("subscription") if s.proto.topic == name]:
            try:
                await self._subs.delete(sub)
            except NotFound:
                pass  # deleted meanwhile
        await self._topics.delete(name)

    async def publish(self, topic: str, messages: Sequence[lpb.PubsubMessage], field: str) -> list[str]:
        out = []
        for i, m in enumerate(messages):
            where = f"{field}[{i}]" if field == "messages" else field
            if m.HasField("message_id"):
                raise InvalidArgument(
                    f"message_id is assigned by the server; do not set it ({where}.message_id)."
                )
            attributes, numeric = labels.to_attributes(m.label, f"{where}.label")
            out.append(OutgoingMessage(m.data, attributes, "", numeric))
        return await self._topics.publish(topic, out)

    # -- subscriptions ----------------------------------------------------------------------

    def subscription_name(self, request: lpb.Subscription) -> str:
        """The v1 name of the subscription a CreateSubscription makes: assigned, in its topic's
        project, when the request has none."""
        if request.name:
            return self.names.subscription(request.name)
        return assigned_subscription(self.names.topic(request.topic))

    async def create_subscription(self, name: str, request: lpb.Subscription) -> StoredSubscription:
        max_bytes, max_age = truncation_policy(request)
        topic = self.names.topic(request.topic)
        sub = v1.Subscription(name=name, topic=topic, ack_deadline_seconds=request.ack_deadline_seconds)
        if request.query:
            sub.filter = query.parse(request.query).to_filter()
        endpoint = ""
        if request.push_config.push_endpoint:
            endpoint = push_endpoint(request.push_config.push_endpoint, self._settings.push_destinations)
        if request.HasField("garbage_collect_seconds"):
            n = request.garbage_collect_seconds
            if n <= 0:
                raise InvalidArgument(f"Invalid garbage_collect_seconds: {n}; it must be positive.")
            # The system may delete it after *at least* n seconds: never sooner than the
            # gateway's smallest expiration TTL (--min-expiration-ttl-seconds).
            sub.expiration_policy.ttl.seconds = min(
                max(n, self._settings.min_expiration_ttl_seconds), MAX_DURATION_SECONDS
            )
        else:
            sub.expiration_policy.SetInParent()  # kept until deleted
        await self._subs.create(
            sub,
            legacy_query=request.query,
            legacy_push_endpoint=endpoint,
            legacy_truncate_max_bytes=max_bytes,
            legacy_truncate_max_age_seconds=max_age,
        )
        return self._subs.get(name)

    def get_subscription(self, name: str) -> StoredSubscription:
        res = self._subs.get(name)
        self._delivery.record_activity(name)  # presence, for garbage_collect_seconds
        return res

    def view(self, res: StoredSubscription, given: str = "", given_topic: str = "") -> lpb.Subscription:
        """A stored subscription as the early API shows it."""
        out = lpb.Subscription(
            name=self.names.show(res.name, given),
            topic=self.names.show(res.proto.topic, given_topic),
            ack_deadline_seconds=res.proto.ack_deadline_seconds,
        )
        if res.meta.legacy_query:
            out.query = res.meta.legacy_query
        if res.meta.legacy_push_endpoint:
            out.push_config.push_endpoint = res.meta.legacy_push_endpoint
        if res.meta.legacy_truncate_max_bytes:
            out.truncation_policy.max_bytes = res.meta.legacy_truncate_max_bytes
        elif res.meta.legacy_truncate_max_age_seconds:
            out.truncation_policy.max_age_seconds = res.meta.legacy_truncate_max_age_seconds
        policy = res.proto.expiration_policy
        if res.proto.HasField("expiration_policy") and policy.HasField("ttl"):
            out.garbage_collect_seconds = to_ms(policy.ttl) // 1000
        return out

    def list_subscriptions(
        self, text: str, max_results: int, page_token: str
    ) -> tuple[list[StoredSubscription], str]:
        found = self._store.names("subscription", self.names.parent + "/subscriptions/")
        if text:
            q = query.parse(text)
            found = [
                n
                for n in found
                if (r := self._store.get("subscription", n)) and q.matches(self.subscription_labels(r))
            ]
        chunk, token = page(found, max(0, max_results), page_token)  # 0: 100; at most 1000
        return [r for n in chunk if (r := self._store.get("subscription", n)) is not None], token

    def subscription_labels(self, res: StoredSubscription) -> Mapping[str, str]:
        return {
            **res.proto.labels,
            NAME_LABEL: self.names.show(res.name),
            TOPIC_LABEL: self.names.show(res.proto.topic),
        }

    async def delete_subscription(self, name: str) -> None:
        await self._subs.delete(name)

    async def modify_push_config(self, name: str, config: lpb.PushConfig) -> None:
        """Set the gRPC push endpoint; an empty config pauses pushing (messages accumulate)."""
        res = self._subs.get(name)
        endpoint = ""
        if config.push_endpoint:
            endpoint = push_endpoint(config.push_endpoint, self._settings.push_destinations)
        await self._store.change_subscription(
            res.name, lambda meta: dataclasses.replace(meta, legacy_push_endpoint=endpoint)
        )

    # -- truncation (docs/truncation.md) -----------------------------------------------------

    async def truncate(self, name: str) -> None:
        """Drop the pending backlog; the subscriber gets one truncation event before what is
        published afterwards."""
        self._delivery.record_activity(name)  # presence, for garbage_collect_seconds
        await self._truncation.truncate(name)

    async def take_event(self, name: str) -> str | None:
        """The ack id of the pending truncation event, leased to this caller for the
        subscription's ack deadline; None when there is none to deliver now."""
        res = self._subs.get(name)
        return await self._truncation.take_event(name, res.proto.ack_deadline_seconds)

    # -- delivery ---------------------------------------------------------------------------

    async def pull(self, name: str, max_events: int, wait_seconds: float) -> list[Delivery]:
        if max_events <= 0:
            max_events = DEFAULT_MAX_EVENTS
        return await self._delivery.pull(name, min(max_events, MAX_EVENTS), wait_seconds)

    async def acknowledge(self, name: str, ack_ids: Sequence[str]) -> None:
        """Acks of ids that are not (or no longer) leased succeed, as the early API says, also on
        a subscription with exactly-once delivery (made through v1). Truncation events' ids go
        to the TruncationService (a stale one succeeds), the others to v1's Acknowledge."""
        await self._settle(name, ack_ids, None)

    async def modify_ack_deadline(self, name: str, ack_ids: Sequence[str], seconds: int) -> None:
        """ModifyAckDeadline, and Nack (0), of messages' and truncation events' ids."""
        await self._settle(name, ack_ids, seconds)

    async def _settle(self, name: str, ack_ids: Sequence[str], seconds: int | None) -> None:
        events, messages = split_ack_ids(ack_ids)
        if events:  # every event id is checked before any is settled
            self._delivery.record_activity(name)
            await self._truncation.settle(name, events, seconds)
        if not messages:
            return
        try:
            if seconds is None:
                await self._delivery.acknowledge(name, messages)
            else:
                await self._delivery.modify_ack_deadline(name, messages, seconds)
        except AckIdsFailed as err:
            if any(reason.startswith("TRANSIENT_") for reason in err.failures.values()):
                raise Unavailable(err.message) from err


def truncation_policy(request: lpb.Subscription) -> tuple[int, int]:
    """(max_bytes, max_age_seconds) of the request's TruncationPolicy, 0 when not set (stored as
    `legacy_truncate_max_bytes` / `legacy_truncate_max_age_seconds`). A value <= 0, or a policy
    that sets neither, is INVALID_ARGUMENT."""
    if not request.HasField("truncation_policy"):
        return 0, 0
    policy = request.truncation_policy
    which = policy.WhichOneof("policy")
    if which is None:
        raise InvalidArgument("truncation_policy sets neither max_bytes nor max_age_seconds.")
    value = getattr(policy, which)
    if value <= 0:
        raise InvalidArgument(f"Invalid truncation_policy.{which}: {value}; it must be positive.")
    return (value, 0) if which == "max_bytes" else (0, value)
