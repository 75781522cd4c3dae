"""The commands that change delivery state: small frozen values, applied in one place.

Each command is also what one record of the lease/ack log carries (see `logformat`), so a
partition's state is the fold of its log, and any gateway process can write a command that the
partition's owner then applies. `epoch` orders a subscription's history: a seek starts a new
epoch, and commands of an older epoch are ignored.
"""

from __future__ import annotations

import dataclasses

from gateway.leases.ranges import Range

# The values commands carry are plain tuples, named here: a command is encoded as it is
# (logformat.encode), and orjson refuses named tuples. Any tuple of the right shape will do.
LeaseRef = tuple[int, int]  # (offset, generation): one delivery of a message, as its ack id names it
LeaseRun = tuple[int, int, int, int]  # (start, end, generation, deadline_ms)
AttemptRun = tuple[int, int, int]  # (start, end, deliveries)


@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    """Offsets acknowledged (ranges, half-open). Acks are final, whatever the generation."""

    partition: int
    ranges: tuple[Range, ...]
    epoch: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Lease:
    """Offsets delivered: each (offset, generation) leased until deadline_ms."""

    partition: int
    entries: tuple[LeaseRef, ...]
    deadline_ms: int
    epoch: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class SetDeadline:
    """ModifyAckDeadline: the lease of (offset, generation) now ends at deadline_ms.

    A deadline at or before now is a nack: the message is redeliverable at once. Entries whose
    generation is not the current lease's are stale and change nothing.
    """

    partition: int
    entries: tuple[LeaseRef, ...]
    deadline_ms: int
    epoch: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    """A partition's whole state above its watermark, written by the partition's owner.

    Applying a checkpoint merges it (acks are unions, attempts maxima), so a command written
    before a checkpoint but folded into none is never undone by it.
    """

    partition: int
    watermark: int
    acked: tuple[Range, ...]
    # Runs: every offset in [start, end) that is not acked has this lease or delivery count.
    # A run may span acked offsets, so a few random acks do not split a pull's leases into
    # many entries (the checkpoint's size follows the pulls, not the messages).
    leases: tuple[LeaseRun, ...]
    attempts: tuple[AttemptRun, ...]  # of delivered offsets
    epoch: int = 0
    # Every command below this lease-log offset is folded into the checkpoint (-1: unknown), so
    # a reader of the log needs the checkpoint and the commands from here on, not the history.
    log_offset: int = -1


Command = Ack | Lease | SetDeadline | Checkpoint
