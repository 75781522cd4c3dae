"""A subscription as Spark needs it: found in the gateway's resource topic.

Resources are JSON records in the compacted topic `<internal_prefix>_gresources` under the key
`<kind>/<name>`, read to the end on the driver: their `meta`, typed as the gateway types it
(gateway/translate/meta.py), and of the subscription's `proto` (the API's message, serialized) the
delivery policies Spark applies too: the filter and the message retention. A topic's record
says which Kafka topic carries it and whether it has a schema (spark/sink.py).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.clock import to_ms
from gateway.translate import names
from gateway.translate.limits import DEFAULT_RETENTION
from gateway.translate.meta import SubscriptionMeta, TopicMeta, parse
from spark import driver
from spark.options import KafkaConnection

DEFAULT_PREFIX = "__pubsub_gateway"


class SubscriptionNotFound(LookupError):
    """No such subscription in the gateway's resource topic."""


class TopicNotFound(LookupError):
    """No such topic in the gateway's resource topic."""


class UnsupportedSubscription(ValueError):
    """A subscription the Spark reads cannot deliver as the gateway does."""


def require_readable(sub: Subscription) -> None:
    """UnsupportedSubscription for a subscription whose reads would differ from its delivery:
    one with the seed API's TruncationPolicy (docs/spark.md, "Filters, retention, dead
    letters"), whose owners drop messages by their age or the backlog's size as they hold them."""
    meta = sub.meta
    if meta.legacy_truncate_max_bytes or meta.legacy_truncate_max_age_seconds:
        policy = (
            f"max_bytes {meta.legacy_truncate_max_bytes}"
            if meta.legacy_truncate_max_bytes
            else f"max_age_seconds {meta.legacy_truncate_max_age_seconds}"
        )
        raise UnsupportedSubscription(
            f"{sub.name} has a truncation policy ({policy}): the gateway drops its messages as "
            "their owner holds them, which a Spark read cannot follow, so Spark does not read "
            "it. Read a subscription without one (the truncation policy cannot be removed)."
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    """A subscription's name and the gateway's own facts about it, as the gateway stores them."""

    name: str
    meta: SubscriptionMeta
    filter: str = ""  # the v1 filter as stored ("": everything matches)
    retention_ms: int = DEFAULT_RETENTION * 1000  # message_retention_duration, as policies.of


@dataclasses.dataclass(frozen=True, slots=True)
class Topic:
    """A topic's name, the gateway's facts about it, and its schema settings' schema ("": none)."""

    name: str
    meta: TopicMeta
    schema: str = ""


def resource_topic(internal_prefix: str = DEFAULT_PREFIX) -> str:
    return str(names.internal_topic(internal_prefix, "resources"))


def _record(conn: KafkaConnection, internal_prefix: str, key: str) -> dict[str, Any] | None:
    """The latest record of `key` in the resource topic, None if there is none or a tombstone."""
    found, value = driver.latest_value(conn, resource_topic(internal_prefix), key.encode())
    return json.loads(value) if found and value is not None else None


def load(name: str, conn: KafkaConnection, internal_prefix: str = DEFAULT_PREFIX) -> Subscription:
    """The subscription's current meta and policies: the latest record of its key in the
    resource topic."""
    names.subscription(name)
    record = _record(conn, internal_prefix, f"subscription/{name}")
    if record is None:
        raise SubscriptionNotFound(f"Subscription does not exist (resource={name})")
    proto = pubsub_pb2.Subscription.FromString(base64.b64decode(record.get("proto", "")))
    return Subscription(
        name,
        parse(SubscriptionMeta, record["meta"]),
        filter=proto.filter,
        # as gateway/core/policies.py derives it: unset (or zero) is the default, 7 days
        retention_ms=to_ms(proto.message_retention_duration) or DEFAULT_RETENTION * 1000,
    )


def load_topic(name: str, conn: KafkaConnection, internal_prefix: str = DEFAULT_PREFIX) -> Topic:
    """The topic's current meta and schema: the latest record of `topic/<name>`."""
    names.topic(name)
    record = _record(conn, internal_prefix, f"topic/{name}")
    if record is None:
        raise TopicNotFound(f"Topic does not exist (resource={name})")
    proto = pubsub_pb2.Topic.FromString(base64.b64decode(record.get("proto", "")))
    return Topic(name, parse(TopicMeta, record["meta"]), schema=proto.schema_settings.schema)
