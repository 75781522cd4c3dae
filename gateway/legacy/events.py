"""Events of the early API (tech.pubsub.PubsubEvent) built from delivered messages (pure):
what Pull and PullBatch answer and what gRPC push sends (gateway/push)."""

from __future__ import annotations

from collections.abc import Callable

from gateway._pb.tech.pubsub import pubsub_pb2
from gateway.legacy.labels import to_labels
from gateway.legacy.names import LegacyNames
from gateway.translate.records import MessageView


def message_event(subscription: str, message: MessageView) -> pubsub_pb2.PubsubEvent:
    """The event carrying `message`, for `subscription` as the subscriber names it (the early
    API's form for subscriptions of the legacy project: gateway/legacy/names.py). Numeric labels
    published through the early API come back as num_value; other attributes as str_value."""
    event = pubsub_pb2.PubsubEvent(subscription=subscription)
    msg = event.message
    msg.data = message.data
    msg.message_id = message.message_id
    msg.label.extend(to_labels(message.attributes, message.numeric))
    return event


def truncated_event(subscription: str) -> pubsub_pb2.PubsubEvent:
    """The event telling a subscriber that part of the subscription's messages were dropped
    (TruncateSubscription or the truncation policy: docs/truncation.md)."""
    return pubsub_pb2.PubsubEvent(subscription=subscription, truncated=True)


def deleted_event(subscription: str) -> pubsub_pb2.PubsubEvent:
    """The event a push endpoint gets when its subscription is deleted."""
    return pubsub_pb2.PubsubEvent(subscription=subscription, deleted=True)


def push_events(legacy_project: str) -> Callable[[str, MessageView], pubsub_pb2.PubsubEvent]:
    """The PushManager's `message_event` for gRPC push: it is given v1 names, and the endpoint
    gets the subscription as the early API names it."""
    shown = LegacyNames(legacy_project).show

    def event(subscription: str, message: MessageView) -> pubsub_pb2.PubsubEvent:
        return message_event(shown(subscription), message)

    return event
