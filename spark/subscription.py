"""A subscription as Spark needs it: found in the gateway's resource topic.

Resources are JSON records in the compacted topic `<internal_prefix>_gresources` under the key
`subscription/<name>`, read to the end on the driver; only their `meta` is used (the `proto`
field is ignored, so the gateway's generated protos are never imported).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gateway.translate import names
from spark import driver
from spark.options import KafkaConnection

DEFAULT_PREFIX = "__pubsub_gateway"


class SubscriptionNotFound(LookupError):
    """No such subscription in the gateway's resource topic."""


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    kafka_topic: str
    partitions: int
    log_topic: str
    group_id: str
    epoch: int
    detached: bool = False

    @staticmethod
    def from_meta(name: str, meta: dict[str, Any]) -> Subscription:
        return Subscription(
            name=name,
            kafka_topic=str(meta["kafka_topic"]),
            partitions=int(meta["partitions"]),
            log_topic=str(meta["log_topic"]),
            group_id=str(meta["group_id"]),
            epoch=int(meta.get("epoch", 0)),
            detached=bool(meta.get("detached", False)),
        )


def resource_topic(internal_prefix: str = DEFAULT_PREFIX) -> str:
    return str(names.internal_topic(internal_prefix, "resources"))


def load(name: str, conn: KafkaConnection, internal_prefix: str = DEFAULT_PREFIX) -> Subscription:
    """The subscription's current meta: the latest record of its key in the resource topic."""
    names.subscription(name)
    found, value = driver.latest_value(conn, resource_topic(internal_prefix), f"subscription/{name}".encode())
    if not found or value is None:
        raise SubscriptionNotFound(f"Subscription does not exist (resource={name})")
    return Subscription.from_meta(name, json.loads(value)["meta"])
