"""Settings of topics and subscriptions that this gateway cannot act on: refused, never stored.

Pub/Sub acts on every setting it accepts; a gateway that stored a BigQuery export or a message
transform and then did nothing with it would turn a BigQuery subscription into a pull
subscription nobody reads. So a request that sets one of these is refused whole, before anything
is written, with UNIMPLEMENTED naming the field: the request is valid for Pub/Sub (not
INVALID_ARGUMENT, which would tell the caller to fix it), and google.rpc.Code's UNIMPLEMENTED is
"not implemented or not supported/enabled in this service" (docs/fields.md, "The rule").

Fields that only describe Google's infrastructure (`kms_key_name`, `message_storage_policy`) are
stored and returned without effect; fields Pub/Sub sets itself are overwritten (`scrub_*`). The
table of every field and what the gateway does with it is docs/fields.md;
tests/unit/test_fields_table.py keeps it complete.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from google.protobuf.message import Message

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.errors import Unimplemented, quote

# What every refusal says: tests (and the adversarial suite) recognise a refusal by it.
MARK = "is not supported by this gateway"
DOC = "docs/fields.md"

# Set at all, each of these asks Pub/Sub to do something this gateway does not do.
TOPIC_REFUSED: Mapping[str, str] = {
    "ingestion_data_source_settings": "it imports messages from outside sources",
    "message_transforms": "it transforms messages on publish",
}
SUBSCRIPTION_REFUSED: Mapping[str, str] = {
    "bigquery_config": "it writes messages to a BigQuery table",
    "cloud_storage_config": "it writes messages to a Cloud Storage bucket",
    "bigtable_config": "it writes messages to a Bigtable table",
    "message_transforms": "it transforms messages before delivery",
}
# push_config.attributes: Pub/Sub knows one key, choosing the push body's format; the gateway
# sends the v1 format only.
PUSH_VERSION_KEY = "x-goog-version"
PUSH_VERSIONS = frozenset({"v1", "v1beta2"})

# Set by Pub/Sub, whatever a request says (OUTPUT_ONLY, or "ignored if set in any requests");
# `state` is set by the services. `tags` are input only: bound to Google's Resource Manager, never
# returned by Pub/Sub, so neither stored nor returned here.
TOPIC_SCRUBBED = ("satisfies_pzs", "tags")
SUBSCRIPTION_SCRUBBED = ("topic_message_retention_duration", "analytics_hub_subscription_info", "tags")


def is_set(message: Message, field: str) -> bool:
    """Whether `field` of `message` holds anything: a present sub-message, a non-empty list or
    map, a scalar away from its default."""
    desc = message.DESCRIPTOR.fields_by_name[field]
    if desc.is_repeated:
        return len(getattr(message, field)) > 0
    if desc.message_type is not None:
        return message.HasField(field)
    return bool(getattr(message, field))


def _refuse(kind: str, field: str, why: str) -> Unimplemented:
    return Unimplemented(
        f"{kind} field {field} {MARK}: {why}, which this gateway would never do, so it is "
        f"refused rather than stored ({DOC})."
    )


def check_topic(topic: pubsub_pb2.Topic, fields: Collection[str] | None = None) -> None:
    """UNIMPLEMENTED naming the first refused field that `topic` sets, of `fields` (an update
    mask's paths) or of all fields (a create)."""
    for field, why in TOPIC_REFUSED.items():
        if (fields is None or field in fields) and is_set(topic, field):
            raise _refuse("Topic", field, why)


def check_subscription(sub: pubsub_pb2.Subscription, fields: Collection[str] | None = None) -> None:
    """As check_topic, for a subscription and its push_config."""
    for field, why in SUBSCRIPTION_REFUSED.items():
        if (fields is None or field in fields) and is_set(sub, field):
            raise _refuse("Subscription", field, why)
    if fields is None or "push_config" in fields:
        check_push_config(sub.push_config)


def check_push_config(push: pubsub_pb2.PushConfig) -> None:
    """UNIMPLEMENTED for push attributes other than `x-goog-version: v1` (or `v1beta2`, the same
    format): the v1beta1 body format and any other key would be ignored."""
    for key, value in push.attributes.items():
        if key != PUSH_VERSION_KEY:
            raise _refuse(
                "PushConfig",
                f"attributes[{quote(key, 64)!r}]",
                f"Pub/Sub knows only the attribute {PUSH_VERSION_KEY}",
            )
        if value not in PUSH_VERSIONS:
            raise _refuse(
                "PushConfig",
                f"attributes[{PUSH_VERSION_KEY!r}] = {quote(value, 64)!r}",
                "it asks for a push body format other than v1, the one this gateway sends",
            )


def scrub_topic(topic: pubsub_pb2.Topic) -> None:
    """Clear what Pub/Sub sets itself or never returns, in a topic about to be stored."""
    for field in TOPIC_SCRUBBED:
        topic.ClearField(field)


def scrub_subscription(sub: pubsub_pb2.Subscription) -> None:
    """As scrub_topic, for a subscription (the service then sets what it owns)."""
    for field in SUBSCRIPTION_SCRUBBED:
        sub.ClearField(field)
