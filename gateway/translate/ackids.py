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

import functools
import hashlib
import operator
import re
from collections.abc import Sequence
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


# Every id of a call in one scan, one per line: `decode_all`. Ids hold no newline (checked), so
# each line is one id and matches at most once.
_find_ack_ids = re.compile(
    r"^([0-9a-f]{8})-([0-9a-f]{1,8})-([0-9a-f]{1,16})-([0-9a-f]{1,8})$", re.MULTILINE
).findall
_new_ref = functools.partial(tuple.__new__, AckRef)  # AckRef(...) without its Python frame
# Partitions and generations are small: looked up, their hex parsed once here.
_SMALL_HEX = {f"{n:x}": n for n in range(256)}
_generation = operator.itemgetter(3)


def decode_all(ack_ids: Sequence[str]) -> list[AckRef]:
    """`decode` of every id, in order: a call's ids (up to thousands) in one regex scan, at about
    half the cost per id. MalformedAckId names the first id that is not one."""
    if not ack_ids:
        return []
    joined = "\n".join(ack_ids)
    found = _find_ack_ids(joined) if joined.count("\n") == len(ack_ids) - 1 else []
    if len(found) != len(ack_ids):
        return [decode(ack_id) for ack_id in ack_ids]  # raises for the first bad one
    small = _SMALL_HEX
    refs = [
        _new_ref(
            (t, small[p] if p in small else int(p, 16), int(o, 16), small[g] if g in small else int(g, 16))
        )
        for t, p, o, g in found
    ]
    if min(map(_generation, refs)) < 1:
        raise MalformedAckId(next(a for a, ref in zip(ack_ids, refs, strict=True) if ref.generation < 1))
    return refs


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
