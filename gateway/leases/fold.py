"""Rebuilding a partition's delivery state from its lease/ack log."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Generic, NamedTuple, TypeVar

from gateway.leases import logformat
from gateway.leases.state import PartitionState

log = logging.getLogger(__name__)
R = TypeVar("R")


class Folded(NamedTuple, Generic[R]):
    """What `fold` rebuilds of a partition from its lease/ack log."""

    state: PartitionState[R]
    # The keys the next checkpoint may tombstone: every command key, and the checkpoint keys
    # of epochs before the last seek.
    folded: set[bytes]


def fold(
    partition: int,
    committed: int,
    entries: Iterable[tuple[bytes | None, bytes | None]],
    now_ms: int,
    key_of: Callable[[R], bytes | None] | None = None,
) -> Folded[R]:
    """The state the log describes, and the keys the next checkpoint may tombstone (`entries`:
    (key, value) of each log record, in log order)."""
    state: PartitionState[R] = PartitionState(partition, committed, key_of=key_of)
    folded: set[bytes] = set()
    checkpoints: set[bytes] = set()
    for key, value in entries:
        if key is None or value is None:
            continue
        try:
            state.apply(logformat.decode(value), now_ms)
        except logformat.BadLogRecord:
            log.exception("skipping unreadable lease-log record %r of partition %d", key, partition)
        if logformat.is_command_key(key):
            folded.add(key)
        elif logformat.is_checkpoint_key(key):
            checkpoints.add(key)
    folded |= checkpoints - {logformat.checkpoint_key(partition, state.epoch)}
    return Folded(state, folded)
