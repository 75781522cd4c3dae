"""Ack ids: self-describing, ASCII and short, so that any gateway process can act on any of them.

Form: `<tag>-<partition>-<offset>-<generation>`, all lowercase hex except the tag, which is the
first 8 hex digits of a hash of the subscription's incarnation (name + uid). The generation is
the message's delivery count at the time of this delivery, which makes every ack id unique per
delivery. The longest possible id is 8+1+8+1+16+1+8 = 43 characters.

The seed's early API (tech.pubsub) also acknowledges *truncation events* (core/truncation.py),
which are no Kafka message: their ids are `trunc:<subscription uid>:<event number, hex>`. The
`:` and the letters of `trunc` are no hex digits, so no event id decodes as a message's id and
no message id is taken for an event's (`is_event_id`).
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple, NewType

AckId = NewType("AckId", str)


class MalformedAckId(ValueError):
    """The string is not an ack id this gateway issued."""


class AckRef(NamedTuple):  # a tuple: every acked message decodes one
    tag: str
    partition: int
    offset: int
    generation: int


def subscription_tag(subscription: str, uid: str) -> str:
    return hashlib.blake2b(f"{subscription}\0{uid}".encode(), digest_size=4).hexdigest()


def encode(tag: str, partition: int, offset: int, generation: int) -> AckId:
    return AckId(f"{tag}-{partition:x}-{offset:x}-{generation:x}")


_match_ack_id = re.compile(r"([0-9a-f]{8})-([0-9a-f]{1,8})-([0-9a-f]{1,16})-([0-9a-f]{1,8})").fullmatch


def decode(ack_id: str) -> AckRef:
    match = _match_ack_id(ack_id)
    if match is None:
        raise MalformedAckId(ack_id)
    tag, partition, offset, generation = match.groups()
    gen = int(generation, 16)
    if gen < 1:
        raise MalformedAckId(ack_id)
    return AckRef(tag, int(partition, 16), int(offset, 16), gen)


class EventRef(NamedTuple):
    uid: str  # the subscription's uid (SubscriptionMeta.uid)
    seq: int  # the event's number: SubscriptionMeta.legacy_truncations when it was raised


EVENT_PREFIX = "trunc:"
_match_event_id = re.compile(r"trunc:([0-9A-Za-z_.-]{1,64}):([0-9a-f]{1,16})").fullmatch


def is_event_id(ack_id: str) -> bool:
    """Whether the id claims to be a truncation event's (it may still be malformed)."""
    return ack_id.startswith(EVENT_PREFIX)


def encode_event(uid: str, seq: int) -> AckId:
    return AckId(f"{EVENT_PREFIX}{uid}:{seq:x}")


def decode_event(ack_id: str) -> EventRef:
    match = _match_event_id(ack_id)
    if match is None:
        raise MalformedAckId(ack_id)
    uid, seq = match.groups()
    n = int(seq, 16)
    if n < 1:
        raise MalformedAckId(ack_id)
    return EventRef(uid, n)
