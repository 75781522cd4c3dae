"""Pull, Acknowledge and ModifyAckDeadline, for any subscription, in any gateway process.

Pulls are served by this process's runner of the subscription (started on first use, stopped
after a while unused). An ack or deadline change counts only for a message currently leased
under that ack id, and only the owner of its partition knows the leases: this process judges
the ids of partitions it owns, writes the valid ones to the lease/ack log and applies them at
once; ids of partitions another process owns are forwarded to that process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from gateway.clock import now_ms
from gateway.core import exactly_once, peers, policies
from gateway.core.exactly_once import Ref, commands
from gateway.core.expiration import ActivityRecorder
from gateway.core.policies import Policies
from gateway.core.resources import Resource, ResourceStore
from gateway.core.runner import Delivery, LogWriter, SubscriptionRunner
from gateway.core.streams import StreamSession
from gateway.core.subscriptions import log_topic_spec
from gateway.errors import FailedPrecondition, GatewayError, InvalidArgument, NotFound
from gateway.kafka.admin import Admin
from gateway.kafka.producer import Producer
from gateway.leases.commands import Command
from gateway.settings import Settings
from gateway.translate import ackids, limits, names
from gateway.translate.records import RESPONSE_FRAMING_BYTES, Record

log = logging.getLogger(__name__)
# How long a runner's first pull waits for the group to assign partitions, before its own wait
# for messages: a new group's initial rebalance delay (3 s by default) plus a join.
JOIN_WAIT_SECONDS = 30.0
# How long an ack or deadline change waits for its lease-log write before it answers: a write
# waits for as long as its log partition has no leader (a dead broker led it, until the
# controller notices: 9 s by default), and the official clients block their stream or their
# ack thread on these calls. What is still being written then is answered as _settle says.
SETTLE_PATIENCE_SECONDS = 1.0


def _require_source(res: Resource) -> None:
    if res.meta.get("detached"):
        raise FailedPrecondition(f"Subscription is detached (resource={res.name})")
    if res.meta.get("topic_deleted"):
        raise FailedPrecondition(f"The topic of this subscription was deleted (resource={res.name})")


class DeliveryService:
    def __init__(self, settings: Settings, store: ResourceStore, producer: Producer,
                 kafka_config: dict[str, Any], admin: Admin) -> None:
        self._settings = settings
        self._store = store
        self._producer = producer
        self._config = kafka_config
        self._writer_id = uuid.uuid4().hex[:8]
        self._runners: dict[str, SubscriptionRunner] = {}
        self._starting: dict[str, asyncio.Task[SubscriptionRunner]] = {}
        self._janitor: asyncio.Task[None] | None = None
        self._streams: set[StreamSession] = set()
        self._admin = admin
        self._peers: peers.Peers | None = None
        self.address = ""  # where peers reach this process (set once the server listens)
        self._activity = ActivityRecorder(store)
        store.subscribe(self._on_resource_change)

    def connect_peers(self, address: str, transport: peers.Peers) -> None:
        self.address = address
        self._peers = transport

    async def start(self) -> None:
        self._janitor = asyncio.create_task(self._stop_idle_runners(), name="idle runners")

    async def stop(self) -> None:
        self.close_streams()
        if self._janitor is not None:
            self._janitor.cancel()
        runners, self._runners = list(self._runners.values()), {}
        await asyncio.gather(*(r.stop() for r in runners), return_exceptions=True)

    # -- helpers ---------------------------------------------------------------------------

    def response_budget(self, confirmations: int = 0) -> int:
        """Bytes of messages one Pull or StreamingPull response may carry (Record.wire_size):
        under --pull-response-max-bytes with room for its other fields, such as exactly-once
        confirmations (ack ids, ~100 bytes each). Messages that do not fit stay, unleased, for
        the next response: one too large for the client would fail every time, and spend a
        delivery attempt of each message in it."""
        return self._settings.pull_response_max_bytes - RESPONSE_FRAMING_BYTES - 128 * confirmations

    def _subscription(self, name: str) -> Resource:
        names.subscription(name)
        return self._store.require("subscription", name)

    async def _runner(self, res: Resource) -> SubscriptionRunner:
        runner = self._runners.get(res.name)
        if runner is not None and runner.writer.topic == res.meta["log_topic"] and runner.denied is None:
            return runner
        task = self._starting.get(res.name)
        if task is None:
            task = asyncio.create_task(self._start_runner(res))
            self._starting[res.name] = task
        return await asyncio.shield(task)

    async def _start_runner(self, res: Resource) -> SubscriptionRunner:
        try:
            old = self._runners.pop(res.name, None)
            if old is not None:  # of an earlier subscription of that name, whose log is gone
                await old.stop(discard=True)
            if names.reserved_kafka_topic(res.meta["kafka_topic"], self._settings.internal_prefix):
                raise FailedPrecondition(  # stored by an older gateway: never served
                    f"The subscription {res.name} reads the Kafka topic {res.meta['kafka_topic']}, "
                    "which belongs to Kafka or to the gateway.")
            await self._verify_log(res)
            runner = SubscriptionRunner(
                name=res.name,
                kafka_topic=res.meta["kafka_topic"],
                group_id=res.meta["group_id"],
                writer=self._writer(res),
                producer=self._producer,
                kafka_config=self._config,
                session_timeout_ms=self._settings.session_timeout_ms,
                checkpoint_interval=self._settings.checkpoint_interval_seconds,
                ordered=res.proto.enable_message_ordering,
                client_id=peers.client_id(self.address),
                policies=self._policies(res),
                transactional_prefix=self._settings.internal_prefix,
            )
            await runner.start()
            self._runners[res.name] = runner
            return runner
        finally:
            self._starting.pop(res.name, None)

    async def _verify_log(self, res: Resource) -> None:
        """The lease/ack log must still be as it was made (compacted, one partition per
        partition): checked once per runner, mended where that is safe."""
        try:
            await self._admin.verify_topic(log_topic_spec(res.meta))
        except NotFound as exc:
            raise FailedPrecondition(
                f"The lease/ack log {res.meta['log_topic']} of {res.name} is missing from Kafka; "
                "its acknowledgements are lost. Delete and re-create the subscription.") from exc

    def _writer(self, res: Resource) -> LogWriter:
        runner = self._runners.get(res.name)
        if runner is not None and runner.writer.topic == res.meta["log_topic"]:
            return runner.writer
        return LogWriter(self._producer, res.meta["log_topic"], self._writer_id)

    def _policies(self, res: Resource) -> Policies:
        dead_letter = self._store.get("topic", res.proto.dead_letter_policy.dead_letter_topic)
        return policies.of(res.proto, dead_letter.meta["kafka_topic"] if dead_letter else None)

    def _on_resource_change(self, kind: str, name: str, res: Resource | None) -> None:
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
        stale = res is None or not res.delivers or (
            runner is not None and runner.writer.topic != res.meta["log_topic"])
        if runner is not None and stale:
            self._runners.pop(name, None)
            # Deleted, or re-created under the same name: the old log is going away.
            gone = res is None or runner.writer.topic != res.meta["log_topic"]
            task = asyncio.get_running_loop().create_task(runner.stop(discard=gone))
            task.add_done_callback(_log_failure)

    async def _stop_idle_runners(self) -> None:
        while True:
            await asyncio.sleep(min(30.0, self._settings.idle_subscription_seconds / 2))
            limit = time.monotonic() - self._settings.idle_subscription_seconds
            for name, runner in list(self._runners.items()):
                if runner.last_used < limit:
                    log.info("%s: idle, leaving its consumer group", name)
                    self._runners.pop(name, None)
                    await runner.stop()

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
                await asyncio.wait_for(runner.joined.wait(), min(JOIN_WAIT_SECONDS, wait_seconds))
            self._activity.touch(self._store.get("subscription", res.name) or res)  # still in use
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
                await asyncio.wait_for(runner.ready.wait(), max(0.001, remaining))
            except TimeoutError:
                pass
        return await self.deliver(res, runner, taken, lease_until)

    async def deliver(
        self, res: Resource, runner: SubscriptionRunner, taken: list[tuple[int, int, int, Record]],
        lease_until: int,
    ) -> list[Delivery]:
        return await runner.deliver(res, taken, lease_until)

    # -- Acknowledge / ModifyAckDeadline ------------------------------------------------------

    def _parse(self, res: Resource, ack_ids: Sequence[str]) -> dict[int, list[Ref]]:
        """Validate every ack id before anything is written; ids of another subscription skip."""
        if not ack_ids:
            raise InvalidArgument("No ack IDs given (ack_ids).")
        tag = ackids.subscription_tag(res.name, res.meta["uid"])
        partitions = int(res.meta["partitions"])
        out: dict[int, list[Ref]] = {}
        for ack_id in ack_ids:
            try:
                ref = ackids.decode(ack_id)
            except ackids.MalformedAckId:
                raise InvalidArgument(f"Invalid ack ID: {ack_id[:80]!r} (ack_ids).") from None
            if ref.tag != tag:
                continue
            if not 0 <= ref.partition < partitions:
                raise InvalidArgument(f"Invalid ack ID: {ack_id[:80]!r} names no partition of "
                                      f"{res.name} (ack_ids).")
            out.setdefault(ref.partition, []).append((ack_id, ref))
        return out

    async def _write(
        self, res: Resource, cmds: dict[int, Command], settles: bool, early: bool
    ) -> tuple[set[int], dict[int, BaseException]]:
        """Write each partition's command and apply it here once durable. Returns the
        partitions whose write is still under way after SETTLE_PATIENCE_SECONDS and those
        whose write failed. A late write is applied here when it ends, or, if `early`, at once
        (and when it ends only its key is folded: applying an older deadline change again
        could undo a newer one)."""
        writer = self._writer(res)
        writes = {p: asyncio.ensure_future(writer.write(p, [c])) for p, c in cmds.items()}
        if not writes:
            return set(), {}
        await asyncio.wait(writes.values(), timeout=SETTLE_PATIENCE_SECONDS)
        late: set[int] = set()
        failed: dict[int, BaseException] = {}
        runner = self._runners.get(res.name)
        for p, write in writes.items():
            if not write.done():
                late.add(p)
                if early and runner is not None:
                    runner.apply_local(p, cmds[p], None, settles)
                write.add_done_callback(functools.partial(
                    self._written_late, res.name, p, None if early else cmds[p], settles))
            elif (error := write.exception()) is not None:
                failed[p] = error
            elif runner is not None:
                runner.apply_local(p, cmds[p], write.result()[0][0], settles)
        if settles and runner is not None:
            runner.ready.set()
        return late, failed

    def _written_late(self, name: str, p: int, cmd: Command | None, settles: bool,
                      write: asyncio.Future[list[tuple[bytes, int]]]) -> None:
        """A write answered before it ended has ended: apply `cmd`, or if it was applied
        early (None), fold its key like that of any command applied here."""
        runner = self._runners.get(name)
        if runner is None or write.cancelled():
            return
        if write.exception() is not None:
            log.info("%s: a late lease-log write of partition %d failed: %s", name, p, write.exception())
            return
        key = write.result()[0][0]
        if cmd is None:
            runner.fold(p, key)
            return
        runner.apply_local(p, cmd, key, settles)
        if settles:
            runner.ready.set()

    async def acknowledge(self, subscription: str, ack_ids: Sequence[str], forwarded: bool = False) -> None:
        await self._settle(subscription, ack_ids, None, forwarded)

    async def modify_ack_deadline(
        self, subscription: str, ack_ids: Sequence[str], seconds: int, forwarded: bool = False
    ) -> None:
        limits.modify_deadline(seconds)
        await self._settle(subscription, ack_ids, seconds, forwarded)

    async def _settle(
        self, subscription: str, ack_ids: Sequence[str], seconds: int | None, forwarded: bool
    ) -> None:
        """Ack (seconds None) or set deadlines. With exactly-once delivery, only current leases
        count: the others are reported per id, and ids of partitions another process owns are
        judged by that process.

        A write still under way after SETTLE_PATIENCE_SECONDS (its log partition lost its
        leader) goes on in the background. Its deadline change, or its ack without exactly-once,
        takes effect in this process at once and is answered OK: it is in the next checkpoint,
        and if this process dies first the message is only delivered again, as at-least-once
        allows. An exactly-once ack is answered OK only once durable: until then its ids are
        reported as transient failures, which the client retries."""
        res = self._subscription(subscription)
        refs = self._parse(res, ack_ids)
        self._activity.touch(res)
        epoch = int(res.meta.get("epoch", 0))
        settles = seconds in (None, 0)
        runner = self._runners.get(res.name)
        local, remote = exactly_once.split(runner, refs)
        strict = res.proto.enable_exactly_once_delivery
        valid, failures = exactly_once.judge(runner, local, seconds, now_ms(), hold=strict)
        if not strict:
            # Ids of no current lease change nothing and are not reported (ack ids can be made
            # up: only the owner's leases say which are real). The owner judges the others.
            _, failed = await self._write(res, commands(valid, seconds, epoch), settles, early=True)
            if failed:
                raise next(iter(failed.values()))
            if remote:
                await self._forward(res, remote, seconds, forwarded)
            return
        late, failed = await self._write(res, commands(valid, seconds, epoch), settles,
                                         early=seconds is not None)
        for p in (late if seconds is None else set()) | failed.keys():
            failures |= dict.fromkeys((i for i, _ in valid[p]), exactly_once.NOT_WRITTEN)
        if remote:
            failures |= await self._forward(res, remote, seconds, forwarded)
        if failures:
            raise exactly_once.failed(ack_ids, failures)

    async def _forward(
        self, res: Resource, remote: dict[int, list[Ref]], seconds: int | None, forwarded: bool
    ) -> dict[str, str]:
        ids = {p: [i for i, _ in rs] for p, rs in remote.items()}
        if forwarded or self._peers is None:
            return {i: exactly_once.NOT_OWNER for group in ids.values() for i in group}
        try:
            owners = await self._admin.group_owners(res.meta["group_id"])
        except GatewayError:
            owners = {}
        by_address: dict[str, list[str]] = {}
        failures: dict[str, str] = {}
        for p, group in ids.items():
            address = peers.address_of(owners.get(p, ""))
            if address is None or address == self.address:
                failures |= dict.fromkeys(group, exactly_once.NOT_OWNER)
                if not owners:  # nobody serves the subscription: take it on, the retry will land
                    asyncio.get_running_loop().create_task(self._runner(res))
            else:
                by_address.setdefault(address, []).extend(group)
        for address, group in by_address.items():
            try:
                failures |= await self._peers.settle(address, res.name, group, seconds)
            except Exception as exc:  # noqa: BLE001 - the owner is unreachable: retry later
                log.info("forwarding %d ack ids to %s failed: %s", len(group), address, exc)
                failures |= dict.fromkeys(group, exactly_once.UNREACHABLE)
        return failures

    # -- StreamingPull ---------------------------------------------------------------------

    async def open_stream(self, subscription: str, deadline_seconds: int, max_messages: int,
                          max_bytes: int) -> StreamSession:
        res = self._subscription(subscription)
        _require_source(res)
        limits.ack_deadline(deadline_seconds, "stream_ack_deadline_seconds")
        if deadline_seconds == 0:
            raise InvalidArgument("stream_ack_deadline_seconds is required in the first request.")
        runner = await self._runner(res)
        self._activity.touch(res)
        session = StreamSession(self, res, runner, deadline_seconds, max_messages, max_bytes,
                                self._settings.stream_max_seconds)
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
