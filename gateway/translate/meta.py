"""The gateway's own facts about each stored resource, typed per kind.

A resource's record in the resources topic (core/resources.py) holds the API's proto and a JSON
object `meta` of what the gateway needs besides: which Kafka topic a topic is, a subscription's
lease/ack log and consumer group, a snapshot's acknowledged ranges, an IAM policy. Spark's
readers (spark/subscription.py) read the same records, so the types live here, in the pure
layer both import.

The JSON form is the one every gateway version wrote: the same keys, and a field at its default
is left out (readers take a missing key as the default). Keys a newer gateway wrote that this
one does not know are kept in `extra` and written back unchanged, so an update made by an older
process during a rolling upgrade does not drop them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeVar

Kind = Literal["topic", "subscription", "snapshot", "schema", "schema_revision"]
# A snapshot's view of one partition of its subscription: {"w": watermark, "acked": [[start,
# end], ...]} (core/snapshots.py makes and reads it).
PartitionAcks = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class TopicMeta:
    KIND: ClassVar[Kind] = "topic"

    kafka_topic: str
    partitions: int
    # The Kafka topic existed before (label `kafka-topic`): deleting the topic keeps it.
    adopted: bool = False
    iam_policy: str = ""  # a serialized google.iam.v1.Policy, base64 (core/access.py)
    # schema_settings' first and last revision as their commit numbers (SchemaRevisionMeta.seq;
    # 0: no bound), so that a bound outlives the deletion of its revision (core/topic_schemas.py)
    schema_first_seq: int = 0
    schema_last_seq: int = 0
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionMeta:
    KIND: ClassVar[Kind] = "subscription"

    uid: str  # tells apart subscriptions that had the same name, in log and group names
    kafka_topic: str
    partitions: int
    log_topic: str  # the lease/ack log (docs/lease-log.md)
    group_id: str
    created_ms: int = 0
    last_active_ms: int = 0  # 0: no activity recorded since it was created
    epoch: int = 0  # raised by every Seek: log commands of older epochs are ignored
    detached: bool = False
    topic_deleted: bool = False
    iam_policy: str = ""
    # Settings of the seed's early API (tech.pubsub, docs/legacy-api.md) that v1 has no field for.
    legacy_query: str = ""  # the label query as given; its v1 translation is the filter
    legacy_push_endpoint: str = ""  # host:port of a PushEndpointService (gRPC push); "": none
    legacy_truncate_max_bytes: int = 0  # TruncationPolicy.max_bytes; 0: not set
    legacy_truncate_max_age_seconds: int = 0  # TruncationPolicy.max_age_seconds; 0: not set
    # Truncation events (core/truncation.py, docs/truncation.md): how many were raised, and the
    # highest number acknowledged. One is pending while raised > acked; several coalesce.
    legacy_truncations: int = 0
    legacy_truncations_acked: int = 0
    # An explicit truncation's event is held until every partition's owner has taken the new
    # epoch (the truncating process then clears the hold), or, should that process die first,
    # until the time given: the epoch it waits for, and until when (wall-clock ms). 0: no hold.
    legacy_truncation_hold_epoch: int = 0
    legacy_truncation_hold_until_ms: int = 0
    # The pending event's lease, held in the record so that every process honours it: the
    # event's number and until when (wall-clock ms). 0: not leased.
    legacy_truncation_lease: int = 0
    legacy_truncation_lease_until_ms: int = 0
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def applied_group(self) -> str:
        """The consumer group whose committed offsets on the lease/ack log say how far each
        partition's owner has applied it (docs/spark.md: a Spark ack waits for them)."""
        return applied_group(self.group_id)

    @property
    def delivers(self) -> bool:
        """Whether it may still deliver: not detached, and its topic not deleted."""
        return not (self.detached or self.topic_deleted)

    @property
    def truncation_pending(self) -> int:
        """The number of the pending truncation event (the latest raised), 0 when none is."""
        return self.legacy_truncations if self.legacy_truncations > self.legacy_truncations_acked else 0

    def truncation_to_deliver(self, now_ms: int) -> int:
        """The number of the pending truncation event if it may be handed out at `now_ms`: not
        held for its epoch (see legacy_truncation_hold_epoch), not leased out; else 0."""
        seq = self.truncation_pending
        if not seq:
            return 0
        if self.legacy_truncation_hold_epoch and now_ms < self.legacy_truncation_hold_until_ms:
            return 0
        if self.legacy_truncation_lease == seq and now_ms < self.legacy_truncation_lease_until_ms:
            return 0
        return seq

    @property
    def active_ms(self) -> int:
        """When it was last active (its creation, if nothing since), for expiration."""
        return self.last_active_ms or self.created_ms


def applied_group(group_id: str) -> str:
    """SubscriptionMeta.applied_group of a subscription's consumer group."""
    return f"{group_id}.applied"


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotMeta:
    KIND: ClassVar[Kind] = "snapshot"

    kafka_topic: str
    # Per partition number (as a string, as JSON keys are), what was acknowledged: stored under
    # the key "partitions", as the first gateway named it.
    acks: Mapping[str, PartitionAcks]
    iam_policy: str = ""
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaMeta:
    """A schema's own record (`schema/projects/P/schemas/S`): small, whatever its revisions
    hold. Its revisions are records of their own (`SchemaRevisionMeta`), one per revision, so
    that 20 revisions of 300 KB each stay within Kafka's 1 MB record limit; this record says
    which of them make the schema, oldest first, and is changed by compare-and-set
    (`ResourceStore.replace`), so that concurrent commits and deletions through any process
    are decided by log order. Counting these records counts schemas, not revisions."""

    KIND: ClassVar[Kind] = "schema"

    uid: str  # tells apart schemas that had the same name: revision records carry it
    revisions: tuple[str, ...]  # revision ids, oldest first; the last is the latest
    commits: int = 0  # revisions ever committed: the sequence number of the latest
    iam_policy: str = ""
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaRevisionMeta:
    """One revision of a schema (`schema_revision/projects/P/schemas/S@R`); the proto holds its
    type, definition, id and creation time. A revision counts only while its schema's record
    (of the same `schema_uid`) lists it: records left behind by an interrupted write are ignored."""

    KIND: ClassVar[Kind] = "schema_revision"

    schema_uid: str
    seq: int  # its place among the schema's commits (1, 2, ...): ListSchemaRevisions' order
    iam_policy: str = ""  # unused: policies are the schema's (every kind has the field)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


Meta = TopicMeta | SubscriptionMeta | SnapshotMeta | SchemaMeta | SchemaRevisionMeta
M = TypeVar("M", TopicMeta, SubscriptionMeta, SnapshotMeta, SchemaMeta, SchemaRevisionMeta)
_TYPES: dict[str, type[Meta]] = {
    "topic": TopicMeta,
    "subscription": SubscriptionMeta,
    "snapshot": SnapshotMeta,
    "schema": SchemaMeta,
    "schema_revision": SchemaRevisionMeta,
}
# Field name -> JSON key, where they differ.
_RENAMED: dict[str, str] = {"acks": "partitions"}


def _fields(cls: type[Meta]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.name != "extra"]


def to_json(meta: Meta) -> dict[str, Any]:
    """The record's `meta` object: every field not at its default, and the kept unknown keys."""
    out: dict[str, Any] = dict(meta.extra)
    for f in _fields(type(meta)):
        value = getattr(meta, f.name)
        if f.default is dataclasses.MISSING or value != f.default:
            if isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[_RENAMED.get(f.name, f.name)] = value
    return out


def from_json(kind: str, raw: Mapping[str, Any]) -> Meta:
    """A record's `meta` object as the typed record of its kind. KeyError names a missing
    required key; ValueError a value of the wrong type, or an unknown kind."""
    cls = _TYPES.get(kind)
    if cls is None:
        raise ValueError(f"unknown resource kind {kind!r}")
    return _parse(cls, raw)


def parse(cls: type[M], raw: Mapping[str, Any]) -> M:
    """`raw` as a record of `cls` (see from_json)."""
    return _parse(cls, raw)  # type: ignore[return-value]


def _parse(cls: type[Meta], raw: Mapping[str, Any]) -> Meta:
    known: dict[str, Any] = {}
    taken = set()
    for f in _fields(cls):
        key = _RENAMED.get(f.name, f.name)
        taken.add(key)
        if key not in raw:
            if f.default is dataclasses.MISSING:
                raise KeyError(key)
            continue
        known[f.name] = _typed(f, raw[key])
    extra = {k: v for k, v in raw.items() if k not in taken}
    return cls(**known, extra=extra)


def _typed(f: dataclasses.Field[Any], value: Any) -> Any:
    """The stored value as the field's type: ints may have been written as strings or floats by
    hand-made records, and booleans as 0/1. Anything else is a ValueError."""
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    if kind == "bool":
        if isinstance(value, (bool, int)):
            return bool(value)
    elif kind == "int":
        if isinstance(value, bool):
            raise ValueError(f"{f.name}: expected a number, got {value!r}")
        return int(value)
    elif kind == "str":
        if isinstance(value, str):
            return value
    elif kind == "tuple[str, ...]":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
    elif isinstance(value, Mapping):
        return dict(value)
    raise ValueError(f"{f.name}: expected {kind}, got {value!r}")
