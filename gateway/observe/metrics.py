"""The gateway's Prometheus metrics, read when /metrics is scraped (docs/metrics.md).

Nothing here runs on the paths that publish or deliver. `GatewayCollector` reads, at scrape
time, the delivery state of the partitions this process owns (backlog, oldest unacked message,
leases), the push dispatchers' windows, the counts gateway/core/tally.py keeps, and the
producer's librdkafka statistics. The RPC metrics (rpc.py) are ordinary prometheus-client
metrics in the same registry.

Each process reports only what it owns: the partitions its consumer-group members hold, the
calls it answered, the pushes it sent. Summing a metric over processes gives the subscription's
(or topic's) figure; the oldest unacked message's age is their maximum.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.clock import now_ms
from gateway.core.delivery import DeliveryService
from gateway.core.resources import ResourceStore
from gateway.core.tally import ACK_LATENCY_BOUNDS_MS, PUSH_CLASSES, Tallies, Tally, TopicTally
from gateway.kafka.admin import Admin
from gateway.kafka.stats import ClientStats
from gateway.observe import backlog

log = logging.getLogger(__name__)
END_OFFSETS_TIMEOUT = 2.0  # a scrape waits at most this long for Kafka's end offsets
END_OFFSETS_FRESH = 1.0  # end offsets younger than this are reused by the next scrape

Windows = Callable[[], list[tuple[str, int, int]]]  # PushManager.windows


class EndOffsets:
    """The end offsets of the partitions this process owns, asked of Kafka before a scrape
    (one ListOffsets call for all). A partition Kafka did not answer for keeps its last value."""

    def __init__(self, admin: Admin) -> None:
        self._admin = admin
        self.ends: dict[tuple[str, int], int] = {}
        self._at = 0.0
        self._lock = asyncio.Lock()

    async def refresh(self, wanted: Iterable[tuple[str, int]]) -> None:
        async with self._lock:
            if time.monotonic() - self._at < END_OFFSETS_FRESH:
                return
            wanted = list(wanted)
            try:
                found = await self._admin.latest_offsets(wanted, END_OFFSETS_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - a scrape must answer: the last values stand
                log.debug("end offsets for /metrics: %s", exc)
                found = {}
            keep = set(wanted)
            self.ends = {k: v for k, v in {**self.ends, **found}.items() if k in keep}
            self._at = time.monotonic()


class _Families:
    """The metric families of one scrape, labelled per subscription."""

    def __init__(self) -> None:
        sub = ["subscription"]
        self.undelivered = GaugeMetricFamily(
            "pubsub_subscription_num_undelivered_messages",
            "Unacknowledged messages (backlog) of the partitions this process owns.",
            labels=sub,
        )
        self.backlog_bytes = GaugeMetricFamily(
            "pubsub_subscription_backlog_bytes",
            "Estimated size of the backlog of the partitions this process owns.",
            labels=sub,
        )
        self.oldest = GaugeMetricFamily(
            "pubsub_subscription_oldest_unacked_message_age_seconds",
            "Age of the oldest unacknowledged message of the partitions this process owns.",
            labels=sub,
        )
        self.leases = GaugeMetricFamily(
            "pubsub_gateway_subscription_outstanding_leases",
            "Messages delivered and neither acked, nacked nor expired (partitions owned here).",
            labels=sub,
        )
        self.push_outstanding = GaugeMetricFamily(
            "pubsub_subscription_num_outstanding_messages",
            "Messages being pushed by this process: taken, not yet answered by the endpoint.",
            labels=sub,
        )
        self.streams = GaugeMetricFamily(
            "pubsub_subscription_open_streaming_pulls",
            "StreamingPull streams open on this process (those push opens for itself included).",
            labels=sub,
        )
        self.push_window = GaugeMetricFamily(
            "pubsub_gateway_push_window",
            "The push window: pushes this process may have outstanding for the subscription.",
            labels=sub,
        )


def _gauges(
    delivery: DeliveryService, store: ResourceStore, ends: EndOffsets, windows: Windows | None
) -> _Families:
    f = _Families()
    tallies = delivery.tallies
    undelivered: dict[str, int] = {}
    size: dict[str, int] = {}
    oldest: dict[str, int] = {}
    leases: dict[str, int] = {}
    for runner in delivery.runners():
        res = store.get("subscription", runner.name)
        if res is None:
            continue
        label = tallies.label(runner.name)
        for p, state in list(runner.states.items()):
            b = backlog.of(state, ends.ends.get((res.meta.kafka_topic, p)))
            undelivered[label] = undelivered.get(label, 0) + b.messages
            size[label] = size.get(label, 0) + b.bytes
            leases[label] = leases.get(label, 0) + b.leased
            if b.oldest_ms is not None:
                oldest[label] = min(oldest.get(label, b.oldest_ms), b.oldest_ms)
    now = now_ms()
    for label, n in undelivered.items():
        f.undelivered.add_metric([label], n)
        f.backlog_bytes.add_metric([label], size[label])
        f.leases.add_metric([label], leases[label])
        f.oldest.add_metric([label], max(0.0, (now - oldest[label]) / 1000) if label in oldest else 0.0)
    streams: dict[str, int] = {}
    for name in delivery.open_streams():
        label = tallies.label(name)
        streams[label] = streams.get(label, 0) + 1
    for label, n in streams.items():
        f.streams.add_metric([label], n)
    if windows is not None:
        outstanding: dict[str, int] = {}
        window: dict[str, int] = {}
        for name, limit, in_flight in windows():
            label = tallies.label(name)
            outstanding[label] = outstanding.get(label, 0) + in_flight
            window[label] = window.get(label, 0) + limit
        for label, n in outstanding.items():
            f.push_outstanding.add_metric([label], n)
            f.push_window.add_metric([label], window[label])
    return f


def _subscription_counters(tallies: Tallies[Tally]) -> Iterator[Metric]:
    sub = ["subscription"]
    sent = CounterMetricFamily(
        "pubsub_subscription_sent_message_count",
        "Messages delivered (pull, StreamingPull, push).",
        labels=sub,
    )
    acked = CounterMetricFamily(
        "pubsub_subscription_ack_message_count",
        "Messages acknowledged (acks the owner accepted).",
        labels=sub,
    )
    nacked = CounterMetricFamily(
        "pubsub_subscription_nack_requests", "Messages nacked (ModifyAckDeadline with 0 s).", labels=sub
    )
    expired = CounterMetricFamily(
        "pubsub_subscription_expired_ack_deadlines_count",
        "Messages whose ack deadline expired while they were outstanding.",
        labels=sub,
    )
    dead = CounterMetricFamily(
        "pubsub_subscription_dead_letter_message_count",
        "Messages forwarded to the dead-letter topic.",
        labels=sub,
    )
    latency = HistogramMetricFamily(
        "pubsub_subscription_ack_latencies_seconds",
        "Time from a message's delivery to its acknowledgement.",
        labels=sub,
    )
    push = CounterMetricFamily(
        "pubsub_subscription_push_request_count",
        "Push requests by outcome (response_class as Cloud Monitoring's).",
        labels=["subscription", "response_class"],
    )
    bounds = [f"{ms / 1000:g}" for ms in ACK_LATENCY_BOUNDS_MS] + ["+Inf"]
    for label, t in tallies.items():
        sent.add_metric([label], t.delivered)
        acked.add_metric([label], t.acked)
        nacked.add_metric([label], t.nacked)
        expired.add_metric([label], t.expired)
        dead.add_metric([label], t.dead_lettered)
        cumulative, buckets = 0, []
        for bound, n in zip(bounds, t.ack_latency_buckets, strict=True):
            cumulative += n
            buckets.append((bound, float(cumulative)))
        latency.add_metric([label], buckets, t.ack_latency_sum_ms / 1000)
        if any(t.push.values()):
            for cls in PUSH_CLASSES:
                push.add_metric([label, cls], t.push[cls])
    yield from (sent, acked, nacked, expired, dead, latency, push)


def _topic_counters(tallies: Tallies[TopicTally]) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        "pubsub_topic_send_request_count", "Publish requests Kafka confirmed.", labels=["topic"]
    )
    messages = CounterMetricFamily(
        "pubsub_topic_send_message_operation_count", "Messages published (confirmed).", labels=["topic"]
    )
    size = CounterMetricFamily(
        "pubsub_topic_message_sizes_bytes",
        "Bytes of messages published: data, attributes and ordering key.",
        labels=["topic"],
    )
    for label, t in tallies.items():
        requests.add_metric([label], t.requests)
        messages.add_metric([label], t.messages)
        size.add_metric([label], t.bytes)
    yield from (requests, messages, size)


def _kafka(stats: ClientStats | None) -> Iterator[Metric]:
    summary = stats.latest if stats is not None else None
    if summary is None:
        return
    broker = ["broker"]
    up = GaugeMetricFamily(
        "pubsub_gateway_kafka_broker_up",
        "1 when the producer's connection to the broker is UP.",
        labels=broker,
    )
    rtt = GaugeMetricFamily(
        "pubsub_gateway_kafka_broker_rtt_seconds",
        "Round-trip time of the producer's requests to the broker over the last interval.",
        labels=["broker", "statistic"],
    )
    in_flight = GaugeMetricFamily(
        "pubsub_gateway_kafka_broker_requests_in_flight", "Requests sent, awaiting an answer.", labels=broker
    )
    queued = GaugeMetricFamily(
        "pubsub_gateway_kafka_broker_requests_queued", "Requests waiting to be sent.", labels=broker
    )
    timeouts = CounterMetricFamily(
        "pubsub_gateway_kafka_broker_request_timeouts", "Requests that timed out.", labels=broker
    )
    disconnects = CounterMetricFamily(
        "pubsub_gateway_kafka_broker_disconnects", "Connections to the broker lost.", labels=broker
    )
    errors = CounterMetricFamily(
        "pubsub_gateway_kafka_broker_errors",
        "Transmission (tx) and receive (rx) errors.",
        labels=["broker", "direction"],
    )
    for b in summary.brokers:
        up.add_metric([b.name], 1 if b.up else 0)
        rtt.add_metric([b.name, "avg"], b.rtt_avg_s)
        rtt.add_metric([b.name, "p99"], b.rtt_p99_s)
        in_flight.add_metric([b.name], b.in_flight)
        queued.add_metric([b.name], b.queued)
        timeouts.add_metric([b.name], b.request_timeouts)
        disconnects.add_metric([b.name], b.disconnects)
        errors.add_metric([b.name, "tx"], b.tx_errors)
        errors.add_metric([b.name, "rx"], b.rx_errors)
    yield from (up, rtt, in_flight, queued, timeouts, disconnects, errors)
    yield GaugeMetricFamily(
        "pubsub_gateway_kafka_producer_queue_messages",
        "Messages in the producer's queue, not yet confirmed by Kafka.",
        value=summary.queue_messages,
    )
    yield GaugeMetricFamily(
        "pubsub_gateway_kafka_producer_queue_bytes",
        "Bytes in the producer's queue.",
        value=summary.queue_bytes,
    )
    yield GaugeMetricFamily(
        "pubsub_gateway_kafka_statistics_age_seconds",
        "Time since librdkafka last reported its statistics.",
        value=time.monotonic() - summary.taken_at,
    )


class GatewayCollector(Collector):
    """Everything but the RPC metrics; reads the services' state when collected (on the event
    loop: the state it reads is the event loop's)."""

    def __init__(
        self,
        delivery: DeliveryService,
        topic_tallies: Tallies[TopicTally],
        store: ResourceStore,
        ends: EndOffsets,
        kafka: ClientStats | None,
        windows: Windows | None,
    ) -> None:
        self._delivery = delivery
        self._topics = topic_tallies
        self._store = store
        self._ends = ends
        self._kafka = kafka
        self.windows = windows

    def wanted(self) -> list[tuple[str, int]]:
        """(Kafka topic, partition) of every partition this process owns."""
        out: list[tuple[str, int]] = []
        for runner in self._delivery.runners():
            res = self._store.get("subscription", runner.name)
            if res is not None:
                out.extend((res.meta.kafka_topic, p) for p in list(runner.states))
        return out

    async def refresh(self) -> None:
        """Ask Kafka for the end offsets of the partitions owned here (before collecting)."""
        await self._ends.refresh(self.wanted())

    def collect(self) -> Iterator[Metric]:
        store = self._store
        self._delivery.tallies.forget(lambda name: store.get("subscription", name))
        self._topics.forget(lambda name: store.get("topic", name))
        f = _gauges(self._delivery, store, self._ends, self.windows)
        yield from (
            f.undelivered,
            f.backlog_bytes,
            f.oldest,
            f.leases,
            f.streams,
            f.push_outstanding,
            f.push_window,
        )
        yield from _subscription_counters(self._delivery.tallies)
        yield from _topic_counters(self._topics)
        yield from _kafka(self._kafka)
