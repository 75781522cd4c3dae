"""Validation of what clients send, with the limits of the published API.

Every check runs before anything is written, so a bad request changes no state.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from gateway.clock import SecondsNanos, to_ms
from gateway.errors import InvalidArgument, ResourceExhausted

MAX_MESSAGES_PER_PUBLISH = 1000
MAX_PUBLISH_BYTES = 10_000_000
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024
MAX_LABELS = 64
MAX_LABEL_CHARS = 63
ECHO_CHARS = 64  # of a refused value quoted in an error (a whole one may not fit in gRPC metadata)
MIN_ACK_DEADLINE = 10
MAX_ACK_DEADLINE = 600
DEFAULT_ACK_DEADLINE = 10
# A topic's or subscription's message_retention_duration, in seconds: 10 minutes to 31 days.
MIN_RETENTION, MAX_RETENTION = 600, 31 * 24 * 3600
DEFAULT_RETENTION = 7 * 24 * 3600  # a subscription's, when it sets none


class OutgoingMessage(NamedTuple):  # a tuple: one per published message, made in bulk
    data: bytes
    attributes: Mapping[str, str]
    ordering_key: str
    # Attributes that were numeric labels of the seed's early API (records.NUMERIC_HEADER).
    numeric: tuple[str, ...] = ()


# OutgoingMessage((data, attributes, ordering_key, numeric)) without its Python-level __new__:
# Publish makes one per message.
outgoing = functools.partial(tuple.__new__, OutgoingMessage)


class _Published(Protocol):  # a google.pubsub.v1.PubsubMessage, as the wire decoded it
    data: bytes
    ordering_key: str

    @property
    def attributes(self) -> Mapping[str, str]: ...


def outgoing_of(messages: Iterable[_Published]) -> list[OutgoingMessage]:
    """A Publish request's messages, their attributes as dicts read once: the limits and the
    record each go over them, and a protobuf map is slow to walk (each walk makes its strings
    anew; walking its keys is the fastest way)."""
    return [
        outgoing((m.data, {k: a[k] for k in a}, m.ordering_key, ()))
        for m in messages
        for a in (m.attributes,)
    ]


# The official clients with OpenTelemetry tracing on send each message's W3C trace context under
# these keys, and the service takes them despite the `goog` prefix (other googclient_ keys, e.g.
# googclient_x-cloud-trace-context, it refuses): gateway/observe/tracing.py links spans to them.
TRACE_CONTEXT_KEYS = frozenset({"googclient_traceparent", "googclient_tracestate"})


def check_publish(messages: Sequence[OutgoingMessage]) -> int:
    """Refuse a publish request over any of Pub/Sub's limits; else its size in bytes as Pub/Sub
    sizes messages: data, ordering key, and attributes' names and values (UTF-8)."""
    if not messages:
        raise InvalidArgument("A publish request must contain at least one message (messages).")
    if len(messages) > MAX_MESSAGES_PER_PUBLISH:
        raise InvalidArgument(
            f"Too many messages: {len(messages)} given, at most {MAX_MESSAGES_PER_PUBLISH} "
            "per publish request (messages)."
        )
    total = 0
    for i, m in enumerate(messages):
        total += len(m.data)
        if m.ordering_key:
            key_bytes = len(m.ordering_key.encode())
            total += key_bytes
            if key_bytes > MAX_ORDERING_KEY_BYTES:
                raise InvalidArgument(
                    f"Ordering key of message {i} is longer than {MAX_ORDERING_KEY_BYTES} bytes "
                    f"(messages[{i}].ordering_key)."
                )
        if not m.attributes:
            if not m.data:
                raise InvalidArgument(
                    f"Message {i} has neither data nor attributes (messages[{i}].data); "
                    "a message must have non-empty data or at least one attribute."
                )
            continue  # nothing more to check of a message with data only
        if len(m.attributes) > MAX_ATTRIBUTES:
            raise InvalidArgument(
                f"Message {i} has {len(m.attributes)} attributes; at most {MAX_ATTRIBUTES} are "
                f"allowed (messages[{i}].attributes)."
            )
        for key, value in m.attributes.items():
            # A str knows whether it is ASCII (then its UTF-8 is as long): no encoding to count.
            kb = len(key) if key.isascii() else len(key.encode())
            vb = len(value) if value.isascii() else len(value.encode())
            total += kb + vb
            if not key:
                raise InvalidArgument(f"Message {i} has an empty attribute key (messages[{i}].attributes).")
            if kb > MAX_ATTRIBUTE_KEY_BYTES:
                raise InvalidArgument(
                    f"Attribute key of message {i} is {kb} bytes; at most "
                    f"{MAX_ATTRIBUTE_KEY_BYTES} are allowed (messages[{i}].attributes)."
                )
            if vb > MAX_ATTRIBUTE_VALUE_BYTES:
                raise InvalidArgument(
                    f"Value of attribute {key!r} of message {i} is {vb} bytes; at most "
                    f"{MAX_ATTRIBUTE_VALUE_BYTES} are allowed (messages[{i}].attributes)."
                )
            if key.startswith("goog") and key not in TRACE_CONTEXT_KEYS:
                raise InvalidArgument(
                    f"Attribute key {key!r} of message {i} is reserved: keys must not start "
                    f"with 'goog' (messages[{i}].attributes)."
                )
    if total > MAX_PUBLISH_BYTES:
        raise InvalidArgument(
            f"The publish request is {total} bytes; at most {MAX_PUBLISH_BYTES} are allowed."
        )
    return total


def ack_deadline(seconds: int, field: str = "ack_deadline_seconds") -> int:
    """A subscription's ack deadline: 0 means the default 10 s; otherwise 10..600."""
    if seconds == 0:
        return DEFAULT_ACK_DEADLINE
    if not MIN_ACK_DEADLINE <= seconds <= MAX_ACK_DEADLINE:
        raise InvalidArgument(
            f"Invalid {field}: {seconds}. It must be between {MIN_ACK_DEADLINE} and "
            f"{MAX_ACK_DEADLINE} seconds."
        )
    return seconds


def modify_deadline(seconds: int, field: str = "ack_deadline_seconds") -> int:
    """A ModifyAckDeadline value: 0..600, where 0 is a nack."""
    if not 0 <= seconds <= MAX_ACK_DEADLINE:
        raise InvalidArgument(
            f"Invalid {field}: {seconds}. It must be between 0 and {MAX_ACK_DEADLINE} seconds."
        )
    return seconds


def max_messages(n: int) -> int:
    if n <= 0:
        raise InvalidArgument(f"max_messages must be positive, got {n}.")
    return n


# google.protobuf.Timestamp: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z.
TIMESTAMP_MIN_SECONDS, TIMESTAMP_MAX_SECONDS = -62_135_596_800, 253_402_300_799


def seek_time_ms(when: SecondsNanos, field: str = "time") -> int:
    """A Seek's time in milliseconds since the epoch, for Kafka's offset-for-time lookup.

    Out-of-range Timestamps are refused. A time before 1970 seeks to the oldest retained
    message, like any time before it: Kafka reads negative timestamps as its special
    "latest" (-1) and "earliest" (-2) markers, so they are never passed on."""
    seconds, nanos = when.seconds, when.nanos
    if not TIMESTAMP_MIN_SECONDS <= seconds <= TIMESTAMP_MAX_SECONDS or not 0 <= nanos <= 999_999_999:
        raise InvalidArgument(
            f"Invalid {field}: a Timestamp must lie between 0001-01-01 and 9999-12-31 with nanos "
            f"in 0..999999999 (got seconds={seconds}, nanos={nanos})."
        )
    return max(0, to_ms(when))


def echo(text: str) -> str:
    """A client's value for an error message: quoted, and cut short when long."""
    return repr(text) if len(text) <= ECHO_CHARS else f"{text[:ECHO_CHARS]!r}... ({len(text)} characters)"


def _label_char(c: str, first: bool = False) -> bool:
    """Google's label alphabet: lowercase and other (caseless, "international") letters,
    digits of any script, '_' and '-'; a key starts with a letter of the first two kinds."""
    category = unicodedata.category(c)
    if category in ("Ll", "Lo"):
        return True
    return not first and (category[0] == "N" or c in "_-")


def check_labels(
    labels: Mapping[str, str], own: Mapping[str, int] | None = None, field: str = "labels"
) -> None:
    """Google's label rules: at most 64 labels; keys of 1..63 characters that start with a
    lowercase or international letter; values of 0..63 characters; both only of lowercase or
    international letters, digits, '_' and '-'.

    `own` names the gateway's own labels, whose values follow the gateway's rules (checked
    by the caller: a Kafka topic name, a number) and may be as long as given here."""
    own = own or {}
    if len(labels) > MAX_LABELS:
        raise InvalidArgument(
            f"Too many labels: {len(labels)} given, at most {MAX_LABELS} are allowed ({field})."
        )
    for key, value in labels.items():
        if (
            not 1 <= len(key) <= MAX_LABEL_CHARS
            or not _label_char(key[0], first=True)
            or not all(_label_char(c) for c in key)
        ):
            raise InvalidArgument(
                f"Invalid label key {echo(key)}: a key has 1 to {MAX_LABEL_CHARS} characters, "
                "starts with a lowercase letter or an international character and holds only "
                f"lowercase letters, international characters, digits, '_' and '-' ({field})."
            )
        if key in own:
            if len(value) > own[key]:
                raise InvalidArgument(
                    f"Invalid value of label {key}: at most {own[key]} characters are allowed, "
                    f"got {len(value)} ({field})."
                )
            continue
        if len(value) > MAX_LABEL_CHARS or not all(_label_char(c) for c in value):
            raise InvalidArgument(
                f"Invalid value {echo(value)} of label {key}: a value has at most "
                f"{MAX_LABEL_CHARS} characters, only lowercase letters, international "
                f"characters, digits, '_' and '-' ({field})."
            )


def quota_exceeded(kind: str, project: str, current: int, maximum: int, flag: str) -> ResourceExhausted:
    """RESOURCE_EXHAUSTED as Pub/Sub words a project over a resource limit, naming the
    setting that raises the gateway's."""
    return ResourceExhausted(
        f'Your project has exceeded a limit: (type="{kind}-per-project", current={current}, '
        f"maximum={maximum}). Project {project} has {current} {kind}; this gateway allows "
        f"{maximum} per project ({flag})."
    )
