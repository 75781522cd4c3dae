"""LogWriter.defer: a deadline change that need not be durable before OK goes with the lease
log's next write, or on its own after DEFER_SECONDS (docs/lease-log.md), against a stand-in
producer that records each send."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from gateway.core import log_writer
from gateway.core.log_writer import LogWriter
from gateway.leases import logformat
from gateway.leases.commands import Ack, Command, SetDeadline


class Recorder:
    """Takes every send at once; offsets count up per partition."""

    def __init__(self) -> None:
        self.sends: list[tuple[int, list[Command]]] = []
        self._next: dict[int, int] = {}

    async def send(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes | None, object]], partition: int
    ) -> list[tuple[int, int]]:
        assert all(value is not None for _, value, _ in records)
        self.sends.append((partition, [logformat.decode(value) for _, value, _ in records if value]))
        first = self._next.get(partition, 0)
        self._next[partition] = first + len(records)
        return [(partition, first + k) for k in range(len(records))]


def _extend(offset: int) -> SetDeadline:
    return SetDeadline(0, ((offset, 1),), 60_000, 0)


async def test_deferred_commands_go_with_the_next_write_in_order() -> None:
    producer = Recorder()
    writer = LogWriter(producer, "log", "w1")  # type: ignore[arg-type]
    first, second = writer.defer(0, _extend(1)), writer.defer(0, _extend(2))
    elsewhere = SetDeadline(1, ((5, 1),), 60_000, 0)
    other = writer.defer(1, elsewhere)
    await asyncio.sleep(0.01)
    assert producer.sends == []  # nothing written on its own yet
    ack = Ack(0, ((7, 8),), 0)
    written = await writer.write(0, [ack])
    await asyncio.wait_for(asyncio.gather(first, second, other), 1)
    # The write's own record first, then the deferred ones, one send per partition, in order.
    assert producer.sends == [(0, [ack]), (0, [_extend(1), _extend(2)]), (1, [elsewhere])]
    assert written[0].offset == 0 and first.result()[0].offset == 1 and second.result()[0].offset == 2
    keys = {written[0].key, first.result()[0].key, second.result()[0].key, other.result()[0].key}
    # Keys of their own, held as being written until the runner folds them, as any write's.
    assert len(keys) == 4 and writer.writing == keys


async def test_deferred_commands_go_on_their_own_after_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_writer, "DEFER_SECONDS", 0.05)
    producer = Recorder()
    writer = LogWriter(producer, "log", "w1")  # type: ignore[arg-type]
    deferred = writer.defer(0, _extend(1))
    assert (await asyncio.wait_for(deferred, 1))[0].offset == 0
    assert producer.sends == [(0, [_extend(1)])]


async def test_dropped_commands_are_never_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_writer, "DEFER_SECONDS", 0.05)
    producer = Recorder()
    writer = LogWriter(producer, "log", "w1")  # type: ignore[arg-type]
    deferred = writer.defer(0, _extend(1))
    writer.drop_deferred()
    await asyncio.sleep(0.1)
    assert deferred.cancelled() and producer.sends == []


async def test_a_failed_write_fails_each_deferred_command() -> None:
    class Refuser(Recorder):
        async def send(
            self, topic: str, records: Sequence[tuple[bytes | None, bytes | None, object]], partition: int
        ) -> list[tuple[int, int]]:
            raise RuntimeError("refused")

    writer = LogWriter(Refuser(), "log", "w1")  # type: ignore[arg-type]
    deferred = [writer.defer(0, _extend(1)), writer.defer(0, _extend(2))]
    writer.flush()
    for future in deferred:
        with pytest.raises(RuntimeError, match="refused"):
            await asyncio.wait_for(future, 1)
    assert not writer.writing
