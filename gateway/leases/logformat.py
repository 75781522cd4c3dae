"""The lease/ack log's record format (documented in docs/lease-log.md).

Keys are ASCII: `s.<partition>.<epoch>` for a partition's checkpoint (one live key per partition) and
`e.<partition>.<writer>.<seq>` for a command not yet folded into a checkpoint; the owner
tombstones folded command keys, so once all is acked the log holds one live key per partition.
Values are compact JSON objects, so that Spark SQL's `from_json` can decode them without a UDF:

    {"v":1,"type":"ack","p":0,"epoch":0,"ranges":[[10,20]]}
    {"v":1,"type":"lease","p":0,"epoch":0,"deadline":1700000000000,"entries":[[12,1]]}
    {"v":1,"type":"deadline","p":0,"epoch":0,"deadline":1700000000000,"entries":[[12,1]]}
    {"v":1,"type":"checkpoint","p":0,"epoch":0,"watermark":10,"acked":[[11,12]],"log_offset":57,
     "lease_runs":[[12,14,1,1700000000000]],"attempt_runs":[[12,14,1]]}

A checkpoint's `lease_runs` and `attempt_runs` are [start, end, ...] runs: every offset in
[start, end) that is not acked has that lease or delivery count. Checkpoints of the first
format, with one `leases` [offset, generation, deadline] / `attempts` [offset, n] entry per
offset, are still read. `log_offset`, when the owner knows it: every command at a lower offset
of the log partition is folded into this checkpoint, so readers may start there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from gateway.leases.commands import Ack, Checkpoint, Command, Lease, SetDeadline

# The names of the format, for every reader and writer of the log (spark/ reads through them).
VERSION: Final = 1

KEY_SEPARATOR: Final = "."
CHECKPOINT_KEY_PREFIX: Final = "s" + KEY_SEPARATOR  # s.<partition>.<epoch>
COMMAND_KEY_PREFIX: Final = "e" + KEY_SEPARATOR  # e.<partition>.<writer>.<seq>
CHECKPOINT_KEY_EPOCH: Final = 2  # where <epoch> is in a checkpoint key split at KEY_SEPARATOR

TYPE_ACK: Final = "ack"
TYPE_LEASE: Final = "lease"
TYPE_DEADLINE: Final = "deadline"
TYPE_CHECKPOINT: Final = "checkpoint"

FIELD_VERSION: Final = "v"
FIELD_TYPE: Final = "type"
FIELD_PARTITION: Final = "p"
FIELD_EPOCH: Final = "epoch"
FIELD_RANGES: Final = "ranges"  # ack
FIELD_DEADLINE: Final = "deadline"  # lease, deadline
FIELD_ENTRIES: Final = "entries"  # lease, deadline
FIELD_WATERMARK: Final = "watermark"  # checkpoint: these five
FIELD_ACKED: Final = "acked"
FIELD_LOG_OFFSET: Final = "log_offset"
FIELD_LEASE_RUNS: Final = "lease_runs"
FIELD_ATTEMPT_RUNS: Final = "attempt_runs"
FIELD_LEASES: Final = "leases"  # the first checkpoint format, still read
FIELD_ATTEMPTS: Final = "attempts"

# encode writes a checkpoint's runs last, and each field of runs (`lease_runs`, or the first
# format's `leases`) starts with `,"lease`: the text before this mark, closed with "}", holds
# every other field of the checkpoint, so a reader that needs none of the runs can leave their
# bulk undecoded (spark/acklog.py).
CHECKPOINT_RUNS_MARK: Final = ',"lease'

# Each field's type in Spark SQL, for readers that decode values with `from_json`.
SPARK_TYPES: Final[Mapping[str, str]] = {
    FIELD_VERSION: "INT",
    FIELD_TYPE: "STRING",
    FIELD_PARTITION: "INT",
    FIELD_EPOCH: "BIGINT",
    FIELD_RANGES: "ARRAY<ARRAY<BIGINT>>",
    FIELD_DEADLINE: "BIGINT",
    FIELD_ENTRIES: "ARRAY<ARRAY<BIGINT>>",
    FIELD_WATERMARK: "BIGINT",
    FIELD_ACKED: "ARRAY<ARRAY<BIGINT>>",
    FIELD_LOG_OFFSET: "BIGINT",
    FIELD_LEASE_RUNS: "ARRAY<ARRAY<BIGINT>>",
    FIELD_ATTEMPT_RUNS: "ARRAY<ARRAY<BIGINT>>",
    FIELD_LEASES: "ARRAY<ARRAY<BIGINT>>",
    FIELD_ATTEMPTS: "ARRAY<ARRAY<BIGINT>>",
}


def spark_ddl(*fields: str) -> str:
    """The Spark SQL DDL of `fields` (a schema for `from_json`), in that order."""
    return ", ".join(f"{f} {SPARK_TYPES[f]}" for f in fields)


# What a reader of acknowledgements decodes: the record's version, type and epoch, an ack's
# ranges, a checkpoint's watermark and acked ranges. Not `p` (the log partition is the source
# partition), nor a checkpoint's `log_offset` and runs.
ACKED_FIELDS: Final = (FIELD_VERSION, FIELD_TYPE, FIELD_EPOCH, FIELD_WATERMARK, FIELD_ACKED, FIELD_RANGES)
ACKED_SPARK_DDL: Final = spark_ddl(*ACKED_FIELDS)

_CHECKPOINT_KEY_PREFIX: Final = CHECKPOINT_KEY_PREFIX.encode()
_COMMAND_KEY_PREFIX: Final = COMMAND_KEY_PREFIX.encode()


class BadLogRecord(ValueError):
    """A log value this version cannot read."""


def checkpoint_key(partition: int, epoch: int = 0) -> bytes:
    """One live key per partition and epoch; a seek starts a new epoch under a new key, so a
    late checkpoint of the old epoch can never replace it in compaction."""
    return f"{CHECKPOINT_KEY_PREFIX}{partition}{KEY_SEPARATOR}{epoch}".encode()


def is_checkpoint_key(key: bytes) -> bool:
    return key.startswith(_CHECKPOINT_KEY_PREFIX)


def command_key(partition: int, writer: str, seq: int) -> bytes:
    return f"{COMMAND_KEY_PREFIX}{partition}{KEY_SEPARATOR}{writer}{KEY_SEPARATOR}{seq}".encode()


def command_prefix(partition: int) -> bytes:
    """What every command key of the partition starts with."""
    return f"{COMMAND_KEY_PREFIX}{partition}{KEY_SEPARATOR}".encode()


def is_command_key(key: bytes) -> bool:
    return key.startswith(_COMMAND_KEY_PREFIX)


def encode(cmd: Command) -> bytes:
    body: dict[str, Any]
    match cmd:
        case Ack():
            body = {FIELD_TYPE: TYPE_ACK, FIELD_RANGES: cmd.ranges}
        case Lease():
            body = {FIELD_TYPE: TYPE_LEASE, FIELD_DEADLINE: cmd.deadline_ms, FIELD_ENTRIES: cmd.entries}
        case SetDeadline():
            body = {FIELD_TYPE: TYPE_DEADLINE, FIELD_DEADLINE: cmd.deadline_ms, FIELD_ENTRIES: cmd.entries}
        case Checkpoint():
            body = {FIELD_TYPE: TYPE_CHECKPOINT, FIELD_WATERMARK: cmd.watermark, FIELD_ACKED: cmd.acked}
            if cmd.log_offset >= 0:
                body[FIELD_LOG_OFFSET] = cmd.log_offset
            body[FIELD_LEASE_RUNS] = cmd.leases  # the runs last: CHECKPOINT_RUNS_MARK
            body[FIELD_ATTEMPT_RUNS] = cmd.attempts
    # orjson: the same compact JSON as json.dumps with separators (",", ":"), ~10x faster; every
    # delivery and deadline change is encoded here, one [offset, generation] pair per message.
    return orjson.dumps(
        {FIELD_VERSION: VERSION, FIELD_PARTITION: cmd.partition, FIELD_EPOCH: cmd.epoch, **body}
    )


def _int(x: Any) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise BadLogRecord(f"expected an integer, got {x!r}")
    return x


def _pairs(raw: Any) -> tuple[tuple[int, int], ...]:
    if not isinstance(raw, list) or not all(isinstance(p, list) and len(p) == 2 for p in raw):
        raise BadLogRecord("expected a list of [integer, integer] pairs")
    return tuple((_int(a), _int(b)) for a, b in raw)


def decode(value: bytes) -> Command:
    try:
        d = orjson.loads(value)  # NaN and Infinity are no JSON to it: refused, as they must be
        if not isinstance(d, dict):
            raise BadLogRecord("a lease-log value must be a JSON object")
        if d.get(FIELD_VERSION) != VERSION:
            raise BadLogRecord(f"unknown lease-log version {d.get(FIELD_VERSION)!r}")
        p, epoch, kind = int(d[FIELD_PARTITION]), int(d.get(FIELD_EPOCH, 0)), d[FIELD_TYPE]
        if kind == TYPE_ACK:
            return Ack(p, _pairs(d[FIELD_RANGES]), epoch)
        if kind == TYPE_LEASE:
            return Lease(p, _pairs(d[FIELD_ENTRIES]), int(d[FIELD_DEADLINE]), epoch)
        if kind == TYPE_DEADLINE:
            return SetDeadline(p, _pairs(d[FIELD_ENTRIES]), int(d[FIELD_DEADLINE]), epoch)
        if kind == TYPE_CHECKPOINT:
            if FIELD_LEASE_RUNS in d:
                leases = tuple((_int(s), _int(e), _int(g), _int(t)) for s, e, g, t in d[FIELD_LEASE_RUNS])
                attempts = tuple((_int(s), _int(e), _int(n)) for s, e, n in d[FIELD_ATTEMPT_RUNS])
            else:  # the first format: one entry per offset
                leases = tuple((_int(o), _int(o) + 1, _int(g), _int(t)) for o, g, t in d[FIELD_LEASES])
                attempts = tuple((o, o + 1, n) for o, n in _pairs(d[FIELD_ATTEMPTS]))
            return Checkpoint(
                p,
                int(d[FIELD_WATERMARK]),
                _pairs(d[FIELD_ACKED]),
                leases,
                attempts,
                epoch,
                _int(d.get(FIELD_LOG_OFFSET, -1)),
            )
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise BadLogRecord(f"unreadable lease-log record: {exc}") from exc
    raise BadLogRecord(f"unknown lease-log record type {kind!r}")
