"""Writing a subscription's lease/ack log: commands under keys unique to this process, and
deadline changes deferred to share the next write's produce request (docs/lease-log.md).

Part of the subscription's LeaseLog (gateway/core/lease_log.py), which alone writes with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import Iterator
from typing import NamedTuple

from gateway.kafka.producer import Producer
from gateway.leases import logformat
from gateway.leases.commands import Command

# How long a deadline change that need not be durable before OK (exactly-once off:
# docs/lease-log.md) may wait to be written: it goes with the subscription's next lease-log
# write from this process, or after this long. Each write that goes alone costs a produce
# request of its own, and a receipt modack comes a few milliseconds after the lease write of
# its delivery and shortly before the ack; deferred, it shares their request.
DEFER_SECONDS = 0.25


class Logged(NamedTuple):
    """A command in the log: its key and its offset in the log partition."""

    key: bytes
    offset: int


# One sequence for every LogWriter of the process: a subscription's runner stopped and started
# again writes under the same writer id, and must not write a key its earlier one wrote (a key
# not yet folded would lose its command to compaction).
_SEQ = itertools.count()


class LogWriter:
    """Writes commands to a subscription's lease/ack log, with keys unique to this process.

    `writing` holds the keys of commands this process writes and applies itself, from before
    they are sent until its LeaseLog folds them (`LeaseLog.claim`): the log's reader leaves
    them to the writer rather than apply them a second time when it reads them back first. A
    write that fails lets go of its keys, and so does a partition taken on anew (its new state
    did not apply them)."""

    def __init__(self, producer: Producer, log_topic: str, writer_id: str) -> None:
        self._producer = producer
        self.topic = log_topic
        self._writer = writer_id
        self.writing: set[bytes] = set()
        # Commands to write with the next write, by partition, in the order deferred, each with
        # the future its own (key, log offset) goes to (`defer`).
        self._deferred: dict[int, list[tuple[Command, asyncio.Future[list[Logged]]]]] = {}
        self._flush_at: asyncio.TimerHandle | None = None
        self._flushing: set[asyncio.Future[list[Logged]]] = set()

    def key(self, partition: int) -> bytes:
        return logformat.command_key(partition, self._writer, next(_SEQ))

    @contextlib.contextmanager
    def holding(self, keys: list[bytes]) -> Iterator[None]:
        """The keys are in `writing` from now on; if what writes them fails, they are let go."""
        self.writing.update(keys)
        try:
            yield
        except BaseException:
            self.writing.difference_update(keys)
            raise

    def defer(self, partition: int, cmd: Command) -> asyncio.Future[list[Logged]]:
        """Write `cmd` with this writer's next write, or within DEFER_SECONDS; the future has
        its (key, log offset) once it is durable. Only for what need not be durable before OK:
        a process that dies first loses it."""
        loop = asyncio.get_running_loop()
        written: asyncio.Future[list[Logged]] = loop.create_future()
        self._deferred.setdefault(partition, []).append((cmd, written))
        if self._flush_at is None:
            self._flush_at = loop.call_later(DEFER_SECONDS, self.flush)
        return written

    def _take_deferred(self) -> dict[int, list[tuple[Command, asyncio.Future[list[Logged]]]]]:
        """What is deferred, no longer waiting for its timer."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        deferred, self._deferred = self._deferred, {}
        return deferred

    def flush(self) -> None:
        """Start writing what is deferred: one write per partition, in the order deferred."""
        for p, entries in self._take_deferred().items():
            # (held here: the loop holds its tasks weakly)
            self._flushing.add(write := asyncio.ensure_future(self.write(p, [cmd for cmd, _ in entries])))
            write.add_done_callback(self._flushing.discard)
            write.add_done_callback(functools.partial(_hand_out, [w for _, w in entries]))

    def drop_deferred(self) -> None:
        """Forget what is deferred (the subscription is gone, and its log with it)."""
        for entries in self._take_deferred().values():
            for _, written in entries:
                written.cancel()

    async def write(self, partition: int, cmds: list[Command]) -> list[Logged]:
        """Write commands durably; returns (key, log offset) of each. What is deferred goes
        too, in a write of its own queued right after this one's records: within the
        producer's linger, so in the same request."""
        if self._deferred:
            self.flush()
        keys = [self.key(partition) for _ in cmds]
        records = [(k, logformat.encode(c), None) for k, c in zip(keys, cmds, strict=True)]
        with self.holding(keys):
            done = await self._producer.send(self.topic, records, partition=partition)
        return [Logged(k, off) for k, (_, off) in zip(keys, done, strict=True)]


def _hand_out(futures: list[asyncio.Future[list[Logged]]], write: asyncio.Future[list[Logged]]) -> None:
    """The outcome of a write of deferred commands, to each command's own future."""
    error = None if write.cancelled() else write.exception()
    for k, future in enumerate(futures):
        if future.done():
            continue
        if write.cancelled():
            future.cancel()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result([write.result()[k]])
