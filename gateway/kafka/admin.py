"""Kafka administration: topics, partition end offsets, consumer-group offsets.

Every call is off the event loop: admin futures are wrapped, blocking metadata calls run in a
thread. Kafka errors become core errors here, in one place.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import AlterConfigOpType as AlterConfigOpType  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigEntry as ConfigEntry  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigResource as ConfigResource  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigSource as ConfigSource  # type: ignore[attr-defined]
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]
from confluent_kafka.admin import OffsetSpec as OffsetSpec  # type: ignore[attr-defined]
from confluent_kafka.admin import ResourceType as ResourceType  # type: ignore[attr-defined]

from gateway.clock import within
from gateway.errors import AlreadyExists, FailedPrecondition, NotFound, PermissionDenied, Unavailable
from gateway.kafka import client_config
from gateway.kafka.acls import GROUP, INTERNAL_TOPIC_OPERATIONS, TOPIC, Need, denial, missing
from gateway.kafka.clientlog import client_logger
from gateway.once import OnePerKey

log = logging.getLogger(__name__)
_rdkafka_log = client_logger(__name__)  # librdkafka's own lines, rate-limited
T = TypeVar("T")
TIMEOUT = 15.0
# How often the admin client asks a broker for the cluster's metadata, so for the node it sends
# controller requests to (creating, deleting and describing topics). A KRaft broker names any
# live broker as the "controller", and librdkafka keeps sending to the one it was told of for as
# long as that node is down, asking nothing new meanwhile: with its default of 5 minutes, a
# killed broker of a cluster left every such call timing out for minutes, readiness included.
# Refreshed this often, the calls find a live node within this long of the cluster fencing the
# dead one (tests/integration/test_broker_failover.py).
METADATA_REFRESH_MS = 2_000
LOG_POLL_SECONDS = 1.0  # how often the admin client's queued log lines are served (Admin)


_REFUSED_LOGIN = {KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION}
_USING = ("READ", "WRITE", "DESCRIBE_CONFIGS")  # what reading, writing and checking a topic take


def _error(exc: BaseException, what: str, needs: tuple[Need, ...] = ()) -> Exception:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        code = err.code()
        if code == KafkaError.TOPIC_ALREADY_EXISTS:
            return AlreadyExists(f"{what}: the Kafka topic exists already")
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            return NotFound(f"{what}: no such Kafka topic")
        if code == KafkaError.GROUP_ID_NOT_FOUND:
            return NotFound(f"{what}: no such consumer group")
        refused = denial(what, err, needs)
        if refused is not None:
            return refused
        if code in _REFUSED_LOGIN:
            return PermissionDenied(f"{what}: Kafka refused the gateway's login: {err.str()}")
        if code in (
            KafkaError.TOPIC_EXCEPTION,
            KafkaError.INVALID_CONFIG,
            KafkaError.INVALID_PARTITIONS,
            KafkaError.INVALID_REPLICATION_FACTOR,
            KafkaError.POLICY_VIOLATION,
        ):
            return FailedPrecondition(f"{what}: Kafka refused: {err.str()}")
        return Unavailable(f"{what}: {err.str()}")
    return Unavailable(f"{what}: {exc}")


def _unanswered(exc: BaseException) -> bool:
    """Whether a call failed because Kafka did not answer it (our timeout or librdkafka's, or
    the connection gone), not because it answered no."""
    cause = exc.__cause__
    if isinstance(cause, TimeoutError):
        return True
    err = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
    return isinstance(err, KafkaError) and err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)


async def _await(fut: concurrent.futures.Future[T], what: str, *needs: Need) -> T:
    """The future's result; Kafka's errors as core errors (`needs`: what the call needs of the
    authorizer, named when it refuses)."""
    try:
        return await within(asyncio.wrap_future(fut), TIMEOUT)
    except TimeoutError as exc:
        raise Unavailable(f"{what}: Kafka did not answer within {TIMEOUT:.0f} s") from exc
    except KafkaException as exc:
        raise _error(exc, what, needs) from exc


def _source(entry: ConfigEntry) -> int:
    """Where a described config comes from, as ConfigSource's number (the client gives an int)."""
    source: Any = entry.source
    return int(getattr(source, "value", source))


@dataclasses.dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic the gateway needs: `required` configs are verified on an existing topic and set
    right where wrong; `config` is only given at creation. `access`: the operations the
    gateway's principal must be allowed on it, checked where the cluster tells (every internal
    topic: those of the gateway's ACL set, acls.py)."""

    name: str
    partitions: int
    required: Mapping[str, str]
    config: Mapping[str, str] = dataclasses.field(default_factory=dict)
    access: tuple[str, ...] = INTERNAL_TOPIC_OPERATIONS


class Admin:
    """The gateway's admin client. Used as `async with`, it also serves librdkafka's log lines
    (clientlog.py), which confluent-kafka hands over only from `poll()`: no admin call polls,
    so without it they were never logged and piled up in the client's queue."""

    def __init__(self, config: Mapping[str, str | int | bool], replication_factor: int = -1) -> None:
        self._config = client_config(config, {"topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS})
        self._client = AdminClient(self._config, logger=_rdkafka_log)
        self._replication = replication_factor
        self._polling: asyncio.Task[None] | None = None
        # Calls that go to a consumer group's coordinator (describe, list and alter offsets,
        # delete) have a client of their own, thrown away after any of them went unanswered.
        # librdkafka keeps such a request queued after it timed out, and when the coordinator
        # answers again it frees the request's state twice and aborts the process
        # (rd_kafka_enq_once_del_source_return: eonce->refcnt > 0; librdkafka#4605, still in
        # confluent-kafka 2.16.1): seen after a gateway was cut from its broker for 40 s, and
        # after a broker's disk filled up. A client destroyed takes its queued requests with it.
        self._groups = AdminClient(self._config, logger=_rdkafka_log)
        self._groups_made = 0  # how many times it was replaced
        self._dropping: set[asyncio.Task[None]] = set()
        # One DescribeGroups per group at a time, shared by whoever asks meanwhile (forwarded
        # acks ask on every call).
        self._describing: OnePerKey[str, tuple[bool, dict[int, str]]] = OnePerKey()

    async def __aenter__(self) -> Admin:
        self._polling = asyncio.create_task(self._poll(), name="kafka-admin-log")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._polling is not None:
            self._polling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._polling
        self._client.poll(0)  # the last lines
        self._groups.poll(0)
        await asyncio.gather(*self._dropping, return_exceptions=True)

    async def _poll(self) -> None:
        while True:
            self._client.poll(0)  # serves queued log lines only: never blocks
            self._groups.poll(0)
            await asyncio.sleep(LOG_POLL_SECONDS)

    async def _coordinated(
        self, call: Callable[[AdminClient], concurrent.futures.Future[T]], what: str, *needs: Need
    ) -> T:
        """`call` on the group client; if Kafka did not answer, that client is replaced by a
        new one and destroyed, and what it still has queued with it (see __init__)."""
        made = self._groups_made
        future = call(self._groups)  # (no reference held over the wait: see _drop_groups_client)
        try:
            return await _await(future, what, *needs)
        except Unavailable as exc:
            if _unanswered(exc) and made == self._groups_made:  # (failing together: replaced once)
                self._drop_groups_client()
            raise

    def _drop_groups_client(self) -> None:
        self._groups_made += 1
        old, self._groups = self._groups, AdminClient(self._config, logger=_rdkafka_log)
        old.poll(0)  # its log lines
        log.info("a consumer-group call went unanswered: its admin client is replaced")
        box = [old]
        del old

        async def drop() -> None:  # destroying may block: the last reference goes in a thread
            await asyncio.to_thread(box.clear)

        task = asyncio.get_running_loop().create_task(drop(), name="kafka-admin-drop")
        self._dropping.add(task)
        task.add_done_callback(self._dropping.discard)

    async def create_topic(self, name: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
        new = NewTopic(name, partitions, self._replication, config=dict(config or {}))
        futures = self._client.create_topics([new], operation_timeout=TIMEOUT)
        await _await(futures[name], f"creating Kafka topic {name}", Need("CREATE", TOPIC, name))

    async def create_topic_retrying(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, str] | None = None,
        wait: float = 30.0,
    ) -> None:
        """Create a topic, waiting out a deletion of the same name still in progress."""
        loop = asyncio.get_running_loop()
        end = loop.time() + wait
        while True:
            try:
                return await self.create_topic(name, partitions, config)
            except AlreadyExists:
                if loop.time() > end or await self.partitions(name) is not None:
                    raise
                await asyncio.sleep(0.25)  # marked for deletion: Kafka finishes shortly

    async def set_topic_config(self, name: str, config: Mapping[str, str | None]) -> None:
        """Set (or, with None, reset to the default) configs of a topic."""
        entries = [
            ConfigEntry(
                k, v, incremental_operation=(AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET)
            )
            for k, v in config.items()
        ]
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futures = self._client.incremental_alter_configs([resource])
        for fut in futures.values():
            await _await(fut, f"configuring Kafka topic {name}", Need("ALTER_CONFIGS", TOPIC, name))

    async def delete_topic(self, name: str, settle: float = 0.0) -> None:
        """With `settle`, then wait up to that many seconds until the broker asked no longer
        lists the topic: Kafka has taken a deletion when it answers, but a broker's copy of the
        metadata may show the topic a moment longer, and a create of the same name meanwhile
        would take it for one of its own (see Topics.create)."""
        futures = self._client.delete_topics([name], operation_timeout=TIMEOUT)
        try:
            await _await(futures[name], f"deleting Kafka topic {name}", Need("DELETE", TOPIC, name))
        except NotFound:
            return
        if settle:
            await self._gone_within(name, settle, pause=0.1)

    async def remove_topic(self, name: str, settle: float = 5.0) -> None:
        """Delete a topic and make sure it stays gone: a create that timed out may still
        complete a moment later (undoing a create that failed half way)."""
        await self.delete_topic(name)
        if not await self._gone_within(name, settle, pause=0.25, delete_again=True):
            raise Unavailable(f"Kafka topic {name} still exists {settle:.0f} s after its deletion")

    async def _gone_within(self, name: str, seconds: float, pause: float, delete_again: bool = False) -> bool:
        """Whether the broker asked stops listing the topic within `seconds`, asking every
        `pause` seconds, and with `delete_again` deleting it again before each new look."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while await self.partitions(name) is not None:
            if loop.time() >= end:
                return False
            await asyncio.sleep(pause)
            if delete_again:
                await self.delete_topic(name)
        return True

    async def answers(self, topic: str, wait: float) -> None:
        """UNAVAILABLE unless the cluster answers within `wait` s a Metadata request for `topic`
        (which must exist), sent to any broker that is up, in a thread. Unlike DescribeTopics,
        which librdkafka sends to the node it holds for the controller, it does not wait on a
        broker that died until the cluster fences it and the client learns so; as a side effect
        it refreshes the client's metadata, the controller's node included. It never creates the
        topic (allow.auto.create.topics is false for every client: client_config)."""
        try:
            found = await asyncio.to_thread(self._client.list_topics, topic, wait)
        except KafkaException as exc:
            raise Unavailable(f"Kafka did not answer: {exc.args[0].str()}") from exc
        error = found.topics[topic].error if topic in found.topics else None
        if topic not in found.topics or error is not None:
            raise Unavailable(
                f"Kafka topic {topic}: {error.str() if error is not None else 'not in the answer'}"
            )

    async def partitions(self, name: str, wait: float = 0.0) -> int | None:
        """The topic's partition count, or None when it does not exist.

        A DescribeTopics request: asynchronous (no thread), and never creating the topic. A
        broker answers from its copy of the cluster's metadata, which learns of a topic made a
        moment ago a little after the controller has confirmed it: with `wait`, a topic not
        found is looked for again until that many seconds have passed."""
        found = await self._describe(name, wait=wait)
        return None if found is None else found[0]

    async def _describe(
        self, name: str, operations: bool = False, wait: float = 0.0
    ) -> tuple[int, frozenset[str] | None] | None:
        """`_describe_once`, asked again every 0.1 s for up to `wait` seconds while the topic is
        not found (a topic made a moment ago may not be known to every broker yet)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + wait
        while (found := await self._describe_once(name, operations)) is None:
            if loop.time() >= end:
                return None
            await asyncio.sleep(0.1)
        return found

    async def _describe_once(self, name: str, operations: bool) -> tuple[int, frozenset[str] | None] | None:
        """(partitions, the operations the gateway's principal may do on it) of a topic, None
        when it does not exist. The operations (names of AclOperation) only when asked for and
        the cluster tells: None from a cluster without an authorizer."""
        futures = self._client.describe_topics(
            TopicCollection([name]), request_timeout=TIMEOUT, include_authorized_operations=operations
        )
        try:
            desc = await _await(
                futures[name], f"describing Kafka topic {name}", Need("DESCRIBE", TOPIC, name)
            )
        except NotFound:
            return None
        allowed = desc.authorized_operations if operations else None
        return len(desc.partitions), (None if allowed is None else frozenset(op.name for op in allowed))

    async def check_access(self, spec: TopicSpec, wait: float = 5.0) -> None:
        """PERMISSION_DENIED naming every operation of `spec.access` Kafka's authorizer does
        not allow the gateway on the topic; nothing when it allows all, or does not tell. A
        topic made a moment ago may not be known to every broker yet: waited for."""
        found = await self._describe(spec.name, operations=True, wait=wait)
        if found is not None:
            self._require(spec, found[1])

    @staticmethod
    def _require(spec: TopicSpec, allowed: frozenset[str] | None) -> None:
        if allowed is None:
            return
        lacking = [Need(op, TOPIC, spec.name) for op in spec.access if op not in allowed]
        if lacking:
            raise missing(f"Kafka topic {spec.name}", lacking)

    async def topic_config(self, name: str) -> dict[str, str]:
        """The topic's effective configs (its own, else the broker's defaults)."""
        resource = ConfigResource(ResourceType.TOPIC, name)
        futures = self._client.describe_configs([resource], request_timeout=TIMEOUT)
        entries = await _await(
            futures[resource],
            f"reading the configs of Kafka topic {name}",
            Need("DESCRIBE_CONFIGS", TOPIC, name),
        )
        return {key: entry.value for key, entry in entries.items() if entry.value is not None}

    async def topic_overrides(self, name: str) -> dict[str, str]:
        """The configs set on the topic itself (not the broker's defaults)."""
        resource = ConfigResource(ResourceType.TOPIC, name)
        futures = self._client.describe_configs([resource], request_timeout=TIMEOUT)
        entries = await _await(
            futures[resource],
            f"reading the configs of Kafka topic {name}",
            Need("DESCRIBE_CONFIGS", TOPIC, name),
        )
        return {
            key: entry.value
            for key, entry in entries.items()
            if entry.value is not None and _source(entry) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        }

    async def ensure_topic(self, spec: TopicSpec) -> None:
        """Create the topic as `spec` says, or verify the existing one (see `verify_topic`)."""
        try:
            await self.create_topic(spec.name, spec.partitions, {**spec.config, **spec.required})
            log.info("created Kafka topic %s (%d partitions)", spec.name, spec.partitions)
        except AlreadyExists:
            await self.verify_topic(spec, manage=True)
        else:
            await self.check_access(spec)

    async def verify_topic(self, spec: TopicSpec, manage: bool = False) -> None:
        """Check an existing topic the gateway relies on. A wrong required config is set right
        (logged) where Kafka lets us; what cannot be mended raises FailedPrecondition naming the
        topic, what is wrong and the command that mends it. Operations of `spec.access` the
        authorizer does not allow raise PermissionDenied naming them: those that using the
        topic takes, or with `manage` all (creating and deleting such topics too)."""
        found = await self._describe(spec.name, operations=True)
        if found is None:
            raise NotFound(f"Kafka topic {spec.name} does not exist")
        partitions, allowed = found
        self._require(
            spec
            if manage
            else dataclasses.replace(spec, access=tuple(op for op in spec.access if op in _USING)),
            allowed,
        )
        if partitions != spec.partitions:
            raise FailedPrecondition(
                f"Kafka topic {spec.name} has {partitions} partitions where the gateway needs "
                f"{spec.partitions}; it was not created by the gateway (was it auto-created?). "
                f"Delete it (kafka-topics.sh --delete --topic {spec.name}) if it holds nothing "
                "you need, and the gateway creates it anew"
            )
        current = await self.topic_config(spec.name)
        wrong = {k: v for k, v in spec.required.items() if current.get(k) != v}
        if not wrong:
            return
        was = ", ".join(f"{k}={current.get(k)}" for k in wrong)
        try:
            await self.set_topic_config(spec.name, wrong)
        except (FailedPrecondition, PermissionDenied, Unavailable) as exc:
            configs = ",".join(f"{k}={v}" for k, v in wrong.items())
            raise FailedPrecondition(
                f"Kafka topic {spec.name} has {was}, and the gateway could not change that "
                f"({exc.message}). Mend it with: kafka-configs.sh --bootstrap-server BROKER "
                f"--alter --entity-type topics --entity-name {spec.name} --add-config {configs}"
            ) from exc
        log.warning(
            "Kafka topic %s had %s; set %s", spec.name, was, ", ".join(f"{k}={v}" for k, v in wrong.items())
        )

    async def end_offsets(self, name: str, partitions: int) -> dict[int, int]:
        return await self._list_offsets(name, partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]

    async def latest_offsets(
        self, partitions: Iterable[tuple[str, int]], patience: float
    ) -> dict[tuple[str, int], int]:
        """The end offset of each (topic, partition), in one ListOffsets call, no retry: those
        Kafka did not answer within `patience` seconds are left out (the metrics' backlog)."""
        request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}  # type: ignore[no-untyped-call]
        if not request:
            return {}
        futures = self._client.list_offsets(request, request_timeout=patience)
        waiting = {asyncio.wrap_future(fut): (tp.topic, tp.partition) for tp, fut in futures.items()}
        done, pending = await asyncio.wait(waiting, timeout=patience)
        for fut in pending:
            fut.cancel()
        return {
            waiting[fut]: fut.result().offset
            for fut in done
            if not fut.cancelled() and fut.exception() is None
        }

    async def offsets_for_time(self, name: str, partitions: int, ms: int) -> dict[int, int]:
        """Per partition, the first offset whose timestamp is >= ms (or the end)."""
        found = await self._list_offsets(name, partitions, OffsetSpec.for_timestamp(ms))  # type: ignore[no-untyped-call]
        ends = await self.end_offsets(name, partitions)
        return {p: (o if o >= 0 else ends[p]) for p, o in found.items()}

    async def _list_offsets(self, name: str, partitions: int, spec: OffsetSpec) -> dict[int, int]:
        """Offsets per partition; a topic created a moment ago may still be electing leaders.

        librdkafka answers from the leaders it has cached; after a topic was deleted and made
        anew under the same name, the long-lived client kept answering "No leaders found" for
        minutes. A retry therefore asks through a client of its own, with no cache to trust."""
        request = {TopicPartition(name, p): spec for p in range(partitions)}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        client, fresh = self._client, None
        try:
            while True:
                try:
                    futures = client.list_offsets(request, request_timeout=TIMEOUT)
                    out: dict[int, int] = {}
                    for tp, fut in futures.items():
                        info = await _await(fut, f"reading offsets of {name}", Need("DESCRIBE", TOPIC, name))
                        out[tp.partition] = info.offset
                    return out
                except Unavailable:
                    if loop.time() > deadline:
                        raise
                    await asyncio.sleep(0.2)
                    if fresh is None:
                        fresh = await asyncio.to_thread(AdminClient, self._config, logger=_rdkafka_log)
                        client = fresh
        finally:
            if fresh is not None:  # the last reference goes in a thread: destroying may block
                fresh.poll(0)  # its log lines (see Admin)
                box = [fresh]
                del client, fresh
                await asyncio.to_thread(box.clear)

    async def commit_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        what = f"setting offsets of consumer group {group}"
        needs = (Need("READ", GROUP, group), Need("READ", TOPIC, topic))
        done = await self._coordinated(
            lambda c: c.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group],
            what,
            *needs,
        )
        # Kafka answers per partition (OffsetCommit has no error of its own): a refused group
        # or topic shows only there.
        for tp in done.topic_partitions or ():
            if tp.error is not None:
                raise _error(KafkaException(tp.error), what, needs)

    async def group_owners(self, group: str) -> dict[int, str]:
        """Partition -> client.id of the member that owns it, for a group's current assignment."""
        return (await self.group_assignment(group))[1]

    async def group_assignment(self, group: str) -> tuple[bool, dict[int, str]]:
        """(whether the group is settled, partition -> client.id of its owner). While a group
        rebalances, its members' assignments are not known: settled is False then."""
        return await self._describing.run(group, lambda: self._group_assignment(group))

    async def _group_assignment(self, group: str) -> tuple[bool, dict[int, str]]:
        desc = await self._coordinated(
            lambda c: c.describe_consumer_groups([group], request_timeout=TIMEOUT)[group],
            f"describing consumer group {group}",
            Need("DESCRIBE", GROUP, group),
        )
        settled = desc.state in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)
        owners = {
            tp.partition: member.client_id
            for member in desc.members
            for tp in (member.assignment.topic_partitions if member.assignment else [])
        }
        return settled, owners

    async def group_offsets(self, group: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """The group's committed offsets of these partitions of `topic` (those it has)."""
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])
        done = await self._coordinated(
            lambda c: c.list_consumer_group_offsets([request], request_timeout=TIMEOUT)[group],
            f"reading offsets of consumer group {group}",
            Need("DESCRIBE", GROUP, group),
        )
        return {
            tp.partition: tp.offset
            for tp in done.topic_partitions or ()
            if tp.error is None and tp.offset >= 0
        }

    async def delete_group(self, group: str) -> bool:
        """Delete a consumer group. True when it is gone (deleted now, or never there); False
        while it still has members or Kafka cannot answer."""
        try:
            await self._coordinated(
                lambda c: c.delete_consumer_groups([group], request_timeout=TIMEOUT)[group],
                f"deleting consumer group {group}",
                Need("DELETE", GROUP, group),
            )
        except NotFound:
            return True
        except (Unavailable, FailedPrecondition) as exc:
            log.debug("consumer group %s not deleted yet: %s", group, exc)
            return False
        return True

    async def check_group_access(self, group: str, operations: tuple[str, ...], wait: float = 15.0) -> None:
        """PERMISSION_DENIED naming every one of `operations` Kafka's authorizer does not allow
        the gateway on the consumer group (existing or not); nothing when the cluster does not
        tell. A new cluster has no group coordinator until it has made its offsets topic:
        waited for up to `wait` seconds, then the check is given up (logged)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + wait
        while True:
            try:
                desc = await self._coordinated(
                    lambda c: c.describe_consumer_groups(
                        [group], request_timeout=TIMEOUT, include_authorized_operations=True
                    )[group],
                    f"describing consumer group {group}",
                    Need("DESCRIBE", GROUP, group),
                )
                break
            except (Unavailable, FailedPrecondition, NotFound) as exc:
                if loop.time() > end:
                    log.warning("could not check the ACLs of consumer group %s: %s", group, exc.message)
                    return
                await asyncio.sleep(0.25)
        if desc.authorized_operations is None:
            return
        allowed = {op.name for op in desc.authorized_operations}
        lacking = [Need(op, GROUP, group) for op in operations if op not in allowed]
        if lacking:
            raise missing(f"consumer group {group}", lacking)


def check_connection(config: Mapping[str, str | int | bool], timeout: float = 10.0) -> None:
    """Fail fast, with a clear message, when the cluster cannot be reached or refuses the
    gateway's login (blocking)."""
    where = config.get("bootstrap.servers")
    errors: list[KafkaError] = []  # a refused login shows only here, served by poll()
    settings: dict[str, Any] = {**client_config(config), "error_cb": errors.append}
    client = AdminClient(settings, logger=_rdkafka_log)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            client.poll(0)
            refused = [e for e in errors if e.code() in _REFUSED_LOGIN]
            if refused:
                raise PermissionDenied(
                    f"Kafka at {where} refused the gateway's login: {refused[0].str()}"
                ) from exc
            if time.monotonic() >= deadline:
                raise Unavailable(f"cannot reach Kafka at {where}: {exc}") from exc
