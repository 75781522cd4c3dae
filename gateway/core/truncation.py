"""Truncation of the seed's early API (tech.pubsub): TruncateSubscription, the TruncationPolicy
and the truncation events they deliver (docs/truncation.md).

The interface, for the legacy servicers (gateway/legacy) and the gRPC push dispatcher:

- `await truncate(subscription)`: drop the whole pending backlog and raise one truncation
  event, in one compare-and-set write of the subscription's record (a new epoch of the lease/ack
  log, whose checkpoints start every partition at its end, like a Seek to the end; the event's
  count is raised in the same write). It returns once every partition's owner has taken up the
  new epoch, and holds the event until then: nothing published before the call is delivered
  after the event. Messages published after it returns are delivered.
- `await take_event(subscription, deadline_s) -> str | None`: the ack id of the pending
  truncation event, now leased to the caller for `deadline_s` seconds; None when there is none,
  when its truncation is not yet taken up by every partition's owner, or when it is leased (by
  any process) to someone else. Call it before taking messages, and deliver the
  event first (PubsubEvent.truncated = true, with this ack id).
- `is_event_ack_id(ack_id)` / `split_ack_ids(ack_ids)`: which ids are events' (the others go to
  DeliveryService as v1 ids).
- `await settle(subscription, event_ack_ids, deadline_s)`: Acknowledge (deadline_s None),
  ModifyAckDeadline (seconds) or Nack (0) of event ids. Acking the pending event's id, or of a
  later one, clears it; acking a stale id (an older event, or of an earlier subscription of that
  name) succeeds and changes nothing. A malformed event id is INVALID_ARGUMENT.
- `await raise_event(subscription)`: the truncation policy dropped messages (called by runners
  through DeliveryService.on_truncated).

The event is durable in the subscription's record (`SubscriptionMeta.legacy_truncations` raised,
`legacy_truncations_acked`: pending while raised > acked; several raised before an ack coalesce
into one, the latest), so any process can deliver and ack it; so is its lease, changed by
compare-and-set like every change of the record, so no process hands it out while another's
lease of it runs.
v1 clients never see events: nothing of this reaches DeliveryService's Pull or StreamingPull.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Iterable, Sequence

from gateway.clock import now_ms
from gateway.core.lease_log import Position
from gateway.core.resources import ResourceStore, StoredSubscription
from gateway.core.snapshots import ADOPT_WAIT_SECONDS, SnapshotService
from gateway.errors import FailedPrecondition, InvalidArgument, NotFound
from gateway.kafka.admin import Admin
from gateway.translate import ackids, limits, names
from gateway.translate.meta import SubscriptionMeta

log = logging.getLogger(__name__)
# An explicit truncation's event is held while its epoch is taken up by the owners; should the
# truncating process die meanwhile, the hold ends this long after that wait would have given up.
HOLD_MARGIN_SECONDS = 10.0


def is_event_ack_id(ack_id: str) -> bool:
    """Whether `ack_id` is a truncation event's (or claims to be: settle judges it)."""
    return ackids.is_event_id(ack_id)


def split_ack_ids(ack_ids: Iterable[str]) -> tuple[list[str], list[str]]:
    """(truncation events' ids, the others: messages' v1 ids), in their order."""
    events: list[str] = []
    others: list[str] = []
    for ack_id in ack_ids:
        (events if is_event_ack_id(ack_id) else others).append(ack_id)
    return events, others


class TruncationService:
    def __init__(self, store: ResourceStore, admin: Admin, snapshots: SnapshotService) -> None:
        self._store = store
        self._admin = admin
        self._snapshots = snapshots

    def _subscription(self, name: str) -> StoredSubscription:
        names.subscription(name)
        return self._store.require("subscription", name)

    # -- raising ---------------------------------------------------------------------------

    async def truncate(self, subscription: str) -> None:
        """Drop the subscription's pending backlog and raise a truncation event. Returns once
        every partition's owner delivers from the new epoch only (SnapshotService.start_epoch);
        the event is held until then, so that nothing published before the call is delivered
        after the event, by any process."""
        sub = self._subscription(subscription)
        if sub.meta.topic_deleted or sub.proto.topic == names.DELETED_TOPIC:
            raise FailedPrecondition(f"The topic of this subscription was deleted (resource={subscription})")
        ends = await self._admin.end_offsets(sub.meta.kafka_topic, sub.meta.partitions)
        hold_until = now_ms() + int((ADOPT_WAIT_SECONDS + HOLD_MARGIN_SECONDS) * 1000)

        def raised_and_held(meta: SubscriptionMeta, epoch: int) -> SubscriptionMeta:
            return dataclasses.replace(
                _raised(meta), legacy_truncation_hold_epoch=epoch, legacy_truncation_hold_until_ms=hold_until
            )

        epoch = await self._snapshots.start_epoch(
            sub, {p: Position(end) for p, end in ends.items()}, raised_and_held
        )

        def released(meta: SubscriptionMeta) -> SubscriptionMeta | None:
            if meta.uid != sub.meta.uid or meta.legacy_truncation_hold_epoch != epoch:
                return None  # re-created, or a later truncation holds its own event
            return dataclasses.replace(
                meta, legacy_truncation_hold_epoch=0, legacy_truncation_hold_until_ms=0
            )

        with contextlib.suppress(NotFound):
            await self._store.change_subscription(subscription, released)
        log.info("%s: truncated at %s (epoch %d)", subscription, ends, epoch)

    async def raise_event(self, subscription: str) -> None:
        """Raise a truncation event (the policy dropped messages: their owner acked them before
        calling this, so the event needs no hold). A subscription deleted meanwhile has nothing
        to raise it on."""
        try:
            await self._store.change_subscription(subscription, _raised)
        except NotFound:
            return

    # -- delivering ------------------------------------------------------------------------

    def pending(self, subscription: str) -> int:
        """The number of the pending event (0: none). NOT_FOUND for no such subscription."""
        return self._subscription(subscription).meta.truncation_pending

    async def take_event(self, subscription: str, deadline_s: int) -> str | None:
        """The ack id of the pending event, leased to the caller for `deadline_s` seconds, or
        None: nothing pending, its truncation not yet taken by every owner, or leased out (by
        any process) until its deadline. The lease is a compare-and-set of the record."""
        # 0: the default ack deadline; otherwise what ModifyAckDeadline accepts (up to 600 s)
        deadline_s = limits.ack_deadline(0) if deadline_s == 0 else limits.modify_deadline(deadline_s)
        sub = self._subscription(subscription)
        now = now_ms()
        seq = sub.meta.truncation_to_deliver(now)
        if not seq:
            return None
        uid = sub.meta.uid
        won: list[bool] = []  # the decision of the last try: the one that was written

        def leased(meta: SubscriptionMeta) -> SubscriptionMeta | None:
            won[:] = [meta.uid == uid and meta.truncation_to_deliver(now) == seq]
            if not won[0]:
                return None  # taken meanwhile, acked, or superseded by a later event
            return dataclasses.replace(
                meta, legacy_truncation_lease=seq, legacy_truncation_lease_until_ms=now + deadline_s * 1000
            )

        try:
            await self._store.change_subscription(subscription, leased)
        except NotFound:
            return None
        return ackids.encode_event(uid, seq) if won and won[0] else None

    async def settle(self, subscription: str, ack_ids: Sequence[str], deadline_s: int | None) -> None:
        """Ack (deadline_s None), nack (0) or extend (seconds) the leases of event ack ids."""
        sub = self._subscription(subscription)
        if deadline_s is not None:
            limits.modify_deadline(deadline_s)
        refs = []
        for ack_id in ack_ids:
            try:
                refs.append(ackids.decode_event(ack_id))
            except ackids.MalformedAckId:
                raise InvalidArgument(f"Invalid ack ID: {ack_id[:80]!r} (ack_ids).") from None
        mine = [r.seq for r in refs if r.uid == sub.meta.uid]  # others: of an earlier incarnation
        if not mine:
            return
        uid = sub.meta.uid
        if deadline_s is None:
            change = functools.partial(_acked, uid, max(mine))
        else:
            until = now_ms() + deadline_s * 1000 if deadline_s else 0
            change = functools.partial(_lease_moved, uid, frozenset(mine), until)
        with contextlib.suppress(NotFound):
            await self._store.change_subscription(subscription, change)


def _raised(meta: SubscriptionMeta) -> SubscriptionMeta:
    return dataclasses.replace(meta, legacy_truncations=meta.legacy_truncations + 1)


def _acked(uid: str, seq: int, meta: SubscriptionMeta) -> SubscriptionMeta | None:
    """Events up to `seq` acknowledged; None when that changes nothing (acked already, a stale
    id, or of an earlier subscription of the name)."""
    if meta.uid != uid:
        return None
    upto = min(seq, meta.legacy_truncations)
    if upto <= meta.legacy_truncations_acked:
        return None
    meta = dataclasses.replace(meta, legacy_truncations_acked=upto)
    if meta.legacy_truncation_lease > upto:  # a later event's lease stays
        return meta
    return dataclasses.replace(meta, legacy_truncation_lease=0, legacy_truncation_lease_until_ms=0)


def _lease_moved(
    uid: str, seqs: frozenset[int], until_ms: int, meta: SubscriptionMeta
) -> SubscriptionMeta | None:
    """The event's lease moved to `until_ms` (0: ended, a nack) when one of `seqs` is the event
    leased now; anything else changes nothing (a stale id, or nobody holds it)."""
    if meta.uid != uid or not meta.legacy_truncation_lease or meta.legacy_truncation_lease not in seqs:
        return None
    if meta.legacy_truncation_lease_until_ms == until_ms:
        return None
    return dataclasses.replace(meta, legacy_truncation_lease_until_ms=until_ms)
