"""Truncation of the seed's early API (tech.pubsub): TruncateSubscription, the TruncationPolicy
and the truncation events they deliver (docs/truncation.md).

The interface, for the legacy servicers (gateway/legacy) and the gRPC push dispatcher:

- `await truncate(subscription)`: drop the whole pending backlog and raise one truncation
  event, in one compare-and-set write of the subscription's record (a new epoch of the lease/ack
  log, whose checkpoints start every partition at its end, like a Seek to the end; the event's
  count is raised in the same write). Messages published after it returns are delivered.
- `take_event(subscription, deadline_s) -> str | None`: the ack id of the pending truncation
  event, now leased to the caller for `deadline_s` seconds; None when there is none, or when it
  is leased (by this process) to someone else. Call it before taking messages, and deliver the
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
into one, the latest), so any process can deliver and ack it. Its lease is in this process's
memory only: another process may deliver it meanwhile, which at-least-once delivery allows.
v1 clients never see events: nothing of this reaches DeliveryService's Pull or StreamingPull.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence

from gateway.clock import now_ms
from gateway.core.resources import AnyResource, ResourceStore, StoredSubscription
from gateway.core.snapshots import SnapshotService
from gateway.errors import FailedPrecondition, InvalidArgument, NotFound
from gateway.kafka.admin import Admin
from gateway.translate import ackids, limits, names
from gateway.translate.meta import Kind, SubscriptionMeta

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class _Lease:
    uid: str
    seq: int
    deadline_ms: int


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
        self._leases: dict[str, _Lease] = {}  # subscription -> the event leased by this process
        store.subscribe(self._on_resource_change)

    def _on_resource_change(self, kind: Kind, name: str, res: AnyResource | None) -> None:
        """A deleted subscription's lease goes with it (a re-created one has another uid)."""
        if kind == "subscription" and res is None:
            self._leases.pop(name, None)

    def _subscription(self, name: str) -> StoredSubscription:
        names.subscription(name)
        return self._store.require("subscription", name)

    # -- raising ---------------------------------------------------------------------------

    async def truncate(self, subscription: str) -> None:
        """Drop the subscription's pending backlog and raise a truncation event."""
        sub = self._subscription(subscription)
        if sub.meta.topic_deleted or sub.proto.topic == names.DELETED_TOPIC:
            raise FailedPrecondition(f"The topic of this subscription was deleted (resource={subscription})")
        ends = await self._admin.end_offsets(sub.meta.kafka_topic, sub.meta.partitions)
        epoch = await self._snapshots.start_epoch(sub, {p: (end, ()) for p, end in ends.items()}, _raised)
        log.info("%s: truncated at %s (epoch %d)", subscription, ends, epoch)

    async def raise_event(self, subscription: str) -> None:
        """Raise a truncation event (the policy dropped messages). A subscription deleted
        meanwhile has nothing to raise it on."""
        try:
            await self._store.change_subscription(subscription, _raised)
        except NotFound:
            return

    # -- delivering ------------------------------------------------------------------------

    def pending(self, subscription: str) -> int:
        """The number of the pending event (0: none). NOT_FOUND for no such subscription."""
        return self._subscription(subscription).meta.truncation_pending

    def take_event(self, subscription: str, deadline_s: int) -> str | None:
        """The ack id of the pending event, leased to the caller for `deadline_s` seconds, or
        None (nothing pending, or leased out by this process until its deadline)."""
        # 0: the default ack deadline; otherwise what ModifyAckDeadline accepts (up to 600 s)
        deadline_s = limits.ack_deadline(0) if deadline_s == 0 else limits.modify_deadline(deadline_s)
        sub = self._subscription(subscription)
        seq = sub.meta.truncation_pending
        if not seq:
            self._leases.pop(subscription, None)
            return None
        now = now_ms()
        lease = self._leases.get(subscription)
        if lease is not None and (lease.uid, lease.seq) == (sub.meta.uid, seq) and lease.deadline_ms > now:
            return None
        self._leases[subscription] = _Lease(sub.meta.uid, seq, now + deadline_s * 1000)
        return ackids.encode_event(sub.meta.uid, seq)

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
        if deadline_s is not None:
            lease = self._leases.get(subscription)
            if lease is not None and lease.uid == sub.meta.uid and lease.seq in mine:
                if deadline_s == 0:
                    del self._leases[subscription]
                else:
                    self._leases[subscription] = dataclasses.replace(
                        lease, deadline_ms=now_ms() + deadline_s * 1000
                    )
            return
        await self._ack(sub, max(mine))

    async def _ack(self, sub: StoredSubscription, seq: int) -> None:
        uid = sub.meta.uid

        def acked(meta: SubscriptionMeta) -> SubscriptionMeta | None:
            if meta.uid != uid:
                return None  # deleted and re-created meanwhile: the id is stale
            upto = min(seq, meta.legacy_truncations)
            if upto <= meta.legacy_truncations_acked:
                return None  # acked already, or a stale id: nothing changes
            return dataclasses.replace(meta, legacy_truncations_acked=upto)

        try:
            stored = await self._store.change_subscription(sub.name, acked)
        except NotFound:
            return
        lease = self._leases.get(sub.name)
        if lease is not None and lease.uid == uid and lease.seq <= stored.meta.legacy_truncations_acked:
            del self._leases[sub.name]


def _raised(meta: SubscriptionMeta) -> SubscriptionMeta:
    return dataclasses.replace(meta, legacy_truncations=meta.legacy_truncations + 1)
