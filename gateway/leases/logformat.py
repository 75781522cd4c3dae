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

from typing import Any

import orjson

from gateway.leases.commands import Ack, Checkpoint, Command, Lease, SetDeadline

VERSION = 1


class BadLogRecord(ValueError):
    """A log value this version cannot read."""


def checkpoint_key(partition: int, epoch: int = 0) -> bytes:
    """One live key per partition and epoch; a seek starts a new epoch under a new key, so a
    late checkpoint of the old epoch can never replace it in compaction."""
    return f"s.{partition}.{epoch}".encode()


def is_checkpoint_key(key: bytes) -> bool:
    return key.startswith(b"s.")


def command_key(partition: int, writer: str, seq: int) -> bytes:
    return f"e.{partition}.{writer}.{seq}".encode()


def command_prefix(partition: int) -> bytes:
    """What every command key of the partition starts with."""
    return f"e.{partition}.".encode()


def is_command_key(key: bytes) -> bool:
    return key.startswith(b"e.")


def encode(cmd: Command) -> bytes:
    body: dict[str, Any]
    match cmd:
        case Ack():
            body = {"type": "ack", "ranges": cmd.ranges}
        case Lease():
            body = {"type": "lease", "deadline": cmd.deadline_ms, "entries": cmd.entries}
        case SetDeadline():
            body = {"type": "deadline", "deadline": cmd.deadline_ms, "entries": cmd.entries}
        case Checkpoint():
            body = {"type": "checkpoint", "watermark": cmd.watermark, "acked": cmd.acked}
            if cmd.log_offset >= 0:
                body["log_offset"] = cmd.log_offset
            body["lease_runs"] = cmd.leases
            body["attempt_runs"] = cmd.attempts
    # orjson: the same compact JSON as json.dumps with separators (",", ":"), ~10x faster; every
    # delivery and deadline change is encoded here, one [offset, generation] pair per message.
    return orjson.dumps({"v": VERSION, "p": cmd.partition, "epoch": cmd.epoch, **body})


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
        if d.get("v") != VERSION:
            raise BadLogRecord(f"unknown lease-log version {d.get('v')!r}")
        p, epoch, kind = int(d["p"]), int(d.get("epoch", 0)), d["type"]
        if kind == "ack":
            return Ack(p, _pairs(d["ranges"]), epoch)
        if kind == "lease":
            return Lease(p, _pairs(d["entries"]), int(d["deadline"]), epoch)
        if kind == "deadline":
            return SetDeadline(p, _pairs(d["entries"]), int(d["deadline"]), epoch)
        if kind == "checkpoint":
            if "lease_runs" in d:
                leases = tuple((_int(s), _int(e), _int(g), _int(t)) for s, e, g, t in d["lease_runs"])
                attempts = tuple((_int(s), _int(e), _int(n)) for s, e, n in d["attempt_runs"])
            else:  # the first format: one entry per offset
                leases = tuple((_int(o), _int(o) + 1, _int(g), _int(t)) for o, g, t in d["leases"])
                attempts = tuple((o, o + 1, n) for o, n in _pairs(d["attempts"]))
            return Checkpoint(
                p,
                int(d["watermark"]),
                _pairs(d["acked"]),
                leases,
                attempts,
                epoch,
                _int(d.get("log_offset", -1)),
            )
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise BadLogRecord(f"unreadable lease-log record: {exc}") from exc
    raise BadLogRecord(f"unknown lease-log record type {kind!r}")
