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
from collections.abc import Sequence
from typing import NamedTuple, NewType, cast

AckId = NewType("AckId", str)


class MalformedAckId(ValueError):
    """The string is not an ack id this gateway issued."""


class AckRef(NamedTuple):
    tag: str
    partition: int
    offset: int
    generation: int


def subscription_tag(subscription: str, uid: str) -> str:
    return hashlib.blake2b(f"{subscription}\0{uid}".encode(), digest_size=4).hexdigest()


def encode(tag: str, partition: int, offset: int, generation: int) -> AckId:
    return AckId(f"{tag}-{partition:x}-{offset:x}-{generation:x}")


def encode_each(tag: str, deliveries: Sequence[tuple[int, int, int, object]]) -> list[AckId]:
    """`encode` of each (partition, offset, generation, ...) of a delivery, the thousand ids of
    a response at about half the cost: each partition's part is written once."""
    heads = {p: f"{tag}-{p:x}-" for p in {d[0] for d in deliveries}}
    # (%-formatting: ~100 ns an id here, against ~150 for the f-string with its format specs)
    return cast(list[AckId], ["%s%x-%x" % (heads[p], o, g) for p, o, g, _ in deliveries])  # noqa: UP031


_match_ack_id = re.compile(r"([0-9a-f]{8})-([0-9a-f]{1,8})-([0-9a-f]{1,16})-([0-9a-f]{1,8})").fullmatch


def _fields(ack_id: str) -> tuple[str, str, str, str]:
    """The id's four fields, as written; MalformedAckId unless it is one."""
    match = _match_ack_id(ack_id)
    if match is None or not match[4].strip("0"):  # (generation 0: no delivery has it)
        raise MalformedAckId(ack_id)
    return match[1], match[2], match[3], match[4]


def decode(ack_id: str) -> AckRef:
    tag, partition, offset, generation = _fields(ack_id)
    return AckRef(tag, int(partition, 16), int(offset, 16), int(generation, 16))


class Named(NamedTuple):
    """The ids of one call that name one partition, as columns: the ids as the client sent them,
    and the offset and the generation each names. A call holds up to thousands of ids: columns
    make no object per id, and each step takes the column it needs."""

    ids: list[str]
    offsets: list[int]
    generations: list[int]


# Every id of a call in one scan, one per line: `by_partition`. Ids hold no newline (checked), so
# each line is one id and matches at most once.
_find_ack_ids = re.compile(
    r"^([0-9a-f]{8})-([0-9a-f]{1,8})-([0-9a-f]{1,16})-([0-9a-f]{1,8})$", re.MULTILINE
).findall
# Partitions and generations are small: looked up, their hex parsed once here.
_SMALL_HEX = {f"{n:x}": n for n in range(256)}


def by_partition(ack_ids: Sequence[str], tag: str) -> dict[int, Named]:
    """`decode` of every id, by partition, in the call's order within each; ids whose tag is not
    `tag` (another subscription's, or an earlier incarnation's) are left out. A call's ids in one
    regex scan. MalformedAckId names the first id that is not one, whatever its tag."""
    if not ack_ids:
        return {}
    joined = "\n".join(ack_ids)
    found = _find_ack_ids(joined) if joined.count("\n") == len(ack_ids) - 1 else []
    if len(found) != len(ack_ids):
        found = [_fields(ack_id) for ack_id in ack_ids]  # one by one: raises for the first bad one
    small = _SMALL_HEX
    generations = [small[g] if g in small else int(g, 16) for _, _, _, g in found]
    if min(generations) < 1:
        raise MalformedAckId(next(a for a, g in zip(ack_ids, generations, strict=True) if g < 1))
    groups: dict[str, Named] = {}
    for ack_id, (t, p, o, _), gen in zip(ack_ids, found, generations, strict=True):
        if t != tag:
            continue
        named = groups.get(p)
        if named is None:
            named = groups[p] = Named([], [], [])
        named.ids.append(ack_id)
        named.offsets.append(int(o, 16))
        named.generations.append(gen)
    out: dict[int, Named] = {}
    for p, named in groups.items():
        partition = small[p] if p in small else int(p, 16)
        if partition in out:  # the same partition written two ways ("1", "01"): one group
            first = out[partition]
            first.ids.extend(named.ids)
            first.offsets.extend(named.offsets)
            first.generations.extend(named.generations)
        else:
            out[partition] = named
    return out


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
