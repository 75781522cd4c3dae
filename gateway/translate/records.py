"""Message <-> Kafka record.

data <-> value, attributes <-> headers (UTF-8 values), ordering key <-> record key, message id
<-> (partition, offset), publish time <-> record timestamp. Records written by plain Kafka
producers may carry any key and any header bytes; they are delivered with the key as ordering
key when it is valid UTF-8 of at most 1024 bytes (else as the attribute `kafka-key-base64`), and
with non-UTF-8 header values base64-encoded under the attribute `<header>-base64`.

One header is the gateway's own and never an attribute: `NUMERIC_HEADER` lists (as a JSON array
of strings) the attributes that were published as numeric labels through the seed's early API
(docs/legacy-api.md), so that they come back to its subscribers as numbers. Its name starts with
`goog`, which no attribute published through v1 may.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from gateway.translate.limits import MAX_ORDERING_KEY_BYTES

_PARTITION_SHIFT = 40  # offsets below 2**40 (a trillion) per partition
KEY_ATTRIBUTE = "kafka-key-base64"
# A ReceivedMessage beyond its data, key and attributes: an ack id (~100 bytes), the message id,
# the publish time, delivery_attempt and each field's tag and length, generously.
RECEIVED_MESSAGE_OVERHEAD = 256
# The largest gRPC message the gateway sends or takes: a 10 MB publish and its framing.
MAX_GRPC_MESSAGE = 20 * 1024 * 1024
# Room a Pull or StreamingPull response keeps for fields beside its messages.
RESPONSE_FRAMING_BYTES = 64 * 1024

NUMERIC_HEADER = "goog-gateway-numeric-labels"
Headers = list[tuple[str, str | bytes | None]]  # as confluent-kafka takes them


class Record(NamedTuple):
    """A record as read from Kafka, reduced to what delivery needs. A named tuple, not a frozen
    dataclass: one is built per fetched record, and a tuple is built three times faster. Build
    one with `record` (or kafka/consumer.py's `to_record`), which works out its sizes: they are
    read at every delivery, and a field is read at a fraction of a property's cost."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, str | bytes | None]] | None
    size: int  # of key and value: what flow control counts
    # At least what the record takes in a pull response (a ReceivedMessage): `wire_size`.
    wire_size: int


def wire_size(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, str | bytes | None]] | None
) -> int:
    """At least what a record takes in a pull response (a ReceivedMessage): data, ordering key,
    attributes (a value not UTF-8 goes base64, a third larger), and room for the ack id, message
    id, publish time and the fields' framing."""
    n = len(value or b"") + 4 * len(key or b"") // 3 + RECEIVED_MESSAGE_OVERHEAD
    for name, header in headers or ():
        n += 2 * len(name) + 4 * len(header or b"") // 3 + 16  # name twice: "<name>-base64"
    return n


def record(
    partition: int,
    offset: int,
    timestamp_ms: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, str | bytes | None]] | None,
) -> Record:
    size = len(value or b"") + len(key or b"")
    return Record(partition, offset, timestamp_ms, key, value, headers, size, wire_size(key, value, headers))


@dataclasses.dataclass(frozen=True, slots=True)
class MessageView:
    """The Pub/Sub view of a record."""

    data: bytes
    attributes: dict[str, str]
    ordering_key: str
    message_id: str
    publish_time_ms: int
    # Attributes that were published as numeric labels of the early API (NUMERIC_HEADER).
    numeric: frozenset[str] = frozenset()


def message_id(partition: int, offset: int) -> str:
    return str((partition << _PARTITION_SHIFT) | offset)


def message_ids(written: Sequence[tuple[int, int]]) -> list[str]:
    """message_id of each (partition, offset): one call per Publish, no call per message."""
    shift = _PARTITION_SHIFT
    return [str((p << shift) | o) for p, o in written]


def parse_message_id(mid: str) -> tuple[int, int]:
    n = int(mid)
    return n >> _PARTITION_SHIFT, n & ((1 << _PARTITION_SHIFT) - 1)


def to_record(
    data: bytes, attributes: Mapping[str, str], ordering_key: str, numeric: Sequence[str] = ()
) -> tuple[bytes | None, bytes, Headers | None]:
    """(key, value, headers) of the record that carries a published message; `numeric` names
    the attributes that were numeric labels (NUMERIC_HEADER)."""
    headers: Headers | None = [(k, v.encode()) for k, v in attributes.items()] if attributes else None
    if numeric:
        mark = json.dumps(sorted(numeric), ensure_ascii=False, separators=(",", ":")).encode()
        headers = [*(headers or []), (NUMERIC_HEADER, mark)]
    return (ordering_key.encode() if ordering_key else None), data, headers


def numeric_keys(raw: str | bytes | None) -> frozenset[str]:
    """The attribute names a NUMERIC_HEADER value lists; nothing when it is not a JSON array of
    strings (a header written by somebody else)."""
    try:
        keys = json.loads(raw or b"")
    except (ValueError, UnicodeDecodeError):
        return frozenset()
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return frozenset()
    return frozenset(keys)


def to_message(record: Record) -> MessageView:
    attributes: dict[str, str] = {}
    numeric: frozenset[str] = frozenset()
    for name, raw in record.headers or ():
        if name == NUMERIC_HEADER:
            numeric = numeric_keys(raw)
            continue
        if raw is None or isinstance(raw, str):
            attributes[name] = raw or ""
            continue
        try:
            attributes[name] = raw.decode()
        except UnicodeDecodeError:
            attributes[f"{name}-base64"] = base64.b64encode(raw).decode()
    ordering_key = ""
    if record.key:
        try:
            ordering_key = record.key.decode()
        except UnicodeDecodeError:
            ordering_key = ""
        if not ordering_key or len(record.key) > MAX_ORDERING_KEY_BYTES:
            ordering_key = ""
            attributes[KEY_ATTRIBUTE] = base64.b64encode(record.key).decode()
    return MessageView(
        data=record.value or b"",
        attributes=attributes,
        ordering_key=ordering_key,
        message_id=message_id(record.partition, record.offset),
        publish_time_ms=record.timestamp_ms,
        numeric=numeric,
    )
