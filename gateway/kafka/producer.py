"""The one module that produces to Kafka.

A confluent-kafka Producer with a poll thread; delivery reports are handed back to the event
loop with `call_soon_threadsafe`, one hand-over per batch rather than per record.

Records without a key may go to any partition. When the caller says how many the topic has,
the producer picks one per call itself, among the partitions with no write outstanding for
longer than SLOW_WRITE_SECONDS: a broker that dies leads its partitions until the controller
notices (9 s by default), and until then every write to them waits, so records that could go
anywhere go elsewhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import confluent_kafka

from gateway.errors import FailedPrecondition, InvalidArgument, Unavailable
from gateway.kafka import IN_FLIGHT, client_config, is_on, reordering
from gateway.kafka.acls import CLUSTER, TOPIC, TRANSACTIONAL_ID, Need, denial
from gateway.kafka.clientlog import client_logger
from gateway.translate.limits import MAX_MESSAGES_PER_PUBLISH

log = logging.getLogger(__name__)
# Our own generator: drawing from `random`'s shared one would move the state of the program
# that embeds the gateway (tests, seeded or not, included).
_random = random.Random()
_rdkafka_log = client_logger(__name__)  # librdkafka's own lines, rate-limited

SLOW_WRITE_SECONDS = 1.0
# The poll thread's wait: a delivery report ends it at once, so this only bounds how long `stop`
# waits for the thread. Each idle wake-up costs ~0.1 ms of CPU.
POLL_SECONDS = 0.5
LINGER_MS = 2  # a Publish of one message waits at most this for others to share its request
# The most one partition's batch carries: Kafka's stock max.message.bytes (1 MiB and the 12-byte
# log overhead), so a Publish of 1,000 messages of 1 KiB goes in one request; librdkafka's own
# 1,000,000 splits it in two, and its broker thread then spends two to three times the CPU.
BATCH_BYTES = 1024 * 1024
# A batch is sent without waiting out the linger once it holds this many records: a Publish of
# the most messages one may carry fills one at once, and nothing can join it.
BATCH_RECORDS = MAX_MESSAGES_PER_PUBLISH
# Requests on the wire per broker connection. librdkafka's idempotent producer also allows a
# partition at most 5 unanswered requests, but it asks its broker thread to wake at once for a
# partition whose batch is ready before it checks that window: with 5 on the wire (its default
# for an idempotent producer) and all of one partition, the thread spins until a reply comes.
# That was 34-40% of the gateway's CPU while the official Go client published (100 messages per
# Publish). With 2 on the wire, and one more request waiting to go, no partition reaches 5.
MAX_IN_FLIGHT = 2
# What a broker adds to a record batch beyond what librdkafka counts against batch.size: the
# log's offset and length fields. A topic takes batches of max.message.bytes; the stock
# 1,048,588 is BATCH_BYTES and this.
LOG_OVERHEAD = 12
# A v2 record batch's header: base offset, length, leader epoch, magic, CRC, attributes, last
# offset delta, first and max timestamps, producer id and epoch, base sequence, record count.
BATCH_HEADER = 61

Headers = list[tuple[str, str | bytes | None]]
DeliveryCallback = Callable[[confluent_kafka.KafkaError | None, confluent_kafka.Message], None]
# One per record written, so plain tuples, named here only: a named tuple costs 2-3 times a tuple
# to build (and more to unpack, which CPython does fastest for exact tuples).
OutRecord = tuple[bytes | None, bytes | None, Headers | None]  # (key, value, headers)
Written = tuple[int, int]  # (partition, offset): where Kafka stored a record `send` wrote


class TxnRecord(NamedTuple):
    """A record of a transaction (TransactionalSender.send takes these, or plain tuples)."""

    topic: str
    partition: int | None  # None: the partitioner decides
    key: bytes | None
    value: bytes | None
    headers: Headers | None


AnyTxnRecord = tuple[str, int | None, bytes | None, bytes | None, Headers | None]  # a TxnRecord's fields


class _Batch:
    """Collects the delivery reports of one call and resolves one future when all are in."""

    __slots__ = ("error", "error_topic", "future", "loop", "pending", "results", "runs")

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int) -> None:
        self.loop = loop
        self.future: asyncio.Future[list[Written]] = loop.create_future()
        self.results: list[Written] = [(-1, -1)] * n
        self.pending = n
        self.error: confluent_kafka.KafkaError | None = None
        self.error_topic: str | None = None
        self.runs: list[_Run] = []

    def callback(self, index: int) -> DeliveryCallback:
        """The delivery report of record `index` alone."""

        def on_delivery(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
            if err is not None and self.error is None:
                self.error, self.error_topic = err, msg.topic()
            else:
                self.results[index] = (msg.partition() or 0, msg.offset() or 0)
            self._done()

        return on_delivery

    def run(self, start: int, partition: int) -> DeliveryCallback:
        """One callback for the delivery reports of a run of records, `start` on, all queued to
        `partition` in order (see _Run)."""
        run = _Run(self, start, partition)
        self.runs.append(run)
        return run.on_delivery

    def _done(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        if self.future.done():
            return
        if self.error is not None:
            self.future.set_exception(_translate(self.error, self.error_topic))
            return
        for run in self.runs:
            run.place(self.results)
        self.future.set_result(self.results)


class _Run:
    """The delivery reports of records queued, in order, to one partition by an idempotent
    producer. Such a producer writes a partition's records in the order they were queued (its
    sequence numbers let the broker refuse any other order, retries included), so the k-th
    record of the run has the k-th lowest offset of the run, in whatever order the reports
    arrive: a report is matched to its record without a callback object per record."""

    __slots__ = ("batch", "offsets", "partition", "start")

    def __init__(self, batch: _Batch, start: int, partition: int) -> None:
        self.batch = batch
        self.start = start
        self.partition = partition
        self.offsets: list[int] = []

    def on_delivery(self, err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        batch = self.batch
        if err is not None:
            if batch.error is None:
                batch.error, batch.error_topic = err, msg.topic()
        else:
            self.offsets.append(msg.offset() or 0)
        batch._done()

    def place(self, results: list[Written]) -> None:
        p, start = self.partition, self.start
        for k, offset in enumerate(sorted(self.offsets)):
            results[start + k] = (p, offset)


# Broker refusals of records as such (not of the request, the broker or the client): a
# compacted topic's keyless record, a timestamp outside the topic's allowed window.
_REFUSED_RECORDS = frozenset(
    {confluent_kafka.KafkaError.INVALID_RECORD, confluent_kafka.KafkaError.INVALID_TIMESTAMP}
)


# The producer knows no such topic or partition, or gave up on a write (a write to a topic
# deleted a moment ago times out: librdkafka waits for the topic to come back). Either the topic
# is gone (deleted outside the gateway, or made again with fewer partitions), or the producer has
# not learnt of it yet, or the cluster is slow: only a look at the cluster tells which
# (TopicService.publish looks).
_UNKNOWN = frozenset(
    {
        confluent_kafka.KafkaError._UNKNOWN_TOPIC,
        confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART,
        confluent_kafka.KafkaError._UNKNOWN_PARTITION,
        confluent_kafka.KafkaError._MSG_TIMED_OUT,
    }
)


class UnknownTopic(Unavailable):
    """A write the producer could not place or gave up on: UNAVAILABLE unless whoever catches it
    finds the topic gone."""


def _translate(
    err: confluent_kafka.KafkaError,
    topic: str | None = None,
    transactional_id: str | None = None,
    topics: Sequence[str] = (),
) -> Exception:
    """A write's error as a core error: refusals of Kafka's authorizer name what is missing."""
    if err.code() == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE:
        return InvalidArgument(f"Message too large for the Kafka topic: {err.str()}")
    if err.code() in _REFUSED_RECORDS:  # for good: retrying would be refused the same way
        where = f"Kafka topic {topic}" if topic else "The Kafka topic"
        return FailedPrecondition(
            f"{where} refused the records: {err.str()} (a compacted topic takes only records "
            "with a key, that is messages with an ordering key; a topic may also limit timestamps)"
        )
    written = [topic] if topic else list(topics)
    needs = [Need("WRITE", TOPIC, t) for t in written]
    if transactional_id is not None:
        needs.append(Need("WRITE", TRANSACTIONAL_ID, transactional_id))
    else:  # an idempotent producer's id: IdempotentWrite, or since Kafka 3.0 Write on any topic
        needs.append(Need("IDEMPOTENT_WRITE", CLUSTER, "kafka-cluster"))
    what = (
        f"writing to Kafka topic {' and '.join(written)}"
        if written
        else f"starting transactions as {transactional_id}"
        if transactional_id
        else "writing to Kafka"
    )
    refused = denial(what, err, needs)
    if refused is not None:
        return refused
    if err.code() in _UNKNOWN:
        return UnknownTopic(f"Kafka did not confirm the write: {err.str()}")
    return Unavailable(f"Kafka did not confirm the write: {err.str()}")


def _varint_bytes(n: int) -> int:
    """How many bytes Kafka's zigzag varint of n takes."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def _sized(data: str | bytes | None) -> int:
    """A length-prefixed field of a record: its varint length (-1 for null) and its bytes."""
    if data is None:
        return _varint_bytes(-1)
    n = len(data.encode() if isinstance(data, str) else data)
    return _varint_bytes(n) + n


def alone_bytes(record: OutRecord) -> int:
    """What a record batch holding only this record takes on the broker, uncompressed (Kafka's
    v2 format): the batch header, then the record's length, attributes, timestamp and offset
    deltas (0 for the first record), key, value and headers. The least any topic must take to
    hold the record: a topic whose max.message.bytes is lower refuses it in any batch."""
    key, value, headers = record
    body = 3 + _sized(key) + _sized(value) + _varint_bytes(len(headers or ()))
    for name, data in headers or ():
        body += _sized(name) + _sized(data)
    return BATCH_HEADER + _varint_bytes(body) + body


async def _queue_run(
    producer: confluent_kafka.Producer,
    topic: str,
    run: list[dict[str, Any]],
    partition: int,
    on_delivery: DeliveryCallback | None = None,
) -> None:
    """Queue `run` (produce_batch's message dicts) to `partition` (-1: the partitioner decides),
    with `on_delivery` for the records that name no callback of their own.

    produce_batch does not raise when the local queue is full: it marks the messages it could
    not queue with `_error`, and once one was refused for a full queue every later one is too,
    so what went in is a prefix and the rest is retried in order when there is room. Any other
    refusal fails the call, as produce() raising does."""
    extra = {} if on_delivery is None else {"on_delivery": on_delivery}
    while True:
        try:
            queued = producer.produce_batch(topic, run, partition=partition, **extra)
        except confluent_kafka.KafkaException as exc:
            raise _translate(exc.args[0], topic) from exc
        if queued == len(run):
            return
        refused: confluent_kafka.KafkaError = next(m["_error"] for m in run if "_error" in m)
        rest = run[queued:]
        if refused.code() != confluent_kafka.KafkaError._QUEUE_FULL or not all("_error" in m for m in rest):
            raise _translate(refused, topic)
        for m in rest:
            del m["_error"]
        run = rest
        await asyncio.sleep(0.005)  # let the poll thread drain the queue


class Producer:
    """Idempotent, acks=all producer shared by the whole process."""

    def __init__(
        self, config: Mapping[str, str | int | bool], extra: Mapping[str, Any] | None = None
    ) -> None:
        """`extra`: more of librdkafka's configuration, callbacks too (kafka/stats.py's).
        A `config` that turns idempotence off gets one request on the wire at a time, and one
        that also asks for more is refused (ValueError): a partition's records stay in order."""
        if why := reordering(config):
            raise ValueError(why)
        self._extra = dict(extra or {})
        # Without idempotence only one request at a time keeps a retry from landing behind a
        # later request (the broker's sequence numbers do that for an idempotent producer).
        in_flight = MAX_IN_FLIGHT if is_on(config.get("enable.idempotence", True)) else 1
        self._config = client_config(
            config,
            {
                "acks": "all",
                "partitioner": "murmur2_random",  # what Java producers use: one key, one partition
                "enable.idempotence": True,
                "linger.ms": LINGER_MS,
                "batch.size": BATCH_BYTES,
                "batch.num.messages": BATCH_RECORDS,
                IN_FLIGHT: in_flight,
                "message.max.bytes": 12_000_000,
                "queue.buffering.max.messages": 200_000,
                "queue.buffering.max.kbytes": 262_144,
                "delivery.timeout.ms": 30_000,
            },
        )
        # Whether a run to one partition may share one delivery callback: only an idempotent
        # producer's broker gives out a run's offsets in the order it was queued.
        self._ordered = is_on(self._config["enable.idempotence"])
        self._producer: confluent_kafka.Producer | None = None
        self._thread: threading.Thread | None = None
        # Producers for topics that take smaller batches than batch.size, by their batch.size
        # (fitted_batch), each with its poll thread; made when a call first needs one.
        self._fitted: dict[int, tuple[confluent_kafka.Producer, threading.Thread]] = {}
        self._running = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # (topic, partition) -> {call: when it started} for calls whose keyless records went
        # there and are not yet confirmed, oldest first. Touched on the event loop only.
        self._writing: dict[tuple[str, int], dict[int, float]] = {}
        self._calls = itertools.count()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._producer = confluent_kafka.Producer({**self._config, **self._extra}, logger=_rdkafka_log)
        self._running = True
        self._thread = self._polled(self._producer, "kafka-producer-poll")

    def _polled(self, producer: confluent_kafka.Producer, name: str) -> threading.Thread:
        """A started thread that serves `producer`'s delivery reports until `stop`."""

        def poll() -> None:
            while self._running:
                producer.poll(POLL_SECONDS)

        thread = threading.Thread(target=poll, name=name, daemon=True)
        thread.start()
        return thread

    @property
    def batch_bytes(self) -> int:
        """The most one partition's batch carries (batch.size)."""
        return int(self._config["batch.size"])

    @property
    def compresses(self) -> bool:
        """Whether record batches are compressed (the broker then checks their compressed size)."""
        codec = self._config.get("compression.type", self._config.get("compression.codec", "none"))
        return str(codec).lower() != "none"

    def fitted_batch(self, max_message_bytes: int) -> int | None:
        """The batch.size for a topic that takes record batches of at most `max_message_bytes`
        (an adopted topic's own max.message.bytes), or None when batch.size fits it already."""
        fitted = max_message_bytes - LOG_OVERHEAD
        return fitted if fitted < self.batch_bytes else None

    def _fitted_for(self, batch_bytes: int) -> confluent_kafka.Producer:
        """The producer whose batches carry at most `batch_bytes`: the same settings but for
        batch.size, and without the statistics callback (which describes one client)."""
        made = self._fitted.get(batch_bytes)
        if made is None:
            producer = confluent_kafka.Producer(
                {**self._config, "batch.size": max(batch_bytes, 1)}, logger=_rdkafka_log
            )
            made = self._fitted[batch_bytes] = (
                producer,
                self._polled(producer, f"kafka-producer-poll-{batch_bytes}"),
            )
            log.info("a producer of batches up to %d bytes, for topics that take no larger", batch_bytes)
        return made[0]

    async def stop(self) -> None:
        """Flush what is queued, then stop the poll threads. Idempotent."""
        if self._producer is None:
            return
        producers = [self._producer] + [p for p, _ in self._fitted.values()]
        threads = [self._thread] + [t for _, t in self._fitted.values()]
        self._producer = None
        for producer in producers:
            remaining = await asyncio.to_thread(producer.flush, 10.0)
            if remaining:
                log.warning("producer closed with %d undelivered records", remaining)
        self._running = False
        for thread in threads:
            if thread is not None:
                await asyncio.to_thread(thread.join, 5.0)
        self._fitted.clear()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def send(
        self,
        topic: str,
        records: Sequence[OutRecord],
        partition: int | None = None,
        spread: int = 0,
        batch_bytes: int | None = None,
    ) -> list[Written]:
        """Write records and wait until Kafka confirms all; returns (partition, offset) each.

        `partition` None: keyed records go where the partitioner puts them; records without a
        key too, unless `spread` gives the topic's partition count: then they all go to one
        partition the producer picks, avoiding those slow to confirm. `batch_bytes`: the topic
        takes batches no larger (fitted_batch); a record larger still goes in a batch alone."""
        if self._producer is None or self._loop is None:
            raise Unavailable("The gateway is shutting down.")
        if not records:
            return []
        batch = _Batch(self._loop, len(records))
        producer = self._producer if batch_bytes is None else self._fitted_for(batch_bytes)
        target = -1 if partition is None else partition  # -1: the partitioner decides
        keyless = self._pick(topic, spread) if partition is None and spread > 0 else -1
        # Records without headers go in runs through produce_batch (one topic handle, one
        # argument parse per run); a run ends where a record has headers, which produce_batch
        # drops, or goes to another partition. Records are queued in the caller's order.
        run: list[dict[str, Any]] = []
        start, run_partition = 0, target
        for i, (key, value, headers) in enumerate(records):
            to = keyless if key is None and keyless >= 0 else target
            if run and (headers is not None or to != run_partition):
                await self._queue(producer, batch, topic, run, start, run_partition)
                run = []
            if headers is None:
                if not run:
                    start, run_partition = i, to
                run.append({"key": key, "value": value})
                continue
            while True:
                try:
                    producer.produce(
                        topic,
                        value=value,
                        key=key,
                        headers=headers,
                        on_delivery=batch.callback(i),
                        partition=to,
                    )
                    break
                except BufferError:
                    await asyncio.sleep(0.005)  # local queue full: let the poll thread drain it
                except confluent_kafka.KafkaException as exc:
                    raise _translate(exc.args[0], topic) from exc
        if run:
            await self._queue(producer, batch, topic, run, start, run_partition)
        if keyless < 0:  # only the picks need to know which partitions are slow
            return await batch.future
        call, where = next(self._calls), (topic, keyless)
        self._writing.setdefault(where, {})[call] = time.monotonic()
        try:
            return await batch.future
        finally:
            calls = self._writing[where]
            del calls[call]
            if not calls:
                del self._writing[where]

    async def _queue(
        self,
        producer: confluent_kafka.Producer,
        batch: _Batch,
        topic: str,
        run: list[dict[str, Any]],
        start: int,
        partition: int,
    ) -> None:
        """Queue a run of records, `start` on in the call, to `partition` (-1: the partitioner
        decides). A run to one partition of an idempotent producer shares one callback (_Run);
        otherwise each record gets its own."""
        if partition >= 0 and self._ordered:
            await _queue_run(producer, topic, run, partition, batch.run(start, partition))
            return
        for k, m in enumerate(run):
            m["callback"] = batch.callback(start + k)
        await _queue_run(producer, topic, run, partition)

    def _slow(self, topic: str, partition: int, now: float) -> bool:
        calls = self._writing.get((topic, partition))
        return calls is not None and next(iter(calls.values())) < now - SLOW_WRITE_SECONDS

    def _pick(self, topic: str, partitions: int) -> int:
        """A random partition of the topic, among those not slow to confirm if any."""
        first = _random.randrange(partitions)
        now = time.monotonic()
        if not self._slow(topic, first, now):
            return first
        fine = [p for p in range(partitions) if not self._slow(topic, p, now)]
        return _random.choice(fine) if fine else first


class TransactionalSender:
    """Writes records to several topics atomically (a Kafka transaction), off the event loop.

    Used where two writes must land together or not at all: a dead-lettered message and the
    ack that removes it from its subscription. The transactional id names the partition owner's
    role, so a new owner fences a dead one and aborts its open transaction at once.
    """

    def __init__(self, config: Mapping[str, str | int | bool], transactional_id: str) -> None:
        self._id = transactional_id
        self._config = client_config(
            config,
            {
                "transactional.id": transactional_id,
                "transaction.timeout.ms": 10_000,
                "message.max.bytes": 12_000_000,
                "linger.ms": 0,
            },
        )
        self._producer: confluent_kafka.Producer | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kafka-txn")

    async def _run(self, fn: Callable[[], object]) -> object:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def start(self) -> None:
        """Register the transactional id (fencing an earlier owner's producer). A refusal of
        Kafka's authorizer is fatal to a transactional producer: it is closed, and the
        PermissionDenied names the id."""

        def init() -> None:
            producer = confluent_kafka.Producer(self._config, logger=_rdkafka_log)
            producer.init_transactions(30)  # on failure the producer goes with this frame
            self._producer = producer

        try:
            await self._run(init)
        except confluent_kafka.KafkaException as exc:
            self._executor.shutdown(wait=False)
            raise _translate(exc.args[0], transactional_id=self._id) from exc

    async def send(self, records: Sequence[AnyTxnRecord]) -> None:
        """TxnRecords, or plain (topic, partition or None, key, value, headers) tuples; all or
        nothing."""

        def transact() -> None:
            producer = self._producer
            assert producer is not None
            producer.begin_transaction()
            try:
                for topic, partition, key, value, headers in records:
                    producer.produce(
                        topic,
                        value=value,
                        key=key,
                        headers=headers,
                        partition=-1 if partition is None else partition,
                    )
                producer.commit_transaction(30)
            except confluent_kafka.KafkaException:
                try:
                    producer.abort_transaction(30)
                except confluent_kafka.KafkaException:
                    log.warning("aborting a transaction failed", exc_info=True)
                raise

        try:
            await self._run(transact)
        except confluent_kafka.KafkaException as exc:
            topics = list(dict.fromkeys(r[0] for r in records))
            raise _translate(exc.args[0], transactional_id=self._id, topics=topics) from exc

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await self._run(lambda: producer.flush(5))
        self._executor.shutdown(wait=False)
