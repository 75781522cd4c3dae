"""The received messages of a Pull or StreamingPull response, encoded to protobuf's wire format
directly.

Building a `ReceivedMessage` per delivery with the protobuf runtime and serializing the response
was the largest single cost of delivering a message (~4 us of the gateway's ~23 us through the
official Go client). Both responses keep their messages in field 1 (`received_messages`), and a
protobuf message is the concatenation of its fields in any order, so a response is sent as these
bytes followed by the serialized rest of it (`Encoded`).

A plain record (no headers, no key: what Pub/Sub publishers without attributes or ordering keys
write) is encoded here: ack_id (1), message (2: data 1, message_id 3, publish_time 4), and
delivery_attempt (3) when not 0, the fields in number order and defaults left out as the protobuf
runtime does, so the bytes are the runtime's own (tests/unit/test_received.py checks them against
it). Any other record goes through the runtime (`records.to_message`, the schema marks), and only
its bytes are spliced in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.translate import records

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
        if r.headers is None and r.key is None:
            if r.timestamp_ms != last_ms:
                last_ms = r.timestamp_ms
                ts = _timestamp(last_ms)
                stamp = b'"' + small[len(ts)] + ts  # field 4, always present, as the runtime has it
            mid = message_id(r.partition, r.offset).encode()
            data = r.value
            if data:
                msg = b"".join((b"\n", length(len(data)), data, b"\x1a", small[len(mid)], mid, stamp))
            else:
                msg = b"\x1a" + small[len(mid)] + mid + stamp
        else:
            msg = _general(r, marks)
        tail = b"\x18" + length(attempt) if attempt else b""  # attempts are positive and small
        size_aid, size_msg = small[len(aid)], length(len(msg))
        body = 2 + len(size_aid) + len(aid) + len(size_msg) + len(msg) + len(tail)
        extend((b"\n", length(body), b"\n", size_aid, aid, b"\x12", size_msg, msg, tail))
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
