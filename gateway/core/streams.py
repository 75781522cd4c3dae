"""StreamingPull sessions: flow-controlled delivery on one stream.

A session leases messages from its subscription's runner while the stream has room under its
`max_outstanding_messages` / `max_outstanding_bytes` (times `--stream-run-ahead`, 1 unless the
operator allows more); an ack or nack of a message delivered on the stream (on the stream or by
a unary call, as the official clients send them) frees room.
Sessions end with UNAVAILABLE, never OK: on shutdown, when recycled after a maximum age, or when
the subscription goes away, so clients reconnect and carry on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Protocol

from gateway.clock import now_ms
from gateway.core.runner import Delivery, SubscriptionRunner, Taken
from gateway.errors import GatewayError, InvalidArgument, Unavailable
from gateway.translate import limits

if TYPE_CHECKING:
    from gateway.core.resources import StoredSubscription

HEARTBEAT_SECONDS = 1.0  # how often an idle stream checks for pings to answer
# How often a full stream looks through all it holds for deliveries that ended without a word to
# it (`_prune`) when woken by an ack; woken by the clock (a lease may have expired), it always
# looks. Acks end deliveries with a word (`_settled`), and a look costs one check per message
# held: thousands, at every ack while the client keeps the stream full.
PRUNE_SECONDS = 0.25
CHUNK = 100
Confirmation = tuple[str, list[str], dict[str, str]]  # ("ack" | "modack", ids, failures by id)


class StreamHost(Protocol):
    """What a session needs of the service that opened it (DeliveryService)."""

    def response_budget(self, confirmations: int = 0) -> int: ...

    def forget_stream(self, session: StreamSession) -> None: ...


@dataclasses.dataclass(slots=True)
class StreamOutput:
    deliveries: list[Delivery]
    confirmations: list[Confirmation]


class StreamSession:
    def __init__(
        self,
        service: StreamHost,
        res: StoredSubscription,
        runner: SubscriptionRunner,
        deadline_seconds: int,
        max_messages: int,
        max_bytes: int,
        max_age: float,
        run_ahead: float = 1.0,
    ) -> None:
        self._service = service
        self.res = res
        self._runner = runner
        self.deadline_seconds = deadline_seconds
        # The client's limits (<= 0: none), times --stream-run-ahead when the operator allows more.
        self._max_messages = int(max_messages * run_ahead) if max_messages > 0 else 1 << 30
        self._max_bytes = int(max_bytes * run_ahead) if max_bytes > 0 else 1 << 62
        # What this stream delivered and no word has ended yet: partition -> {offset: bytes}.
        # By partition, so that an ack, which every stream of the subscription hears of, is
        # matched against each stream's share in one set operation.
        self._outstanding: dict[int, dict[int, int]] = {}
        self._count = 0
        self._bytes = 0
        self._wake = asyncio.Event()
        self._pong = False
        self._confirmations: list[Confirmation] = []
        self._confirming = res.proto.enable_exactly_once_delivery
        self._closed: GatewayError | None = None
        self._ends_at = time.monotonic() + max_age
        self._prune_after = 0.0  # (monotonic) when a full stream looks again: see PRUNE_SECONDS
        runner.settle_listeners.add(self._settled)

    # -- control from the request side -----------------------------------------------------

    def set_deadline(self, seconds: int) -> None:
        self.deadline_seconds = limits.ack_deadline(seconds, "stream_ack_deadline_seconds")

    def confirm(self, kind: str, ack_ids: list[str], failures: dict[str, str]) -> None:
        """With exactly-once delivery, report the outcome of a stream's acks or modacks."""
        if self._confirming:
            self._confirmations.append((kind, ack_ids, failures))
            self._wake.set()

    def ping(self) -> None:
        """A client heartbeat: answer it with a (possibly empty) response soon."""
        self._pong = True
        self._wake.set()

    def close(self, reason: str, error: GatewayError | None = None) -> None:
        if self._closed is None:
            self._closed = error or Unavailable(reason)
        self._wake.set()
        self._runner.ready.set()

    def owns(self, partition: int) -> bool:
        """Whether this process serves `partition` of the subscription now (push uses it to pick
        one process for what is sent once per subscription)."""
        return self._runner.owns(partition)

    def release(self) -> None:
        """The stream is gone. Its leases stay: the client may ack them on another stream."""
        self._runner.settle_listeners.discard(self._settled)
        self._service.forget_stream(self)

    def _settled(self, partition: int, offsets: list[int]) -> None:
        mine = self._outstanding.get(partition)
        if not mine:
            return
        ended = mine.keys() & offsets
        if ended:
            for offset in ended:
                self._bytes -= mine.pop(offset)
            self._count -= len(ended)
            self._wake.set()

    def _drop(self, partition: int, offset: int) -> None:
        mine = self._outstanding.get(partition)
        size = None if mine is None else mine.pop(offset, None)
        if size is not None:
            self._bytes -= size
            self._count -= 1

    # -- the response side -------------------------------------------------------------------

    def _room(self) -> int:
        full = self._count >= self._max_messages or self._bytes >= self._max_bytes
        if full and time.monotonic() >= self._prune_after:
            self._prune()
        if self._bytes >= self._max_bytes:
            return 0
        return max(0, min(self._max_messages - self._count, 1000))

    def _prune(self) -> None:
        """Forget deliveries that ended without a word to us (expired, acked elsewhere)."""
        self._prune_after = time.monotonic() + PRUNE_SECONDS
        leased = self._runner.log.leased
        for p, mine in self._outstanding.items():
            for offset in [o for o in mine if not leased(p, o)]:
                self._bytes -= mine.pop(offset)
                self._count -= 1

    def _output(self, deliveries: list[Delivery]) -> StreamOutput:
        confirmations, self._confirmations = self._confirmations, []
        self._pong = False
        return StreamOutput(deliveries, confirmations)

    async def batches(self) -> AsyncGenerator[StreamOutput, None]:
        """Deliveries and confirmations as they come; an empty output answers a ping."""
        runner = self._runner
        while True:
            if self._closed is not None:
                raise self._closed
            if time.monotonic() > self._ends_at:
                raise Unavailable("Stream recycled after its maximum age; reconnect.")
            if runner.stopped:
                raise Unavailable("This process stopped serving the subscription; reconnect.")
            runner.touch()
            room = self._room()
            taken = []
            if room:
                until = now_ms() + self.deadline_seconds * 1000
                taken = runner.take(
                    min(room, CHUNK * 10), until, self._service.response_budget(len(self._confirmations))
                )
                # Respect the byte limit: count what fits, give back the rest.
                used, added, outstanding = self._bytes, 0, self._outstanding
                for i, (p, o, _, r) in enumerate(taken):
                    if used >= self._max_bytes:
                        self._give_back(taken[i:])
                        taken = taken[:i]
                        break
                    if (mine := outstanding.get(p)) is None:
                        mine = outstanding[p] = {}
                    if o not in mine:  # (else delivered here before, and its lease ran out unheard)
                        mine[o] = size = r.size
                        used += size
                        added += 1
                self._count += added
                self._bytes = used
            if taken:
                got = await runner.deliver(self.res, taken, until)
                if len(got) < len(taken):  # some leases were not written: not outstanding here
                    self._forget_undelivered(taken, got)
                yield self._output(got)
                continue
            if self._pong or self._confirmations:
                yield self._output([])
                continue
            await self._wait(room > 0)

    def _forget_undelivered(self, taken: list[Taken], got: list[Delivery]) -> None:
        delivered = {(d.record.partition, d.record.offset) for d in got}
        for p, o, _, _ in taken:
            if (p, o) not in delivered:
                self._drop(p, o)

    def _give_back(self, extra: list[Taken]) -> None:
        for p, o, g, _ in extra:
            self._runner.give_back(p, [(o, g)])

    async def _wait(self, for_messages: bool) -> None:
        runner = self._runner
        self._wake.clear()
        waits = [asyncio.ensure_future(self._wake.wait())]
        if for_messages:
            runner.ready.clear()
            if runner.has_ready():
                waits[0].cancel()
                return
            waits.append(asyncio.ensure_future(runner.ready.wait()))
        timeout = HEARTBEAT_SECONDS
        expiry = runner.next_expiry_ms()
        if expiry is not None:
            timeout = min(timeout, max(0.001, (expiry - now_ms()) / 1000 + 0.001))
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not done:  # the clock: a lease may have expired, a full stream looks at once
                self._prune_after = 0.0
        finally:
            for w in waits:
                w.cancel()


def check_modacks(ack_ids: list[str], seconds: list[int]) -> None:
    if len(ack_ids) != len(seconds):
        raise InvalidArgument(
            "modify_deadline_ack_ids and modify_deadline_seconds must have the same length "
            f"(got {len(ack_ids)} and {len(seconds)})."
        )
