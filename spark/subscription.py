"""A subscription as Spark needs it: found in the gateway's resource topic.

Resources are JSON records in the compacted topic `<internal_prefix>_gresources` under the key
`subscription/<name>`, read to the end on the driver; only their `meta` is used (the `proto`
field is ignored, so the gateway's generated protos are never imported), typed as the gateway
types it (gateway/translate/meta.py).
"""

from __future__ import annotations

import dataclasses
import json

from gateway.translate import names
from gateway.translate.meta import SubscriptionMeta, parse
from spark import driver
from spark.options import KafkaConnection

DEFAULT_PREFIX = "__pubsub_gateway"


class SubscriptionNotFound(LookupError):
    """No such subscription in the gateway's resource topic."""


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    """A subscription's name and the gateway's own facts about it, as the gateway stores them."""

    name: str
    meta: SubscriptionMeta


def resource_topic(internal_prefix: str = DEFAULT_PREFIX) -> str:
    return str(names.internal_topic(internal_prefix, "resources"))


def load(name: str, conn: KafkaConnection, internal_prefix: str = DEFAULT_PREFIX) -> Subscription:
    """The subscription's current meta: the latest record of its key in the resource topic."""
    names.subscription(name)
    found, value = driver.latest_value(conn, resource_topic(internal_prefix), f"subscription/{name}".encode())
    if not found or value is None:
        raise SubscriptionNotFound(f"Subscription does not exist (resource={name})")
    return Subscription(name, parse(SubscriptionMeta, json.loads(value)["meta"]))
