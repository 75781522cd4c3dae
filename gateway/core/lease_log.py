"""A subscription's lease/ack log as this process keeps it: its one owner (docs/lease-log.md).

A `LeaseLog` per subscription served here holds the delivery state of the partitions this
process owns and everything that reads or writes the log for them:

- writing: commands under keys of this process, deadline changes deferred (LogWriter);
- replay: a partition taken on is rebuilt from its log (`recover`, gateway/leases/fold.py);
- folding: what other processes write is read back and applied (`_apply_log`), what this
  process wrote and applied is not applied twice (`claim`), and folded keys are tombstoned
  with the next checkpoint;
- checkpoints, written every interval and when a partition is given up (`give_up`);
- epochs: a Seek, a create and a truncation start a partition's state anew with a checkpoint
  of a new epoch (`write_epoch`); the owner adopts it, and waits out a seeker that died;
- the log's half of the dead-letter transaction (`ack_in`).

The runner (runner.py) asks it for the states it delivers from and is told what it must act on
(`on_change`, `on_seek`, `on_checkpoint`); the ack path (acks.py) asks it to judge, write and
apply. Nothing else writes the log; Spark reads it through the same format (logformat.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from gateway.clock import now_ms
from gateway.core.log_writer import Logged as Logged
from gateway.core.log_writer import LogWriter
from gateway.kafka import consumer as kafka_consumer
from gateway.kafka.producer import Producer, TransactionalSender, TxnRecord
from gateway.leases import logformat
from gateway.leases.commands import Ack, Checkpoint, Command, LeaseRef
from gateway.leases.fold import fold
from gateway.leases.ranges import Range, to_ranges
from gateway.leases.state import AckOrder, PartitionState
from gateway.translate.meta import applied_group
from gateway.translate.records import Record

log = logging.getLogger(__name__)
# How long the lease-log reader, having found a record, gathers more before handing them over:
# what other processes write (acks, modacks, their leases) is applied within this, and a busy
# log is handed over ~10 times a second rather than per fetch (each hand-over wakes the loop).
LOG_LINGER_SECONDS = 0.1
# A Seek (or TruncateSubscription) raises the subscription's epoch in its record first and then
# writes the new epoch's checkpoints. A partition whose state is of an older epoch than the
# record's delivers nothing until its checkpoint is adopted. A seeker that died between the two
# writes leaves no checkpoint to come: its producer gives every write up after 30 s
# (delivery.timeout.ms), so after this long the owner carries on from its own state in the new
# epoch (the seek reached that partition no further than its record: docs/lease-log.md).
EPOCH_WAIT_SECONDS = 35.0


class Recovered(NamedTuple):
    """A partition's state as its log describes it, read when the partition is taken on."""

    state: PartitionState[Record]
    folded: set[bytes]  # keys the next checkpoint may tombstone
    log_end: int  # where the log partition ended: followed from there


class Position(NamedTuple):
    """Where a new epoch starts a partition: below `watermark` all is acked, and so are `acked`."""

    watermark: int
    acked: tuple[Range, ...] = ()


class ReadBack(NamedTuple):
    """A command the log reader met while this process was still writing it (`_settle_read_back`)."""

    offset: int
    key: bytes
    value: bytes


async def write_epoch(
    producer: Producer, log_topic: str, positions: dict[int, Position], epoch: int
) -> dict[int, int]:
    """A checkpoint of `epoch` at each partition's position: the start of a subscription (epoch
    0) or of a Seek's epoch. Returns log partition -> the checkpoint's offset there. The owners
    adopt them as they read them (LeaseLog._adopt_seek)."""

    async def one(p: int, at: Position) -> int:
        cp = Checkpoint(p, at.watermark, at.acked, (), (), epoch)
        [(_, offset)] = await producer.send(
            log_topic, [(logformat.checkpoint_key(p, epoch), logformat.encode(cp), None)], partition=p
        )
        return offset

    offsets = await asyncio.gather(*(one(p, at) for p, at in positions.items()))
    return dict(zip(positions, offsets, strict=True))


def _nothing(*_: object) -> None:
    pass


class LeaseLog:
    def __init__(
        self,
        *,
        name: str,
        writer: LogWriter,
        producer: Producer,
        kafka_config: dict[str, Any],
        group_id: str,
        checkpoint_interval: float,
        key_of: Callable[[Record], bytes | None] | None = None,
        epoch: int = 0,
    ) -> None:
        self.name = name
        self.topic = writer.topic
        self._writer = writer
        self._producer = producer
        self._config = kafka_config
        self._group_id = group_id
        self._checkpoint_interval = checkpoint_interval
        self._key_of = key_of
        # The owned partitions' delivery state, and per partition: keys folded into it that the
        # next checkpoint tombstones; the log offset applied up to; commands read back while
        # this process was still writing them, left to their writer, in log order.
        self.states: dict[int, PartitionState[Record]] = {}
        self._folded: dict[int, set[bytes]] = {}
        self._log_applied: dict[int, int] = {}
        self._read_back: dict[int, list[ReadBack]] = {}
        # The epoch of the subscription's record (want_epoch), and the partitions whose state is
        # older: not delivered from until they adopt it -> since when (monotonic time).
        self._epoch_wanted = epoch
        self.behind: dict[int, float] = {}
        self._reader: kafka_consumer.TailReader | None = None
        self._checkpoints: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # What the runner hears: the states changed (messages may be ready, or fetching may
        # resume); a partition adopted a new epoch's checkpoint (fetch from its watermark); a
        # partition's checkpoint is written (commit its watermark as the group's offset).
        self.on_change: Callable[[], None] = _nothing
        self.on_seek: Callable[[int, int], None] = _nothing
        self.on_checkpoint: Callable[[int, int], None] = _nothing

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Follow the log (its partitions are added as they are taken on) and checkpoint."""
        self._loop = asyncio.get_running_loop()
        self._reader = kafka_consumer.TailReader(
            self._config,
            f"log-{self.name}",
            self._on_log,
            progress_group=applied_group(self._group_id),
            linger_seconds=LOG_LINGER_SECONDS,
        )
        self._reader.start({})
        self._checkpoints = asyncio.create_task(self._checkpoint_loop(), name=f"checkpoint {self.name}")

    def discard(self) -> None:
        """The subscription is gone, and its log with it: nothing more is worth writing."""
        if self._reader is not None:
            self._reader.drop_progress()
        self._writer.drop_deferred()

    async def stop_checkpoints(self) -> None:
        """No more checkpoints by interval (those of partitions given up are still written)."""
        task, self._checkpoints = self._checkpoints, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def stop_reading(self) -> None:
        """Stop following the log (blocks: run it in a thread)."""
        if self._reader is not None:
            self._reader.stop()

    # -- writing ---------------------------------------------------------------------------

    async def write(self, p: int, cmds: list[Command]) -> list[Logged]:
        """Write commands durably (with whatever is deferred); their keys stay being written
        until `claim`ed."""
        return await self._writer.write(p, cmds)

    def defer(self, p: int, cmd: Command) -> asyncio.Future[list[Logged]]:
        """Write `cmd` with the next write (LogWriter.defer): for what need not be durable."""
        return self._writer.defer(p, cmd)

    def flush(self) -> None:
        """Write what is deferred now."""
        self._writer.flush()

    async def ack_in(
        self, sender: TransactionalSender, p: int, offsets: Iterable[int], records: list[TxnRecord]
    ) -> Ack:
        """Ack `offsets` in the same transaction as `records` (the dead letters), and apply it
        here once committed. Returns the ack."""
        ack = Ack(p, tuple(to_ranges(offsets)), self.epoch(p))
        key = self._writer.key(p)
        with self._writer.holding([key]):  # applied here, as a write's: not by the reader
            await sender.send([*records, TxnRecord(self.topic, p, key, logformat.encode(ack), None)])
        self.apply(p, ack, key)
        return ack

    async def ack_freed(self, p: int, offsets: list[int]) -> Ack | None:
        """Write and apply the provisional acks of ordered delivery that an ack read from the
        log freed (PartitionState.take_freed); None if the write failed (they come back)."""
        ack = Ack(p, tuple(to_ranges(offsets)), self.epoch(p))
        try:
            written = await self.write(p, [ack])
        except Exception as exc:  # noqa: BLE001 - the caller's loop must live
            log.warning(
                "%s: writing %d held acks of partition %d failed: %s", self.name, len(offsets), p, exc
            )
            return None
        self.apply(p, ack, written[0].key)
        return ack

    # -- the states ------------------------------------------------------------------------

    def owns(self, p: int) -> bool:
        return p in self.states

    def epoch(self, p: int) -> int:
        state = self.states.get(p)
        return state.epoch if state is not None else 0

    def judge(
        self, p: int, entries: Iterable[LeaseRef], acking: bool, now_ms: int, hold_until: int | None
    ) -> list[bool | None]:
        """Which (offset, generation) of partition p name current leases: PartitionState.judge."""
        return self.states[p].judge(entries, acking, now_ms, hold_until)

    def order_acks(self, p: int, offsets: list[int]) -> AckOrder:
        """Of acks of leased messages, (those to write now, those held back behind an earlier
        message of their ordering key): PartitionState.order_acks."""
        return self.states[p].order_acks(offsets)

    def leased(self, p: int, offset: int) -> bool:
        """Whether a message of a partition this process owns is leased now."""
        state = self.states.get(p)
        return state is not None and state.lease_of(offset) is not None

    def apply(self, p: int, cmd: Command, key: bytes | None) -> None:
        """Apply a command this process has written to the log (`key`), or is still writing
        (None: its key is claimed when the write ends)."""
        state = self.states.get(p)
        if state is not None:
            state.apply(cmd, now_ms())
        if key is not None:
            self.claim(p, (key,))

    def claim(self, p: int, keys: Iterable[bytes]) -> None:
        """Commands this process wrote are in the log and applied here: their keys are
        tombstoned with the next checkpoint, and the log reader skips them. Only keys still
        being written count: one the writer let go of (`install`) is the reader's to apply."""
        writing = self._writer.writing
        mine = [k for k in keys if k in writing]
        writing.difference_update(mine)
        folded = self._folded.get(p)
        if folded is not None:
            folded.update(mine)

    # -- partitions taken on and given up ----------------------------------------------------

    def recover(self, p: int, committed: int) -> Recovered:
        """The partition's state as its log describes it (blocks: the fetcher's thread)."""
        entries = kafka_consumer.read_to_end(self._config, self.topic, p)
        state, folded = fold(p, committed, ((k, v) for _, k, v in entries), now_ms(), self._key_of)
        return Recovered(state, folded, entries[-1][0] + 1 if entries else 0)

    def install(self, p: int, recovered: Recovered) -> None:
        """Serve the partition from its recovered state (on the loop)."""
        state = recovered.state
        self.states[p] = state
        self._folded[p] = recovered.folded
        self._log_applied[p] = recovered.log_end
        self._read_back.pop(p, None)
        # Writes still under way from an earlier ownership applied their commands to a state
        # that is gone: the reader applies them to this one.
        prefix, writing = logformat.command_prefix(p), self._writer.writing
        writing.difference_update([k for k in writing if k.startswith(prefix)])
        if self._reader is not None:
            self._reader.report_progress({(self.topic, p): recovered.log_end})
        state.dirty = True
        self._check_epoch(p, state)

    def follow(self, p: int, log_end: int) -> None:
        """Read what other processes write to the partition's log from `log_end` on."""
        if self._reader is not None:
            self._reader.add({(self.topic, p): log_end})

    def unfollow(self, partitions: list[int]) -> None:
        if self._reader is not None:
            self._reader.remove([(self.topic, p) for p in partitions])

    async def give_up(self, p: int, checkpoint: bool) -> int | None:
        """The partition is no longer this process's: its final checkpoint is written when
        `checkpoint` says so. Returns its watermark (None: it was not served here)."""
        self.behind.pop(p, None)
        if p in self.states:
            self._settle_read_back(p, now_ms())
        log_applied = self._folded_below(p)
        self._read_back.pop(p, None)
        state = self.states.pop(p, None)
        folded = self._folded.pop(p, set())
        self._log_applied.pop(p, None)
        if state is None:
            return None
        if checkpoint:
            try:
                await self._checkpoint(p, state, folded, log_applied)
            except Exception:
                log.exception("%s: final checkpoint of partition %d failed", self.name, p)
        return state.watermark

    # -- what other processes write, read back -----------------------------------------------

    def _on_log(self, batch: list[kafka_consumer.TailEntry]) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._apply_log, batch)

    def _apply_log(self, batch: list[kafka_consumer.TailEntry]) -> None:
        now = now_ms()
        for p in list(self._read_back):
            self._settle_read_back(p, now)
        applied: dict[tuple[str, int], int] = {}
        writing = self._writer.writing
        for topic, p, offset, key, value in batch:
            state = self.states.get(p)
            if state is None:
                continue
            self._log_applied[p] = max(self._log_applied.get(p, 0), offset + 1)
            applied[(topic, p)] = self._log_applied[p]
            if key is None or value is None or key in self._folded[p]:
                continue  # a tombstone, or a command this process applied already
            if key in writing:  # read back before its write here ended: the writer applies it
                self._read_back.setdefault(p, []).append(ReadBack(offset, key, value))
                continue
            self._apply_logged(p, state, key, value, now)
        self.on_change()
        if applied and self._reader is not None:
            self._reader.report_progress(applied)

    def _apply_logged(
        self, p: int, state: PartitionState[Record], key: bytes, value: bytes, now: int
    ) -> None:
        try:
            cmd = logformat.decode(value)
        except logformat.BadLogRecord:
            log.exception("%s: skipping unreadable lease-log record %r", self.name, key)
            return
        if logformat.is_command_key(key):
            state.apply(cmd, now)
            self._folded[p].add(key)
        elif isinstance(cmd, Checkpoint) and cmd.epoch > state.epoch:
            self._adopt_seek(p, state, cmd, now)

    def _settle_read_back(self, p: int, now: int) -> None:
        """Commands read back while this process wrote them: done with once their writer has
        applied them (folded); applied now if the write ended without (it failed, as far as the
        writer knows, yet is in the log); else left for later."""
        read_back = self._read_back.pop(p, None)
        state = self.states.get(p)
        if not read_back or state is None:
            return
        folded, writing = self._folded[p], self._writer.writing
        left = []
        for entry in read_back:
            if entry.key in writing:
                left.append(entry)
            elif entry.key not in folded:
                self._apply_logged(p, state, entry.key, entry.value, now)
        if left:
            self._read_back[p] = left

    def _folded_below(self, p: int) -> int:
        """The log offset below which every command is applied here (a checkpoint's
        `log_offset`): where the reader is, or the first command it left to its writer."""
        read_back = self._read_back.get(p)
        applied = self._log_applied.get(p, -1)
        return min(applied, read_back[0].offset) if read_back else applied

    # -- epochs ----------------------------------------------------------------------------

    def want_epoch(self, epoch: int) -> None:
        """The subscription's record is of `epoch` (a Seek or a truncation raised it): the
        partitions of an older state deliver nothing until they adopt its checkpoint."""
        if epoch <= self._epoch_wanted:
            return
        self._epoch_wanted = epoch
        for p, state in self.states.items():
            self._check_epoch(p, state)

    def _check_epoch(self, p: int, state: PartitionState[Record]) -> None:
        if state.epoch < self._epoch_wanted:
            self.behind.setdefault(p, time.monotonic())
        else:
            self.behind.pop(p, None)

    def _adopt_seek(self, p: int, state: PartitionState[Record], cp: Checkpoint, now: int) -> None:
        """A seek wrote a checkpoint of a new epoch: start over from it."""
        old = state.epoch
        state.apply(cp, now)
        self._folded[p].add(logformat.checkpoint_key(p, old))
        self.on_seek(p, state.watermark)  # records fetched before the consumer moves are stale
        self._epoch_wanted = max(self._epoch_wanted, cp.epoch)
        self._check_epoch(p, state)
        log.info("%s: partition %d sought to offset %d (epoch %d)", self.name, p, state.watermark, cp.epoch)

    def wait_out_epochs(self) -> None:
        """Partitions behind the record's epoch for EPOCH_WAIT_SECONDS: no checkpoint of it will
        come (its seeker died between its writes), so they go on from their own state in it."""
        now = time.monotonic()
        for p, since in list(self.behind.items()):
            state = self.states.get(p)
            if state is None:
                del self.behind[p]
            elif now - since >= EPOCH_WAIT_SECONDS:
                log.warning(
                    "%s: no checkpoint of epoch %d came for partition %d in %.0f s; it goes on "
                    "from its own state in that epoch",
                    self.name,
                    self._epoch_wanted,
                    p,
                    now - since,
                )
                self._folded[p].add(logformat.checkpoint_key(p, state.epoch))
                state.epoch = self._epoch_wanted
                state.dirty = True
                del self.behind[p]
                self.on_change()

    # -- checkpoints -----------------------------------------------------------------------

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self._checkpoint_interval)
            # All partitions at once: one whose log has no leader for a while must not hold up
            # the checkpoints (and the committed offsets) of the others.
            await asyncio.gather(
                *(self._checkpoint_logged(p, state) for p, state in list(self.states.items()) if state.dirty)
            )

    async def _checkpoint_logged(self, p: int, state: PartitionState[Record]) -> None:
        try:
            self._settle_read_back(p, now_ms())
            await self._checkpoint(p, state, self._folded.get(p, set()), self._folded_below(p))
        except Exception as exc:  # noqa: BLE001 - retried next round; the loop must live
            log.warning("%s: checkpoint of partition %d failed: %s", self.name, p, exc)

    async def _checkpoint(
        self, p: int, state: PartitionState[Record], folded: set[bytes], log_applied: int
    ) -> None:
        """The state written whole, then the keys folded into it tombstoned."""
        state.dirty = False
        keys = list(folded)
        folded.difference_update(keys)
        cp = dataclasses.replace(state.checkpoint(), log_offset=log_applied)
        try:
            await self._producer.send(
                self.topic, [(logformat.checkpoint_key(p, cp.epoch), logformat.encode(cp), None)], partition=p
            )
        except Exception:
            folded.update(keys)
            state.dirty = True
            raise
        if keys:
            await self._producer.send(self.topic, [(k, None, None) for k in keys], partition=p)
        self.on_checkpoint(p, cp.watermark)
