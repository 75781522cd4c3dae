"""The one module that consumes from Kafka.

Blocking librdkafka calls run on threads owned here; what they read is handed to the event loop
by the callbacks the caller supplies (which use `call_soon_threadsafe`). Offsets are committed
only when the caller says so: only what is acknowledged moves a group's committed offset.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Literal, NamedTuple, Protocol

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, TopicPartition

from gateway.errors import PermissionDenied
from gateway.kafka import client_config
from gateway.kafka.acls import GROUP, TOPIC, Need, denial, refused_resource
from gateway.kafka.clientlog import client_logger
from gateway.translate.records import RECEIVED_MESSAGE_OVERHEAD, Record, wire_size

log = logging.getLogger(__name__)
_rdkafka_log = client_logger(__name__)  # librdkafka's own lines, rate-limited
Config = Mapping[str, str | int | bool]
POLL_SECONDS = 0.1
TAIL_POLL_SECONDS = 0.25  # see TailReader
IDLE_POLL_SECONDS = 0.5
# How long a new assignment waits in all for its partitions' end offsets (GroupFetcher._ends).
ENDS_SECONDS = 2.0
__all__ = [
    "OFFSET_END",
    "FetchListener",
    "GroupFetcher",
    "LogEntry",
    "Offsets",
    "TailEntry",
    "TailReader",
    "bounds",
    "end_offset",
    "first_timestamp",
    "read_to_end",
]
BATCH = 1000

# Made per record read, so plain tuples, named here only: a named tuple costs 2-3 times a tuple
# to build (and more to unpack, which CPython does fastest for exact tuples).
LogEntry = tuple[int, bytes | None, bytes | None]  # (offset, key, value): what read_to_end returns
TailEntry = tuple[str, int, int, bytes | None, bytes | None]  # (topic, partition, offset, key, value)
TopicPart = tuple[str, int]  # (topic, partition): what a TailReader follows


class Offsets(NamedTuple):
    """A partition's first offset and its end (the offset its next record will get)."""

    first: int
    end: int


def _is_real(msg: confluent_kafka.Message) -> bool:
    err = msg.error()
    if err is None:
        return True
    code = err.code()
    if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
        # Readers assign partitions and never use their group, but librdkafka still looks up
        # its coordinator: a cluster with an authorizer refuses that, harmlessly.
        log.debug("reader's group refused (unused): %s", err)
    elif code != KafkaError._PARTITION_EOF:
        _rdkafka_log.warning("consumer error: %s", err)  # repeats while a broker is down
    return False


def _refusal(msg: confluent_kafka.Message, what: str, *needs: Need) -> PermissionDenied | None:
    """The PermissionDenied of an error message that is Kafka's authorizer refusing one of
    `needs` (a reader's unused group is no need of it)."""
    err = msg.error()
    if err is None or refused_resource(err) not in {n.resource for n in needs}:
        return None
    return denial(what, err, needs)


# Record((...)) without the Python frame of a named tuple's __new__: one per fetched record.
_new_record = functools.partial(tuple.__new__, Record)


def to_record(msg: confluent_kafka.Message) -> Record:
    """`records.record` of a fetched message, without its calls for the common record: a value,
    no key, no headers (what Pub/Sub publishers without ordering keys or attributes write)."""
    headers, key, value = msg.headers(), msg.key(), msg.value()
    if isinstance(headers, dict):
        headers = list(headers.items())
    if headers is None and key is None and value is not None:
        size, wire = len(value), len(value) + RECEIVED_MESSAGE_OVERHEAD  # (records.wire_size)
    else:
        size, wire = len(value or b"") + len(key or b""), wire_size(key, value, headers)
    return _new_record(  # partition, offset, timestamp_ms, key, value, headers, size, wire_size
        (msg.partition() or 0, msg.offset() or 0, msg.timestamp()[1], key, value, headers, size, wire)
    )


def _reader_config(base: Config, wait_ms: int = 100) -> dict[str, str | int | float | bool]:
    """`wait_ms`: fetch.wait.max.ms. 100 for reads to an end, which wait out an empty fetch
    once per partition; a TailReader's is longer (see there)."""
    return client_config(
        base,
        {
            "group.id": f"pubsub-gateway-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": wait_ms,
        },
    )


def _on_progress_commit(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
    """A failed commit of applied progress only delays a waiting writer until the next one."""
    if err is not None:
        log.debug("committing applied progress failed: %s", err)


def _watermarks(consumer: confluent_kafka.Consumer, tp: TopicPartition, timeout: float) -> Offsets:
    """(low, high) of a partition, retrying while a new topic's leader is being elected."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(1.0, deadline - time.monotonic()))
            return Offsets(int(low), int(high))
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            refused = isinstance(err, KafkaError) and denial(
                f"reading the offsets of Kafka topic {tp.topic}", err, [Need("DESCRIBE", TOPIC, tp.topic)]
            )
            if refused:
                raise refused from exc
            retriable = isinstance(err, KafkaError) and (
                err.retriable()
                or err.code()
                in (
                    KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    KafkaError._UNKNOWN_PARTITION,
                )
            )
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def read_to_end(
    base: Config,
    topic: str,
    partition: int,
    timeout: float = 30.0,
    start: int | None = None,
    end: int | None = None,
) -> list[LogEntry]:
    """Blocking: everything now in one partition, as (offset, key, value); or what lies in
    [start, end) of it (clamped to what the partition holds)."""
    return [
        (m.offset() or 0, m.key(), m.value()) for m in _records(base, topic, partition, timeout, start, end)
    ]


def first_timestamp(
    base: Config,
    topic: str,
    partition: int,
    start: int,
    skip: Sequence[tuple[int, int]] = (),  # (start, end) ranges
    timeout: float = 30.0,
) -> int | None:
    """Blocking: the timestamp (ms) of the first record at or after `start` whose offset is in
    none of the half-open ranges `skip`, or None when the partition holds none."""
    for msg in _records(base, topic, partition, timeout, start):
        offset = msg.offset() or 0
        if not any(s <= offset < e for s, e in skip):
            return int(msg.timestamp()[1])
    return None


def _records(
    base: Config,
    topic: str,
    partition: int,
    timeout: float,
    start: int | None = None,
    end: int | None = None,
) -> Iterator[confluent_kafka.Message]:
    """Blocking: the records now in [start, end) of one partition (clamped to what it holds; the
    whole partition by default), in order; the consumer is closed when the iteration ends."""
    consumer = confluent_kafka.Consumer(_reader_config(base), logger=_rdkafka_log)
    try:
        low, high = _watermarks(consumer, TopicPartition(topic, partition), timeout)
        if start is not None:
            low = max(low, start)
        if end is not None:
            high = min(high, end)
        if high <= low:
            return
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING if start is None else low)])
        position = low
        deadline = time.monotonic() + timeout
        while position < high:
            # consume() waits for all it asks for: ask for no more than is left.
            for msg in consumer.consume(max(1, min(BATCH, high - position)), timeout=POLL_SECONDS):
                refused = _refusal(msg, f"reading Kafka topic {topic}", Need("READ", TOPIC, topic))
                if refused is not None:
                    raise refused
                if _is_real(msg) and (msg.offset() or 0) < high:
                    position = (msg.offset() or 0) + 1
                    yield msg
            # Transaction markers take offsets but are never returned: ask where we are.
            position = max(position, consumer.position([TopicPartition(topic, partition)])[0].offset)
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}[{partition}] to offset {high} took over {timeout} s")
    finally:
        consumer.close()


def bounds(base: Config, topic: str, partition: int, timeout: float = 10.0) -> Offsets:
    """(first offset, end offset) of one partition."""
    consumer = confluent_kafka.Consumer(_reader_config(base), logger=_rdkafka_log)
    try:
        return _watermarks(consumer, TopicPartition(topic, partition), timeout)
    finally:
        consumer.close()


def end_offset(base: Config, topic: str, partition: int, timeout: float = 10.0) -> int:
    return bounds(base, topic, partition, timeout)[1]


class _PendingOffsets:
    """Offsets per partition handed from other threads to the one thread that acts on them.

    Every access to the dict holds the lock, so a `put` racing a `take` lands either in what
    that `take` returns or in what the next one does: never lost, never returned twice. A
    later `put` for a partition replaces an earlier one not yet taken (the newest request
    wins); `retry` gives back what could not be done without overriding anything newer.
    """

    __slots__ = ("_lock", "_offsets")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[int, int] = {}

    def put(self, offsets: Mapping[int, int]) -> None:
        if offsets:
            with self._lock:
                self._offsets.update(offsets)

    def retry(self, offsets: Mapping[int, int]) -> None:
        """Give back requests taken but not done; a newer request for a partition stays."""
        if offsets:
            with self._lock:
                for p, offset in offsets.items():
                    self._offsets.setdefault(p, offset)

    def take(self) -> dict[int, int]:
        """All pending requests, leaving none. Cheap when there are none (the fetcher's loop
        asks every pass): a `put` this unlocked look misses is taken on the next call."""
        if not self._offsets:
            return {}
        with self._lock:
            taken, self._offsets = self._offsets, {}
        return taken


class TailReader:
    """Follows partitions from given offsets for as long as it runs.

    `add`, `remove` and `report_progress` may be called from any thread (the runner calls them
    on its fetcher's thread and on its event loop): they are handed to the reader's own thread,
    which does them on its next turn, within TAIL_POLL_SECONDS. librdkafka's Python binding lets
    only one call at a time use a consumer, so a call from another thread would wait out the
    reader's `consume`. `on_messages` runs on the reader's thread, and so does `on_denied`, told
    when Kafka's authorizer refuses reading a topic (without it, that is logged).

    An idle reader wakes every TAIL_POLL_SECONDS (and its broker thread every fetch.wait.max.ms)
    only for that hand-over and to see whether it should stop: what arrives ends both waits at
    once (the reader polls for a first record, then takes what else comes within its linger:
    `consume` alone would wait out its whole timeout for a batch it cannot fill). Each wake-up
    costs ~0.1 ms of CPU, and a process has a reader per subscription it serves and one per
    resource topic.
    """

    def __init__(
        self,
        base: Config,
        name: str,
        on_messages: Callable[[list[TailEntry]], None],
        on_denied: Callable[[PermissionDenied], None] | None = None,
        progress_group: str | None = None,
        linger_seconds: float = 0.0,
    ) -> None:
        """`linger_seconds`: how long a turn that found a record waits for more to hand over
        with it (fewer, larger hand-overs for a busy reader whose owner need not hear at once)."""
        config: dict[str, object] = dict(_reader_config(base, int(TAIL_POLL_SECONDS * 1000)))
        self._linger = linger_seconds
        if progress_group is not None:
            config["group.id"] = progress_group
            config["on_commit"] = _on_progress_commit
        self._consumer = confluent_kafka.Consumer(config, logger=_rdkafka_log)
        self._on_messages = on_messages
        self._on_denied = on_denied
        self._running = True
        self._lock = threading.Lock()  # the hand-over below
        # Assignment changes in the order asked: (True, partitions from offsets) adds,
        # (False, partitions) removes.
        self._changes: list[tuple[bool, list[TopicPartition]]] = []
        self._progress: dict[TopicPart, int] = {}
        self._progress_dropped = False
        self._next_commit = 0.0  # (monotonic) the earliest the next progress commit is made
        self._thread = threading.Thread(target=self._run, name=f"tail-{name}", daemon=True)

    def start(self, assignments: Mapping[TopicPart, int]) -> None:
        self.add(assignments)
        self._thread.start()

    def add(self, assignments: Mapping[TopicPart, int]) -> None:
        tps = [TopicPartition(t, p, o) for (t, p), o in assignments.items()]
        if tps:
            with self._lock:
                self._changes.append((True, tps))

    def remove(self, partitions: list[TopicPart]) -> None:
        if partitions:
            with self._lock:
                self._changes.append((False, [TopicPartition(t, p) for t, p in partitions]))

    def _run(self) -> None:
        consumer = self._consumer
        while self._running:
            self._hand_over()
            # consume() waits until it has all it asks for: poll waits for the first record
            # only, then consume takes what else comes within the linger.
            first = consumer.poll(TAIL_POLL_SECONDS)
            if first is None:
                continue
            batch: list[TailEntry] = []
            for m in (first, *consumer.consume(BATCH - 1, timeout=self._linger)):
                if m.error() is None:
                    batch.append((m.topic() or "", m.partition() or 0, m.offset() or 0, m.key(), m.value()))
                    continue
                topic = m.topic() or ""
                refused = _refusal(m, f"reading Kafka topic {topic}", Need("READ", TOPIC, topic))
                if refused is None:
                    _is_real(m)  # logged
                elif self._on_denied is not None:
                    self._on_denied(refused)
                else:
                    log.error("%s", refused.message)
            if batch and self._running:  # a stopped owner is told nothing more
                self._on_messages(batch)

    def _hand_over(self) -> None:
        """What other threads asked for since the last turn: assignment changes, then progress."""
        if not self._changes and not self._progress:
            return
        now = time.monotonic()
        commit = now >= self._next_commit  # progress: once a TAIL_POLL_SECONDS at most
        with self._lock:
            changes, self._changes = self._changes, []
            progress = {}
            if commit:
                progress, self._progress = self._progress, {}
        if progress:
            self._next_commit = now + TAIL_POLL_SECONDS
        for adding, tps in changes:
            try:
                if adding:
                    self._consumer.incremental_assign(tps)
                else:
                    self._consumer.incremental_unassign(tps)
            except confluent_kafka.KafkaException as exc:  # (the caller has moved on: logged)
                log.error("%s of %s failed: %s", "assigning" if adding else "unassigning", tps, exc)
        if progress:
            tps = [TopicPartition(t, p, o) for (t, p), o in progress.items()]
            self._consumer.commit(offsets=tps, asynchronous=True)

    def report_progress(self, offsets: Mapping[TopicPart, int]) -> None:
        """The caller has applied these partitions up to (before) these offsets: the reader's
        thread commits them to `progress_group` within about TAIL_POLL_SECONDS (a busy reader
        commits once a TAIL_POLL_SECONDS, not every turn), for writers that wait until what
        they wrote is applied (Spark's ack)."""
        with self._lock:
            if not self._progress_dropped:
                self._progress.update(offsets)

    def drop_progress(self) -> None:
        """Commit no more progress (the subscription is gone, and its progress group with it:
        a commit now would create that group again)."""
        with self._lock:
            self._progress_dropped = True
            self._progress = {}

    def stop(self) -> None:
        """Blocking (up to TAIL_POLL_SECONDS, while the reader's thread ends its wait);
        idempotent. Nothing is handed to `on_messages` after it."""
        if not self._running:
            return
        self._running = False
        if self._thread.is_alive():
            self._thread.join(5.0)
            if self._thread.is_alive():  # never close under a poll that outlived the join
                log.warning("a Kafka reader did not stop within 5 s; its consumer is left open")
                return
        self._consumer.close()


class FetchListener(Protocol):
    """What a GroupFetcher tells its subscription. Every method runs on the fetcher's thread,
    except that `on_revoked` runs on the thread calling `GroupFetcher.stop` as it leaves."""

    def on_assigned(self, partitions: list[int], committed: dict[int, int]) -> dict[int, int]:
        """Recover the partitions' state (blocking is fine); return each one's start offset.

        `committed` holds the group's committed offset of each partition that has one."""

    def on_revoked(self, partitions: list[int], lost: bool) -> dict[int, int]:
        """Stop delivering them (block until done); return the final offsets to commit."""

    def on_records(self, records: list[Record]) -> None: ...

    def wants_records(self) -> bool: ...

    def on_seeked(self, done: dict[int, int]) -> None:
        """The consumer now fetches these partitions from these offsets (the latest requested
        for each when it sought: a listener can tell a later request still pending)."""

    def on_fetch_targets(self, ends: dict[int, int]) -> None:
        """Newly assigned partitions end at these offsets now (Kafka's high watermarks, asked
        before any record of them is handed over): what fetching them catches up to."""
        return


class GroupFetcher:
    """A member of a subscription's consumer group: owns partitions, fetches their records.

    One thread of its own polls the consumer, which runs the rebalance callbacks and every
    listener method on that thread. Other threads (the event loop) talk to it only through
    `wake`, `request_seek` and `request_commit`: requests wait in `_PendingOffsets` until the
    fetcher's loop takes them, at least every `IDLE_POLL_SECONDS`.

    The rebalance callbacks run inside `poll`, and confluent-kafka keeps a per-thread record of
    that poll which any blocking call on the same consumer (committed offsets, metadata, a
    synchronous commit, uncached watermarks) clears when it returns: the poll's next callback
    then aborts the process (`CallState_get: Assertion 'cs != NULL'`). A log line is such a
    callback, and librdkafka logs plenty while a broker is down. So the callbacks make only the
    blocking calls a hand-over cannot do without (committed and end offsets, the final commit),
    just after the group's coordinator answered; a broker failing in that moment is a risk left.
    Those calls cannot move to another thread: made there while the polling thread is in a
    callback, they hang.
    """

    def __init__(
        self,
        base: Config,
        group_id: str,
        topic: str,
        listener: FetchListener,
        session_timeout_ms: int,
        client_id: str = "pubsub-gateway",
        on_joined: Callable[[], None] | None = None,
        on_denied: Callable[[PermissionDenied], None] | None = None,
    ) -> None:
        """`on_joined` is called (on the fetcher's thread) after every assignment, an empty
        one included: the member has joined and knows what it owns. `on_denied` (same
        thread) when Kafka's authorizer refuses the member its group or its topic, naming
        which; without it, that is logged."""
        config = client_config(
            base,
            {
                "group.id": group_id,
                "client.id": client_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": max(300, session_timeout_ms // 5),
                "max.poll.interval.ms": 120_000,
                "queued.max.messages.kbytes": 16_384,
                # When that queue is full librdkafka waits this long before fetching again; its
                # default of 1 s stalled busy subscriptions (24k -> 33k msg/s in the benchmark).
                "fetch.queue.backoff.ms": 10,
                "fetch.wait.max.ms": 200,
            },
        )
        self._on_joined = on_joined
        self._on_denied = on_denied
        self._group = group_id
        self._consumer = confluent_kafka.Consumer(config, logger=_rdkafka_log)
        self._topic = topic
        self._listener = listener
        # The partitions owned now: rebound by the rebalance callbacks, read on the same thread.
        self._assigned: frozenset[int] = frozenset()
        self._demand = threading.Event()
        self._commits = _PendingOffsets()
        self._seeks = _PendingOffsets()
        self._running = True
        self._thread = threading.Thread(target=self._run, name=f"fetch-{group_id}"[:60], daemon=True)

    def start(self) -> None:
        self._consumer.subscribe(
            [self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self._thread.start()

    def wake(self) -> None:
        """The listener wants records again: stop waiting at once."""
        self._demand.set()

    def request_seek(self, offsets: Mapping[int, int]) -> None:
        """Fetch these partitions from these offsets from now on; `on_seeked` tells when.

        Safe from any thread (the runner calls it on the event loop); the fetcher's thread
        seeks. A later request for a partition not yet sought replaces an earlier one."""
        self._seeks.put(offsets)

    def request_commit(self, offsets: Mapping[int, int]) -> None:
        """Commit these offsets soon (those of partitions still owned then).

        Safe from any thread (the runner calls it on the event loop); the fetcher's thread
        commits. A later request for a partition not yet committed replaces an earlier one."""
        self._commits.put(offsets)

    def _on_assign(self, consumer: confluent_kafka.Consumer, tps: list[TopicPartition]) -> None:
        parts = [tp.partition for tp in tps]
        starts = self._recover(consumer, parts) if parts else {}
        if not self._running:
            return
        consumer.incremental_assign([TopicPartition(self._topic, p, starts[p]) for p in parts])
        self._assigned = self._assigned.union(parts)
        if parts:
            self._listener.on_fetch_targets(self._ends(consumer, parts))
        if self._on_joined is not None:
            self._on_joined()

    def _ends(self, consumer: confluent_kafka.Consumer, parts: list[int]) -> dict[int, int]:
        """The high watermark of each partition that answers within ENDS_SECONDS in all (those
        that do not are left out: fetching them is not waited for). The fetcher's thread waits
        meanwhile, so partitions whose leader died cost that bound once, not a second each."""
        ends: dict[int, int] = {}
        deadline = time.monotonic() + ENDS_SECONDS
        for p in parts:
            left = deadline - time.monotonic()
            if left <= 0:
                log.info("end offsets of %s unknown past %.0f s: not waited for", self._topic, ENDS_SECONDS)
                break
            try:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(self._topic, p), timeout=min(1.0, left), cached=False
                )
            except confluent_kafka.KafkaException as exc:
                log.info("end offset of %s[%d] unknown: %s", self._topic, p, exc)
                continue
            ends[p] = high
        return ends

    def _recover(self, consumer: confluent_kafka.Consumer, parts: list[int]) -> dict[int, int]:
        """The listener's start offsets for newly owned partitions, retried until it gives them
        (or the fetcher stops): a broker that died may lead the partitions read to recover
        them until the controller notices, and an exception here would end this thread and
        with it the subscription in this process. The member stays in its group meanwhile
        (heartbeats run on librdkafka's thread); the partitions are not fetched until then."""
        delay = 0.5
        while True:
            try:
                tps_now = [TopicPartition(self._topic, p) for p in parts]
                committed = {
                    tp.partition: tp.offset
                    for tp in consumer.committed(tps_now, timeout=30)
                    if tp.offset >= 0
                }
                return self._listener.on_assigned(parts, committed)
            except Exception as exc:  # noqa: BLE001 - retried: see above
                if not self._running:
                    return {}
                log.warning(
                    "recovering partitions %s of %s failed, retrying in %.1f s: %s",
                    parts,
                    self._topic,
                    delay,
                    exc,
                )
                self._demand.wait(delay)
                delay = min(delay * 2, 10.0)

    def _revoke(self, consumer: confluent_kafka.Consumer, tps: list[TopicPartition], lost: bool) -> None:
        parts = [tp.partition for tp in tps]
        if not parts:
            return
        try:
            final = self._listener.on_revoked(parts, lost)
        except Exception:  # the partitions go anyway; their state is in the log
            log.exception("giving up partitions %s of %s: final checkpoints failed", parts, self._topic)
            final = {}
        if final and not lost:
            self._commit(final, asynchronous=False)
        self._assigned = self._assigned.difference(parts)
        try:
            consumer.incremental_unassign(tps)
        except confluent_kafka.KafkaException as exc:  # e.g. the topic was deleted meanwhile
            log.info("unassigning %s: %s", parts, exc)

    def _on_revoke(self, consumer: confluent_kafka.Consumer, tps: list[TopicPartition]) -> None:
        self._revoke(consumer, tps, lost=False)

    def _on_lost(self, consumer: confluent_kafka.Consumer, tps: list[TopicPartition]) -> None:
        self._revoke(consumer, tps, lost=True)

    # Literal[True, False] rather than bool: confluent-kafka's stubs overload commit on each.
    def _commit(self, offsets: Mapping[int, int], asynchronous: Literal[True, False]) -> None:
        tps = [TopicPartition(self._topic, p, o) for p, o in offsets.items() if p in self._assigned]
        if not tps:
            return
        try:
            self._consumer.commit(offsets=tps, asynchronous=asynchronous)
        except confluent_kafka.KafkaException as exc:
            log.info("commit of %s skipped: %s", self._topic, exc)

    def _seek(self, offsets: Mapping[int, int]) -> None:
        """On the fetcher's thread. A partition no longer owned counts as done; a failed seek
        is retried on the next pass unless a newer request for its partition came meanwhile."""
        done: dict[int, int] = {}
        failed: dict[int, int] = {}
        for p, offset in offsets.items():
            if p in self._assigned:
                try:
                    self._consumer.seek(TopicPartition(self._topic, p, offset))
                except confluent_kafka.KafkaException as exc:
                    log.warning("seek of %s[%d] to %d failed, retrying: %s", self._topic, p, offset, exc)
                    failed[p] = offset
                    continue
            done[p] = offset
        self._seeks.retry(failed)
        if done:
            self._listener.on_seeked(done)

    def _run(self) -> None:
        consumer = self._consumer
        while self._running:
            seeks = self._seeks.take()
            if seeks:
                self._seek(seeks)
            commits = self._commits.take()
            if commits:
                self._commit(commits, asynchronous=True)
            if not self._listener.wants_records():
                # Enough is buffered: leave librdkafka's bounded queue alone (pausing would drop
                # it) until demand returns; poll now and then so rebalances are still served
                # (heartbeats run on librdkafka's own thread).
                self._demand.wait(IDLE_POLL_SECONDS)
                self._demand.clear()
                if self._listener.wants_records():
                    continue
                msg = consumer.poll(0)
            else:
                msg = consumer.poll(POLL_SECONDS)
            if msg is None:
                continue
            records = []
            for m in (msg, *consumer.consume(BATCH - 1, timeout=0)):
                if m.error() is None:
                    records.append(to_record(m))
                elif not self._refused(m):
                    _is_real(m)  # logged
            if records:
                self._listener.on_records(records)

    def _refused(self, msg: confluent_kafka.Message) -> bool:
        """True if the error message is Kafka's authorizer refusing the group (joining,
        committing) or the topic (metadata, fetching): told to `on_denied`."""
        refused = _refusal(
            msg,
            f"consuming Kafka topic {self._topic} in consumer group {self._group}",
            Need("READ", GROUP, self._group),
            Need("READ", TOPIC, self._topic),
        )
        if refused is None:
            return False
        if self._on_denied is not None:
            self._on_denied(refused)
        else:
            log.error("%s", refused.message)
        return True

    def stop(self) -> None:
        """Leave the group (revoking what is owned). Blocking; idempotent."""
        if not self._running:
            return
        self._running = False
        self._demand.set()
        if self._thread.is_alive():
            self._thread.join(10.0)
        try:
            self._consumer.close()
        except RuntimeError:
            pass
