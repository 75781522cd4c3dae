"""The received messages of a Pull or StreamingPull response, encoded to protobuf's wire format
directly.

Building a `ReceivedMessage` per delivery with the protobuf runtime and serializing the response
was the largest single cost of delivering a message (~4 us of the gateway's ~23 us through the
official Go client). Both responses keep their messages in field 1 (`received_messages`), and a
protobuf message is the concatenation of its fields in any order, so a response is sent as these
bytes followed by the serialized rest of it (`Encoded`).

Messages are encoded here: ack_id (1), message (2: data 1, attributes 2, message_id 3,
publish_time 4, ordering_key 5), and delivery_attempt (3) when not 0, the fields in number order
and defaults left out as the protobuf runtime does. A plain record's bytes (no headers, no key:
what publishers without attributes or ordering keys write) are the runtime's own; with
attributes, they decode to what the runtime builds (a map's entries may come in any order):
tests/unit/test_received.py checks both. Each header is an attribute, its value as it is when it
is UTF-8, and the record's key the ordering key. What needs more than that goes through the
runtime (`records.to_message`), and only its bytes are spliced in: a header value that is not
UTF-8 (an attribute `<name>-base64`), a key that is no ordering key (`kafka-key-base64`), and a
message a schema validated (its schema attributes are marked as they read now: SchemaMarks).
Publishers through the API write only the last, and only to a topic with a schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.schemas.names import ATTR_SCHEMA_NAME
from gateway.translate import records
from gateway.translate.limits import MAX_ORDERING_KEY_BYTES
from gateway.translate.records import NUMERIC_HEADER

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from gateway.core.runner import Delivery
    from gateway.core.topic_schemas import SchemaMarks

_MASK64 = (1 << 64) - 1


def varint(n: int) -> bytes:
    """Base-128 varint; a negative int64 as its two's complement, ten bytes, as protobuf does."""
    n &= _MASK64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = tuple(varint(n) for n in range(1 << 14))  # every length below 16 KiB, ready made


def _length(n: int) -> bytes:
    return _SMALL[n] if n < 16384 else varint(n)


def _timestamp(ms: int) -> bytes:
    """A google.protobuf.Timestamp of a Kafka timestamp in milliseconds: seconds (1), nanos (2)."""
    seconds, millis = divmod(ms, 1000)
    out = b"\x08" + varint(seconds) if seconds else b""
    return out + b"\x10" + varint(millis * 1_000_000) if millis else out


def encode(deliveries: Sequence[Delivery], marks: SchemaMarks | None = None) -> bytes:
    """The deliveries as the repeated field 1 of a response, in order."""
    parts: list[bytes] = []
    extend = parts.extend
    small, length, message_id = _SMALL, _length, records.message_id
    last_ms, stamp = None, b""
    for ack_id, r, attempt in deliveries:
        aid = ack_id.encode()
        if r.timestamp_ms != last_ms:
            last_ms = r.timestamp_ms
            ts = _timestamp(last_ms)
            stamp = b'"' + small[len(ts)] + ts  # field 4, always present, as the runtime has it
        if r.headers is None and r.key is None:
            mid = message_id(r.partition, r.offset).encode()
            data = r.value
            if data:
                msg = b"".join((b"\n", length(len(data)), data, b"\x1a", small[len(mid)], mid, stamp))
            else:
                msg = b"\x1a" + small[len(mid)] + mid + stamp
        else:
            msg = _attributed(r, stamp, marks is not None) or _general(r, marks)
        tail = b"\x18" + length(attempt) if attempt else b""  # attempts are positive and small
        size_aid, size_msg = small[len(aid)], length(len(msg))
        body = 2 + len(size_aid) + len(aid) + len(size_msg) + len(msg) + len(tail)
        extend((b"\n", length(body), b"\n", size_aid, aid, b"\x12", size_msg, msg, tail))
    return b"".join(parts)


# Each attribute name's start of a map entry: field 1 and the name, ready made (names repeat).
_NAMES: dict[str, bytes] = {}
_MAX_NAMES = 10_000


def _name(name: str) -> bytes:
    """The entry head of an attribute name (the schema name's is never kept: see _attributed)."""
    k = name.encode()  # UnicodeEncodeError for a name protobuf would refuse too
    made = b"\n" + _length(len(k)) + k
    if len(_NAMES) >= _MAX_NAMES:
        _NAMES.clear()
    if name != ATTR_SCHEMA_NAME:
        _NAMES[name] = made
    return made


def _attributed(r: records.Record, stamp: bytes, marked: bool) -> bytes | None:
    """A PubsubMessage of a record with headers or a key whose headers are attributes as they
    are and whose key is its ordering key; None for any other (see the module's docstring), and,
    when schema marks are `marked`, for a record a schema validated (its schema-name attribute,
    whose name is never cached, so that each such record is found)."""
    small, names = _SMALL, _NAMES
    parts: list[bytes] = []
    data = r.value
    if data:
        parts += (b"\n", _length(len(data)), data)
    try:
        for name, raw in r.headers or ():
            head = names.get(name)
            if head is None:
                if name == NUMERIC_HEADER:
                    continue
                if marked and name == ATTR_SCHEMA_NAME:
                    return None
                head = _name(name)
            if type(raw) is bytes:
                if not raw.isascii():
                    raw.decode()  # not UTF-8: `<name>-base64`
                value = raw
            elif raw is None:
                value = b""
            else:
                value = str(raw).encode()
            n = len(value)
            size = small[n] if n < 16384 else varint(n)
            entry = len(head) + 1 + len(size) + n
            parts += (b"\x12", small[entry] if entry < 16384 else varint(entry), head, b"\x12", size, value)
        key = r.key
        ordering = b""
        if key:
            if len(key) > MAX_ORDERING_KEY_BYTES:
                return None
            if not key.isascii():
                key.decode()
            ordering = b"*" + small[len(key)] + key  # field 5
    except UnicodeError:
        return None
    mid = records.message_id(r.partition, r.offset).encode()
    parts += (b"\x1a", small[len(mid)], mid, stamp, ordering)
    return b"".join(parts)


def _general(r: records.Record, marks: SchemaMarks | None) -> bytes:
    """A PubsubMessage of a record with headers or a key, through the protobuf runtime."""
    view = records.to_message(r)
    if marks is not None:
        marks.apply(view.attributes)
    msg = pb.PubsubMessage(
        data=view.data,
        attributes=view.attributes,
        message_id=view.message_id,
        ordering_key=view.ordering_key,
    )
    when = msg.publish_time
    when.seconds, ms = divmod(r.timestamp_ms, 1000)
    when.nanos = ms * 1_000_000
    return msg.SerializeToString()


class Encoded:
    """A Pull or StreamingPull response: its messages already encoded, the rest a message.
    gRPC serializes it with `SerializeToString`, as it would the response itself."""

    __slots__ = ("head", "received")

    def __init__(self, head: Message, received: bytes) -> None:
        self.head = head
        self.received = received

    def SerializeToString(self) -> bytes:
        return self.received + self.head.SerializeToString()

    def message(self) -> Message:
        """The whole response as a message again, for callers that read it (REST's JSON)."""
        return type(self.head).FromString(self.SerializeToString())

    @property
    def received_messages(self) -> Any:
        """The messages decoded again (tracing reads their ids and attributes)."""
        whole: Any = self.message()
        return whole.received_messages
