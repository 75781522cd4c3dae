"""Push delivery of one subscription from this gateway process.

The dispatcher is a client of the core like any StreamingPull client: it opens a stream session
(so it joins the subscription's consumer group and serves the partitions this process owns),
takes the deliveries the session hands out, pushes each to the endpoint through its `Pusher`
(http_push.py: an HTTP POST; grpc_push.py: a call of the seed's PushEndpointService), and acks
or nacks it by the outcome. The lease log guarantees that two processes never push one message
at once.

The session's `max_messages` is the push window: a session is opened with what the window leaves
free and reopened when the window has grown or shrunk well past that (and every half minute
anyway). Leases outlive sessions, so nothing is lost or delivered twice by reopening. Before
asking for more messages the dispatcher waits for room in the window (capped by the push rate,
when the endpoint pushed back) and for the push backoff; each push waits for its turn under the
push rate.

Taken messages wait in a queue for one of at most `max_senders` sender coroutines (the size of
the HTTP connection pool): HTTP/1.1 carries one request per connection, and a request queued
inside aiohttp for a connection costs far more than one waiting here.

Outcomes: success acks (and grows the window and the rate); a failure nacks, halves the window
and backs off; `aborted` (gRPC ABORTED) only nacks; `push_back` (gRPC UNAVAILABLE) nacks and
halves the push rate (window.PushRate).

Truncation events of the seed's early API (gRPC push only: a dispatcher given `events`,
grpc_push.TruncationEvents) go before further messages: before each batch it asks for the
subscription's pending event, pushes it by itself and waits for the answer, judged as a message's
push (window, backoff, push rate); OK acks the event, any other answer nacks it, so it is taken
and pushed again, after the backoff if the answer was a failure. A newly raised event ends the
session's wait for messages (`update`), so an idle subscription gets it at once.

With message ordering, a key's messages are pushed one at a time, in order: the next waits until
the endpoint has acknowledged the one before. When a push fails, the messages of its key taken
after it are nacked unsent: the subscription redelivers them after the failed one, in order.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Protocol

from gateway.clock import within
from gateway.errors import GatewayError
from gateway.push import sender
from gateway.push.settle import Settler
from gateway.push.window import PushBackoff, PushRate, PushWindow

if TYPE_CHECKING:
    from gateway.core.delivery import DeliveryService
    from gateway.core.resources import StoredSubscription
    from gateway.core.runner import Delivery
    from gateway.core.streams import StreamOutput, StreamSession
    from gateway.push.http_push import Pusher

log = logging.getLogger(__name__)
RECYCLE_SECONDS = 30.0  # a session is reopened at least this often, busy or idle
REOPEN_DELAY = 1.0  # after the core refused or ended a session
STOP_WAIT = 5.0  # for a session's generator to end by itself before it is cancelled
GROW_FACTOR = 1.25  # reopen when the window leaves this much more room than the session has
DEFAULT_DEADLINE = 10
REFUSAL_LOG_SECONDS = 60.0  # at most one warning per subscription this often for refused pushes


Taken = tuple["Delivery", int, float]  # a delivery, its session number, when it was taken


class Events(Protocol):
    """The truncation events of one subscription, for its dispatcher (grpc_push.TruncationEvents)."""

    async def take(self, deadline_s: int) -> str | None:
        """The ack id of the pending event, leased for `deadline_s` seconds; None: nothing to push."""

    async def push(self, time_left: float) -> sender.Outcome:
        """Push the event, giving up after `time_left` seconds."""

    async def settle(self, ack_id: str, ok: bool) -> None:
        """Ack the event (ok) or nack it, to be taken again."""


class Dispatcher:
    def __init__(
        self,
        res: StoredSubscription,
        delivery: DeliveryService,
        pusher: Pusher,
        max_window: int,
        max_senders: int,
        events: Events | None = None,
    ) -> None:
        self.name = res.name
        self._events = events
        # The latest truncation event update() has seen raised, and its hold (interrupted for
        # each: a new event, or one whose hold ended, is pushed before the next batch)
        self._event_seen = (0, 0)
        self.uid: str = res.meta.uid
        self._delivery = delivery
        self.pusher = pusher
        self.window = PushWindow(maximum=max_window)
        self.backoff = PushBackoff()
        self.rate = PushRate()
        self._queue: collections.deque[Taken] = collections.deque()  # to send
        # Ordering: key -> its messages taken after the one being pushed (present while one is).
        self._keys: dict[bytes, collections.deque[Taken]] = {}
        self._ordered = False
        self._outstanding: collections.Counter[int] = collections.Counter()  # session number -> pushes
        self._count = 0  # pushes taken and not finished: queued or being sent
        self._senders: set[asyncio.Task[None]] = set()
        self._max_senders = max(1, max_senders)
        self._session_no = 0
        self._changed = asyncio.Event()
        self._settler = Settler(delivery, res.name)
        self._task: asyncio.Task[None] | None = None
        self._waiting: StreamSession | None = None  # the session asked for messages right now
        self._interrupted = False
        self._stopping = asyncio.Event()
        self._failures = 0
        self._refusals_unlogged = 0  # refused pushes since the last warning about them
        self._refusal_logged_at: float | None = None
        self._push_backs = 0  # since the last warning about them
        self._push_back_logged_at: float | None = None
        self._session: StreamSession | None = None  # the one open now
        # Whether this process served the subscription's partition 0 when last seen: the process
        # that does sends what is sent once per subscription (grpc_push's deleted event).
        self.serves_first = False
        self.update(res)

    # -- control ---------------------------------------------------------------------------

    def update(self, res: StoredSubscription) -> None:
        """The subscription changed (push config, ack deadline, ...)."""
        self.pusher.update(res)
        self.deadline = int(res.proto.ack_deadline_seconds) or DEFAULT_DEADLINE
        self._ordered = res.proto.enable_message_ordering
        if self._events is not None and res.meta.truncation_pending:
            seen = (res.meta.truncation_pending, res.meta.legacy_truncation_hold_epoch)
            if seen != self._event_seen:
                self._event_seen = seen
                self._interrupt()  # a new truncation event: pushed before the session's next batch
        self._changed.set()

    def limit(self) -> int:
        """Pushes that may be outstanding now: the window, capped by the push rate."""
        return self.rate.cap(self.window.limit)

    def check_first(self) -> bool:
        """Whether this process serves partition 0 now (or did when its last session saw it)."""
        if self._session is not None:
            self.serves_first = self._session.owns(0)
        return self.serves_first

    def start(self) -> None:
        self._settler.start()
        self._task = asyncio.create_task(self._run(), name=f"push {self.name}")

    async def stop(self, grace: float) -> None:
        """Take no more messages; let pushes in flight finish for up to `grace` seconds (the rest
        are cancelled and nacked); write the outstanding acks and nacks. Idempotent."""
        self._stopping.set()
        self._changed.set()
        self._interrupt()  # the session's generator ends where no lease is being taken
        task, self._task = self._task, None
        if task is not None:
            _, pending = await asyncio.wait([task], timeout=STOP_WAIT)
            for t in pending:
                t.cancel()
            await asyncio.gather(task, return_exceptions=True)
        senders = list(self._senders)
        if senders:
            _, pending = await asyncio.wait(senders, timeout=grace)
            for sender_task in pending:
                sender_task.cancel()  # its push in flight is nacked
            await asyncio.gather(*pending, return_exceptions=True)
        while self._queue:  # taken but never sent: back to the subscription at once
            d, number, _ = self._queue.popleft()
            self._settler.nack(d.ack_id)
            self._finished(number)
        for key in list(self._keys):
            self._drop_key(key)
        await self._settler.close()

    # -- sessions --------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping.is_set():
            room = max(1, self.limit() - self._count)
            try:
                session = await self._delivery.open_stream(self.name, self.deadline, room, 0)
            except GatewayError as exc:
                log.warning("%s: push delivery cannot start: %s", self.name, exc.message)
                await self._pause(REOPEN_DELAY)
                continue
            self._session_no += 1
            self._session = session
            try:
                await self._pump(session, room)
            except GatewayError as exc:  # recycled, the gateway is closing, the subscription went
                log.info("%s: push session ended: %s", self.name, exc.message)
                await self._pause(REOPEN_DELAY)
            finally:
                self.check_first()
                self._session = None
                session.release()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await within(self._stopping.wait(), seconds)

    async def _pump(self, session: StreamSession, room: int) -> None:
        """Push what the session hands out; return when it should be reopened with another size."""
        loop = asyncio.get_running_loop()
        number, opened_at = self._session_no, loop.time()
        self._interrupted = False  # set once we close this session ourselves
        batches = session.batches()
        try:
            while True:
                await self._gate()
                if self._stopping.is_set() or self._reopen_due(number, room, loop.time() - opened_at):
                    return
                if session.deadline_seconds != self.deadline:
                    session.set_deadline(self.deadline)
                if self._events is not None and await self._push_event(self._events):
                    continue  # the window, backoff and a newer event are looked at again
                out = await self._next(session, batches)
                if out is None:
                    return
                self.serves_first = session.owns(0)
                received = loop.time()
                for d in out.deliveries:
                    self._launch(d, number, received)
        finally:
            await batches.aclose()

    async def _next(
        self, session: StreamSession, batches: AsyncGenerator[StreamOutput, None]
    ) -> StreamOutput | None:
        """The session's next output; None when a failure or stop() interrupted the wait."""
        self._waiting = session
        # A session waiting this long is reopened too: should its runner have been replaced
        # meanwhile (the subscription changed, the runner idled out), the new session finds the
        # current one.
        timer = asyncio.get_running_loop().call_later(RECYCLE_SECONDS, self._interrupt)
        try:
            return await anext(batches)
        except GatewayError:
            if self._interrupted:
                return None
            raise
        finally:
            timer.cancel()
            self._waiting = None

    def _interrupt(self) -> None:
        """End the session's wait for messages where no lease is being taken, and reopen it: after
        a failed push (so the backoff and the smaller window apply before the next batch), on
        stop(), and when the wait has lasted RECYCLE_SECONDS."""
        if self._waiting is not None:
            self._interrupted = True
            self._waiting.close("push backoff")

    def _reopen_due(self, number: int, room: int, age: float) -> bool:
        others = self._count - self._outstanding[number]
        want = max(1, self.limit() - others)
        return age > RECYCLE_SECONDS or want < room or want >= room * GROW_FACTOR + 1

    def _has_room(self) -> bool:
        """Whether the window has room for a batch worth taking: a quarter of it (at least one).
        Asking for every single free slot would make each lease-log write carry one message."""
        limit = self.limit()
        return limit - self._count >= max(1, limit // 4)

    async def _gate(self) -> None:
        """Wait until the backoff has passed and the window has room."""
        loop = asyncio.get_running_loop()
        while True:
            wait = self.backoff.wait(loop.time())
            if self._stopping.is_set() or (wait <= 0 and self._has_room()):
                return
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await within(self._changed.wait(), wait if wait > 0 else None)

    # -- pushes ----------------------------------------------------------------------------

    async def _push_event(self, events: Events) -> bool:
        """Push the pending truncation event, if there is one to push now, and wait for the
        answer. Whether one was pushed."""
        try:
            ack_id = await events.take(self.deadline)
        except GatewayError:  # the subscription went: the session ends too
            return False
        if ack_id is None:
            return False
        loop = asyncio.get_running_loop()
        taken = loop.time()
        turn = self.rate.reserve(taken)
        if turn > 0:
            await asyncio.sleep(turn)
        try:
            outcome = await events.push(taken + self.deadline - loop.time())
        except Exception as exc:  # as a message's push that raised: a failure, pushed again
            log.exception("%s: pushing the truncation event failed", self.name)
            outcome = sender.Outcome(False, f"{type(exc).__name__}: {exc}")
        self._judge(outcome, taken, loop.time())
        try:
            await events.settle(ack_id, outcome.ok)
        except GatewayError as exc:  # not acked: pushed again
            log.info("%s: settling the truncation event failed: %s", self.name, exc.message)
        return True

    def _launch(self, d: Delivery, number: int, received: float) -> None:
        self._outstanding[number] += 1
        self._count += 1
        key = d.record.key if self._ordered else None
        if key:
            waiting = self._keys.get(key)
            if waiting is not None:  # an earlier message of the key is being pushed
                waiting.append((d, number, received))
                return
            self._keys[key] = collections.deque()
        self._enqueue((d, number, received))

    def _enqueue(self, taken: Taken) -> None:
        self._queue.append(taken)
        if len(self._senders) < min(self._max_senders, len(self._queue)):
            task = asyncio.create_task(self._send_queued())
            self._senders.add(task)
            task.add_done_callback(self._senders.discard)

    async def _send_queued(self) -> None:
        """A sender: push queued messages one after another until the queue is empty. (One
        coroutine frame, not three: every resumption inside aiohttp passes through each.)"""
        loop = asyncio.get_running_loop()
        while self._queue:
            d, number, received = self._queue.popleft()
            ok = False
            try:
                turn = self.rate.reserve(loop.time())
                if turn > 0:  # the endpoint pushed back: pushes go at the rate's pace
                    await asyncio.sleep(turn)
                sent = loop.time()
                outcome = await self.pusher.push(d, received + self.deadline - sent)
                # Judged by when the message was taken, not when a sender got to it: a batch taken
                # together is one round trip, whose failures count once (as before it queued).
                self._judge(outcome, received, loop.time())
                ok = outcome.ok
                (self._settler.ack if ok else self._settler.nack)(d.ack_id)
            except asyncio.CancelledError:
                self._settler.nack(d.ack_id)
                raise
            except Exception:
                log.exception("%s: push failed", self.name)  # its lease expires: sent again later
            finally:
                self._finished(number)
                if self._ordered and d.record.key:
                    self._next_of_key(d.record.key, ok)
        # Out of the count at once: the done callback runs later, and a message queued meanwhile
        # must find no sender and start one.
        self._senders.discard(asyncio.current_task())  # type: ignore[arg-type]

    def _next_of_key(self, key: bytes, ok: bool) -> None:
        """A push of `key` ended: on success its next message goes; on failure the rest of the
        key goes back, behind the failed one."""
        waiting = self._keys.get(key)
        if waiting is None:
            return
        if ok and waiting:
            self._enqueue(waiting.popleft())
        elif ok:
            del self._keys[key]
        else:
            self._drop_key(key)

    def _drop_key(self, key: bytes) -> None:
        for d, number, _ in self._keys.pop(key, ()):
            self._settler.nack(d.ack_id)
            self._finished(number)

    def _finished(self, number: int) -> None:
        self._count -= 1
        self._outstanding[number] -= 1
        if self._outstanding[number] <= 0:
            del self._outstanding[number]
        if self._has_room():
            self._changed.set()

    @property
    def in_flight(self) -> int:
        """Pushes taken and not finished: queued or being sent."""
        return self._count

    def _judge(self, outcome: sender.Outcome, taken_at: float, now: float) -> None:
        """What a push's outcome does to the window, the backoff and the push rate (the caller
        acks on success and nacks otherwise)."""
        self._delivery.tallies.of(self.name).on_pushed(outcome.ok, outcome.detail, outcome.refused)
        if outcome.ok:
            self.window.on_success()
            self.backoff.on_success()
            self.rate.on_success()
            if self._failures:
                log.info("%s: push endpoint answers again after %d failures", self.name, self._failures)
                self._failures = 0
            return
        if outcome.aborted:  # the endpoint declined this message, not the load: retried later
            return
        if outcome.push_back:
            self.rate.on_push_back(taken_at, now)
            self._interrupt()  # the session reopens within the capped window
            self._push_backs += 1
            # At most one warning a minute: an endpoint at its capacity pushes back every few
            # seconds for as long as the backlog lasts (the rate's sawtooth).
            if self._push_back_logged_at is None or now - self._push_back_logged_at >= REFUSAL_LOG_SECONDS:
                log.warning(
                    "%s: push endpoint %s pushes back (%s); push rate limited to %.1f/s (%d push-backs "
                    "since the previous warning)",
                    self.name,
                    self.pusher.endpoint(),
                    outcome.detail,
                    self.rate.limit or 0.0,
                    self._push_backs,
                )
                self._push_back_logged_at = now
                self._push_backs = 0
            return
        self.window.on_failure(taken_at, now)
        self.backoff.on_failure(taken_at, now)
        self._interrupt()
        self._failures += 1
        if outcome.refused:
            self._log_refusal(outcome, now)
        elif self._failures == 1:
            log.warning(
                "%s: push to %s failed (%s); backing off",
                self.name,
                self.pusher.endpoint(),
                outcome.detail,
            )
        else:
            log.debug(
                "%s: push failed (%s); window %d, backoff %.1f s",
                self.name,
                outcome.detail,
                self.window.limit,
                self.backoff.delay,
            )

    def _log_refusal(self, outcome: sender.Outcome, now: float) -> None:
        """A warning per REFUSAL_LOG_SECONDS at most: a refused destination stays refused, and the
        backoff retries it about once a minute for as long as the subscription pushes there."""
        self._refusals_unlogged += 1
        if self._refusal_logged_at is not None and now - self._refusal_logged_at < REFUSAL_LOG_SECONDS:
            return
        since = (
            ""
            if self._refusal_logged_at is None
            else f" ({self._refusals_unlogged} refused since the previous warning)"
        )
        log.warning(
            "%s: push to %s refused by the push destination policy: %s; the messages stay in "
            "the subscription, retried with backoff%s",
            self.name,
            self.pusher.endpoint(),
            outcome.detail,
            since,
        )
        self._refusal_logged_at = now
        self._refusals_unlogged = 0
