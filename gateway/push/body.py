"""The HTTP request of one push: body and headers, from a message and the push config. Pure.

Wrapped (the default), the body is the JSON object Pub/Sub sends:

    {"message": {"attributes": {...}, "data": "<base64>", "messageId": "...", "message_id": "...",
                 "publishTime": "<RFC 3339>", "publish_time": "<RFC 3339>", "orderingKey": "..."},
     "subscription": "projects/p/subscriptions/s", "deliveryAttempt": 3}

(`orderingKey` only when the message has one, `deliveryAttempt` only when the subscription has a
dead-letter policy). With `no_wrapper` the body is the message data itself; with its
`write_metadata` the metadata and attributes travel as headers.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import re
import time

from gateway.translate.records import MessageView

SUCCESS_STATUSES = frozenset({102, 200, 201, 202, 204})
SUBSCRIPTION_HEADER = "x-goog-pubsub-subscription-name"
MESSAGE_ID_HEADER = "x-goog-pubsub-message-id"
PUBLISH_TIME_HEADER = "x-goog-pubsub-publish-time"
ORDERING_KEY_HEADER = "x-goog-pubsub-ordering-key"
# Attributes never written as headers: they would change how the request is read or routed.
_RESERVED = frozenset(
    {
        "authorization",
        "connection",
        "content-encoding",
        "content-length",
        "content-type",
        "expect",
        "host",
        "keep-alive",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
    }
)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP header name (RFC 9110 token)
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclasses.dataclass(frozen=True, slots=True)
class PushTarget:
    """A subscription's push_config, as far as sending needs it."""

    endpoint: str
    no_wrapper: bool = False
    write_metadata: bool = False
    oidc_email: str = ""
    oidc_audience: str = ""

    @property
    def audience(self) -> str:
        """The token's `aud`: the configured audience, else the endpoint URL."""
        return self.oidc_audience or self.endpoint


@dataclasses.dataclass(frozen=True, slots=True)
class PushRequest:
    body: bytes
    headers: dict[str, str]


def rfc3339(ms: int) -> str:
    """Milliseconds since the epoch as RFC 3339 UTC with millisecond precision."""
    seconds, millis = divmod(ms, 1000)
    return f"{_utc_second(seconds)}.{millis:03d}Z"


@functools.lru_cache(maxsize=256)  # messages pushed together were mostly published in one second
def _utc_second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


@functools.lru_cache(maxsize=1024)
def _json_string(text: str) -> str:
    return json.dumps(text)


def build(subscription: str, message: MessageView, attempt: int, target: PushTarget) -> PushRequest:
    """The request pushing `message`; `attempt` is 0 when the subscription does not count them."""
    if target.no_wrapper:
        headers = {"content-type": "application/octet-stream"}
        if target.write_metadata:
            headers |= metadata_headers(subscription, message)
        return PushRequest(message.data, headers)
    text = wrapped_json(subscription, message, attempt)
    return PushRequest(text.encode(), {"content-type": "application/json"})


def wrapped_json(subscription: str, message: MessageView, attempt: int) -> str:
    """The wrapped body (module docstring) as compact JSON, assembled from parts: it is built
    for every push, and this is four times faster than `json.dumps` of a dict (base64 and
    RFC 3339 need no escaping)."""
    published = rfc3339(message.publish_time_ms)
    attributes = json.dumps(message.attributes, separators=(",", ":")) if message.attributes else "{}"
    mid = message.message_id
    mid = f'"{mid}"' if mid.isdigit() else json.dumps(mid)
    key = f',"orderingKey":{json.dumps(message.ordering_key)}' if message.ordering_key else ""
    count = f',"deliveryAttempt":{attempt}' if attempt > 0 else ""
    return (
        f'{{"message":{{"attributes":{attributes},"data":"{base64.b64encode(message.data).decode()}",'
        f'"messageId":{mid},"message_id":{mid},"publishTime":"{published}","publish_time":"{published}"'
        f'{key}}},"subscription":{_json_string(subscription)}{count}}}'
    )


def metadata_headers(subscription: str, message: MessageView) -> dict[str, str]:
    """`write_metadata` headers: the x-goog-pubsub-* fields, then each attribute that can be a
    header (a token name, no control characters, not one of the request's own headers)."""
    headers = {
        SUBSCRIPTION_HEADER: subscription,
        MESSAGE_ID_HEADER: message.message_id,
        PUBLISH_TIME_HEADER: rfc3339(message.publish_time_ms),
    }
    if message.ordering_key and header_value_ok(message.ordering_key):
        headers[ORDERING_KEY_HEADER] = message.ordering_key
    for name, value in message.attributes.items():
        lower = name.lower()
        if lower in headers or lower in _RESERVED or not _TOKEN.fullmatch(name):
            continue
        if header_value_ok(value):
            headers[name] = value
    return headers


def header_value_ok(value: str) -> bool:
    return _CONTROL.search(value) is None
