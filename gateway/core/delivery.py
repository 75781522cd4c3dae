"""Pull, Acknowledge and ModifyAckDeadline, for any subscription, in any gateway process.

Pulls are served by this process's runner of the subscription (started on first use, stopped
after a while unused). An ack or deadline change counts only for a message currently leased
under that ack id, and only the owner of its partition knows the leases: the ack path
(gateway/core/acks.py) judges the ids of partitions this process owns, writes the valid ones to
the lease/ack log and applies them at once; ids of partitions another process owns are
forwarded to that process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gateway.clock import now_ms, within
from gateway.core import peers, policies
from gateway.core.acks import AckPath
from gateway.core.expiration import ActivityRecorder
from gateway.core.lease_log import LeaseLog
from gateway.core.log_writer import LogWriter
from gateway.core.policies import Policies
from gateway.core.resources import AnyResource, ResourceStore, StoredSubscription, subscription_or_none
from gateway.core.runner import Delivery, SubscriptionRunner, Taken
from gateway.core.streams import StreamSession
from gateway.core.subscriptions import log_topic_spec
from gateway.core.tally import Tallies, Tally
from gateway.errors import FailedPrecondition, InvalidArgument, NotFound
from gateway.kafka.admin import Admin
from gateway.kafka.producer import Producer
from gateway.settings import Settings
from gateway.translate import limits, names
from gateway.translate.meta import Kind
from gateway.translate.records import RESPONSE_FRAMING_BYTES, Record

log = logging.getLogger(__name__)
# How long a runner's first pull waits for the group to assign partitions, before its own wait
# for messages: a new group's initial rebalance delay (3 s by default) plus a join.
JOIN_WAIT_SECONDS = 30.0
# How long a pull waits, once its runner owns partitions, for them to be fetched up to where
# they ended when assigned, so that the first pull of a subscription answers with everything
# published before it (up to its max_messages), not with whichever partition came first.
CATCH_UP_SECONDS = 2.0
# A runner that owns some of its group's partitions, has messages ready in them, and has had no
# Pull, no open stream and no message taken for this long, while other members own the rest,
# leaves its group: its partitions go to the members whose clients do pull (a worker or host
# that served the subscription once would otherwise hold them for --idle-subscription-seconds,
# and their messages would wait that long). A Pull that waits takes what becomes ready, so this
# only has to outlast the gap between a client's Pulls: as long as the default ack deadline,
# within which a pulling client acks its batch and pulls again.
UNSERVED_SECONDS = 10.0


def _require_source(res: StoredSubscription) -> None:
    if res.meta.detached:
        raise FailedPrecondition(f"Subscription is detached (resource={res.name})")
    if res.meta.topic_deleted:
        raise FailedPrecondition(f"The topic of this subscription was deleted (resource={res.name})")


class DeliveryService:
    def __init__(
        self,
        settings: Settings,
        store: ResourceStore,
        producer: Producer,
        kafka_config: dict[str, Any],
        admin: Admin,
    ) -> None:
        self._settings = settings
        self._store = store
        self._producer = producer
        self._config = kafka_config
        self._writer_id = uuid.uuid4().hex[:8]
        self._runners: dict[str, SubscriptionRunner] = {}
        self._starting: dict[str, asyncio.Task[SubscriptionRunner]] = {}
        self._janitor: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()  # runners on their way out
        self._streams: set[StreamSession] = set()
        self._admin = admin
        self.address = ""  # where peers reach this process (set once the server listens)
        self._activity = ActivityRecorder(store)
        self._acks = AckPath(self._runners.get, admin, self._runner)
        # Called when a runner's truncation policy dropped messages of a subscription (set by
        # server.py to TruncationService.raise_event: docs/truncation.md).
        self.on_truncated: Callable[[str], Awaitable[None]] | None = None
        # Per subscription counts for /metrics (gateway/observe), capped in labelled names.
        self.tallies = Tallies(Tally, settings.metrics_max_subscriptions)
        store.subscribe(self._on_resource_change)

    def runners(self) -> list[SubscriptionRunner]:
        """The subscriptions this process serves now (the metrics read their state)."""
        return list(self._runners.values())

    def open_streams(self) -> list[str]:
        """The subscription of each StreamingPull session open here (push's own included)."""
        return [session.res.name for session in self._streams]

    def connect_peers(self, address: str, transport: peers.Peers) -> None:
        self.address = address
        self._acks.connect_peers(address, transport)

    async def start(self) -> None:
        self._janitor = asyncio.create_task(self._stop_idle_runners(), name="idle runners")

    async def stop(self) -> None:
        self.close_streams()
        janitor, self._janitor = self._janitor, None
        if janitor is not None:
            janitor.cancel()
            await asyncio.gather(janitor, return_exceptions=True)
        runners = list(self._runners.values())
        self._runners.clear()  # (the ack path looks runners up in this dict)
        # Those already stopping too: each leaves its group before the process ends.
        await asyncio.gather(*(r.stop() for r in runners), *self._stopping, return_exceptions=True)

    def _stop_runner(self, runner: SubscriptionRunner, discard: bool = False) -> asyncio.Task[None]:
        """Stop a runner already out of `_runners`, in a task of its own that stop() awaits."""
        task = asyncio.get_running_loop().create_task(
            runner.stop(discard=discard), name=f"stop {runner.name}"
        )
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        task.add_done_callback(_log_failure)
        return task

    # -- helpers ---------------------------------------------------------------------------

    def response_budget(self, confirmations: int = 0) -> int:
        """Bytes of messages one Pull or StreamingPull response may carry (Record.wire_size):
        under --pull-response-max-bytes with room for its other fields, such as exactly-once
        confirmations (ack ids, ~100 bytes each). Messages that do not fit stay, unleased, for
        the next response: one too large for the client would fail every time, and spend a
        delivery attempt of each message in it."""
        return self._settings.pull_response_max_bytes - RESPONSE_FRAMING_BYTES - 128 * confirmations

    def _subscription(self, name: str) -> StoredSubscription:
        names.subscription(name)
        return self._store.require("subscription", name)

    async def _runner(self, res: StoredSubscription) -> SubscriptionRunner:
        runner = self._runners.get(res.name)
        if runner is not None and runner.log.topic == res.meta.log_topic and runner.denied is None:
            return runner
        task = self._starting.get(res.name)
        if task is None:
            task = asyncio.create_task(self._start_runner(res))
            self._starting[res.name] = task
        return await asyncio.shield(task)

    async def _start_runner(self, res: StoredSubscription) -> SubscriptionRunner:
        try:
            old = self._runners.pop(res.name, None)
            if old is not None:  # of an earlier subscription of that name, whose log is gone
                await old.stop(discard=True)
            if names.reserved_kafka_topic(res.meta.kafka_topic, self._settings.internal_prefix):
                raise FailedPrecondition(  # stored by an older gateway: never served
                    f"The subscription {res.name} reads the Kafka topic {res.meta.kafka_topic}, "
                    "which belongs to Kafka or to the gateway."
                )
            await self._verify_log(res)
            lease_log = LeaseLog(
                name=res.name,
                writer=LogWriter(self._producer, res.meta.log_topic, self._writer_id),
                producer=self._producer,
                kafka_config=self._config,
                group_id=res.meta.group_id,
                checkpoint_interval=self._settings.checkpoint_interval_seconds,
                key_of=_record_key if res.proto.enable_message_ordering else None,
                epoch=res.meta.epoch,
            )
            runner = SubscriptionRunner(
                name=res.name,
                kafka_topic=res.meta.kafka_topic,
                group_id=res.meta.group_id,
                lease_log=lease_log,
                kafka_config=self._config,
                session_timeout_ms=self._settings.session_timeout_ms,
                client_id=peers.client_id(self.address),
                policies=self._policies(res),
                transactional_prefix=self._settings.internal_prefix,
                on_truncated=self._truncated,
            )
            runner.tally = self.tallies.of(res.name)
            await runner.start()
            self._runners[res.name] = runner
            now = self._store.get("subscription", res.name)  # a Seek meanwhile told no runner
            if now is not None:
                lease_log.want_epoch(now.meta.epoch)
            return runner
        finally:
            self._starting.pop(res.name, None)

    async def _verify_log(self, res: StoredSubscription) -> None:
        """The lease/ack log must still be as it was made (compacted, one partition per
        partition): checked once per runner, mended where that is safe."""
        try:
            await self._admin.verify_topic(log_topic_spec(res.meta))
        except NotFound as exc:
            raise FailedPrecondition(
                f"The lease/ack log {res.meta.log_topic} of {res.name} is missing from Kafka; "
                "its acknowledgements are lost. Delete and re-create the subscription."
            ) from exc

    async def _truncated(self, name: str) -> None:
        if self.on_truncated is not None:
            await self.on_truncated(name)

    def _policies(self, res: StoredSubscription) -> Policies:
        dead_letter = self._store.get("topic", res.proto.dead_letter_policy.dead_letter_topic)
        return policies.of(res.proto, dead_letter.meta.kafka_topic if dead_letter else None, res.meta)

    def _on_resource_change(self, kind: Kind, name: str, changed: AnyResource | None) -> None:
        res = subscription_or_none(changed)
        if kind == "topic":  # a dead-letter topic may have come or gone
            for running in self._runners.values():
                sub = self._store.get("subscription", running.name)
                if sub is not None:
                    running.update_policies(self._policies(sub))
            return
        if kind != "subscription":
            return
        runner = self._runners.get(name)
        if runner is not None and res is not None:
            runner.update_policies(self._policies(res))
            runner.log.want_epoch(res.meta.epoch)
        stale = (
            res is None
            or not res.meta.delivers
            or (runner is not None and runner.log.topic != res.meta.log_topic)
        )
        if runner is not None and stale:
            self._runners.pop(name, None)
            # Deleted, or re-created under the same name: the old log is going away.
            gone = res is None or runner.log.topic != res.meta.log_topic
            self._stop_runner(runner, discard=gone)

    async def _stop_idle_runners(self) -> None:
        idle = self._settings.idle_subscription_seconds
        while True:
            await asyncio.sleep(min(UNSERVED_SECONDS / 3, idle / 2))
            now = time.monotonic()
            streamed = {session.res.name for session in self._streams}
            for name, runner in list(self._runners.items()):
                if runner.last_used < now - idle:
                    log.info("%s: idle, leaving its consumer group", name)
                elif name not in streamed and self._unserved(name, runner, now):
                    log.info(
                        "%s: messages ready and no client here for %.0f s while other members "
                        "own the rest of its partitions: leaving its consumer group to them",
                        name,
                        now - runner.last_used,
                    )
                else:
                    continue
                self._runners.pop(name, None)
                # Shielded: cancelling the janitor must not cut a runner's stop short (a
                # stopped runner is never stopped again, so its consumer would stay open).
                await asyncio.shield(self._stop_runner(runner))

    def _unserved(self, name: str, runner: SubscriptionRunner, now: float) -> bool:
        """Holding partitions with messages ready that no client of this process asks for
        (see UNSERVED_SECONDS), while other members of the group own the rest."""
        if now - max(runner.last_used, runner.last_taken) < UNSERVED_SECONDS:
            return False
        res = self._store.get("subscription", name)
        owned = len(runner.states)
        return res is not None and 0 < owned < res.meta.partitions and runner.has_ready()

    # -- Pull ------------------------------------------------------------------------------

    async def pull(self, subscription: str, max_messages: int, wait_seconds: float) -> list[Delivery]:
        limits.max_messages(max_messages)
        res = self._subscription(subscription)
        _require_source(res)
        runner = await self._runner(res)
        runner.touch()
        self._activity.touch(res)
        deadline_s = res.proto.ack_deadline_seconds or limits.DEFAULT_ACK_DEADLINE
        loop = asyncio.get_running_loop()
        last = loop.time() + wait_seconds  # what the caller's deadline allows
        if not runner.joined.is_set():
            # The first pull of a runner: joining the group does not count as waiting for
            # messages (--pull-max-wait-seconds), only against the caller's own deadline.
            with contextlib.suppress(TimeoutError):
                await within(runner.joined.wait(), min(JOIN_WAIT_SECONDS, wait_seconds))
            self._activity.touch(self._store.get("subscription", res.name) or res)  # still in use
        if not runner.caught_up.is_set():
            await runner.catch_up(max_messages, min(CATCH_UP_SECONDS, last - loop.time()))
        end = min(last, loop.time() + self._settings.pull_max_wait_seconds)
        while True:
            lease_until = now_ms() + deadline_s * 1000
            taken = runner.take(max_messages, lease_until, self.response_budget())
            if taken:
                break
            remaining = end - loop.time()
            expiry = runner.next_expiry_ms()
            if expiry is not None:
                remaining = min(remaining, max(0.0, (expiry - now_ms()) / 1000) + 0.001)
            if end - loop.time() <= 0:
                return []
            runner.ready.clear()
            if runner.has_ready():
                continue
            try:
                await within(runner.ready.wait(), max(0.001, remaining))
            except TimeoutError:
                pass
        return await self.deliver(res, runner, taken, lease_until)

    async def deliver(
        self,
        res: StoredSubscription,
        runner: SubscriptionRunner,
        taken: list[Taken],
        lease_until: int,
    ) -> list[Delivery]:
        return await runner.deliver(res, taken, lease_until)

    def record_activity(self, subscription: str) -> None:
        """Count a call that names the subscription as activity for its expiration (the early
        API's GetSubscription: docs/legacy-api.md)."""
        self._activity.touch(self._subscription(subscription))

    # -- Acknowledge / ModifyAckDeadline ------------------------------------------------------

    async def acknowledge(self, subscription: str, ack_ids: Sequence[str], forwarded: bool = False) -> None:
        await self._settle(subscription, ack_ids, None, forwarded)

    async def _settle(
        self, subscription: str, ack_ids: Sequence[str], seconds: int | None, forwarded: bool
    ) -> None:
        res = self._subscription(subscription)
        self._activity.touch(res)
        await self._acks.settle(res, ack_ids, seconds, forwarded)

    async def modify_ack_deadline(
        self, subscription: str, ack_ids: Sequence[str], seconds: int, forwarded: bool = False
    ) -> None:
        limits.modify_deadline(seconds)
        await self._settle(subscription, ack_ids, seconds, forwarded)

    # -- StreamingPull ---------------------------------------------------------------------

    async def open_stream(
        self,
        subscription: str,
        deadline_seconds: int,
        max_messages: int,
        max_bytes: int,
        client: bool = False,
    ) -> StreamSession:
        """A flow-controlled session. `client`: a client's StreamingPull, whose limits
        --stream-run-ahead multiplies; the gateway's own sessions (push) keep theirs exactly."""
        res = self._subscription(subscription)
        _require_source(res)
        limits.ack_deadline(deadline_seconds, "stream_ack_deadline_seconds")
        if deadline_seconds == 0:
            raise InvalidArgument("stream_ack_deadline_seconds is required in the first request.")
        runner = await self._runner(res)
        self._activity.touch(res)
        settings = self._settings
        session = StreamSession(
            self,
            res,
            runner,
            deadline_seconds,
            max_messages,
            max_bytes,
            settings.stream_max_seconds,
            settings.stream_run_ahead if client else 1.0,
        )
        self._streams.add(session)
        return session

    def forget_stream(self, session: StreamSession) -> None:
        self._streams.discard(session)

    def close_streams(self) -> None:
        """End every open stream with UNAVAILABLE, so clients reconnect (to another process)."""
        for session in list(self._streams):
            session.close("The gateway is shutting down; reconnect.")

    def properties(self, subscription: str) -> tuple[bool, bool]:
        """(exactly_once_delivery_enabled, message_ordering_enabled) as of now."""
        res = self._store.get("subscription", subscription)
        if res is None:
            return False, False
        return res.proto.enable_exactly_once_delivery, res.proto.enable_message_ordering


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("stopping a subscription runner failed: %s", task.exception())


def _record_key(record: Record) -> bytes | None:
    """Ordered delivery: a record's ordering key is its Kafka key."""
    return record.key
