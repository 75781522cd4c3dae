"""kill -9 a broker of a three-node Kafka cluster while the official clients publish and receive.

A KRaft cluster of three combined nodes on loopback (replication factor 3, min.insync.replicas
2, otherwise Kafka's defaults), one gateway, an exactly-once subscription read by the official
Python subscriber (`ack_with_response`), and the official publisher at a steady rate. After a
warm-up the node leading the most partitions of the topic (then, in the next round, the group
coordinator of the subscription) is killed with SIGKILL, and started again after the round.

Counted: publishes acknowledged and failed (and the errors clients saw), acknowledged
publishes never received (lost), messages received again after a confirmed ack (redelivered),
how long after the kill deliveries resumed at all and on the killed node's partitions, and the
longest publish. `python -m benchmarks.failover --out benchmarks/results/failover.json`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from benchmarks.processes import GatewayProc
from gateway.kafka.local import LocalKafka
from gateway.translate import names

CLUSTER_SETTINGS = {"default.replication.factor": "3", "min.insync.replicas": "2"}
PARTITIONS = 6


@dataclass
class Round:
    killed: str  # which node: "leader" of most partitions, or the group "coordinator"
    node: int
    published: int = 0
    publish_errors: dict[str, int] = field(default_factory=dict)
    redelivered_after_confirmed_ack: int = 0
    ack_failures: dict[str, int] = field(default_factory=dict)
    resumed_any_s: float | None = None  # first delivery after the kill
    # When the controller fenced the killed node for its lapsed session, after the kill (from
    # the nodes' broker logs; None: no such line), and the first delivery after that fence.
    fenced_s: float | None = None
    resumed_after_fence_s: float | None = None
    resumed_killed_partitions_s: float | None = None  # first delivery from the node's partitions
    # From when on every second of the window had deliveries (None: not by its end). The
    # publisher never stops, so a second without any is a stall, whenever the first came.
    flowing_again_s: float | None = None
    # From when on the gateway's /readyz answered 200 to the window's end (0.0: it never
    # stopped; None: not ready at the end).
    ready_again_s: float | None = None
    longest_delivery_gap_s: float = 0.0  # the end of the window counts as a delivery
    # The same over the warm-up before the kill: how late a delivery comes with no fault at all.
    longest_gap_before_kill_s: float = 0.0
    longest_publish_s: float = 0.0
    publish_p50_s: float = 0.0
    # Per second after the kill: messages received, and publishes started that succeeded.
    received_per_s: list[int] = field(default_factory=list)
    published_per_s: list[int] = field(default_factory=list)


@contextmanager
def cluster(heap_mb: int = 384, settings: dict[str, str] | None = None) -> Iterator[LocalKafka]:
    kafka = LocalKafka(nodes=3, heap_mb=heap_mb, settings={**CLUSTER_SETTINGS, **(settings or {})})
    kafka.start(timeout=240)
    try:
        yield kafka
    finally:
        kafka.stop()


# What the active controller logs when it fences a broker whose heartbeats stopped (Kafka 4),
# under the broker log's pattern `[%d] %p %m (%c)` (gateway/kafka/broker-log4j2.properties).
_FENCED = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] INFO .*Fencing broker (\d+) at epoch \d+ "
    r"because its session has timed out"
)


def fenced_at(kafka: LocalKafka, node: int, after: float) -> float | None:
    """When (wall-clock seconds) the controller first fenced `node` for a lapsed session after
    `after`, from the broker logs of the cluster's nodes (each in `node-N/broker.log`)."""
    found = []
    for log in sorted(kafka.log_file.parent.parent.glob("node-*/broker.log")):
        for line in log.read_text(errors="replace").splitlines():
            match = _FENCED.match(line)
            if match and int(match[2]) == node:
                at = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time
                if at > after:
                    found.append(at)
    return min(found, default=None)


def leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    """Partition -> node id of its leader."""
    desc = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    return {p.id: p.leader.id for p in desc.partitions if p.leader is not None}


def coordinator(admin: AdminClient, group: str) -> int:
    return int(admin.describe_consumer_groups([group])[group].result(30).coordinator.id)


class Load:
    """The official publisher at `rate` msg/s and the official subscriber, with their records."""

    def __init__(self, address: str, topic: str, subscription: str, rate: float) -> None:
        from google.cloud import pubsub_v1

        old = os.environ.get("PUBSUB_EMULATOR_HOST")
        os.environ["PUBSUB_EMULATOR_HOST"] = address  # the clients read it when they are made
        try:
            self.pub = pubsub_v1.PublisherClient()
            self.sub = pubsub_v1.SubscriberClient()
        finally:
            if old is None:
                del os.environ["PUBSUB_EMULATOR_HOST"]
            else:
                os.environ["PUBSUB_EMULATOR_HOST"] = old
        self.topic, self.subscription, self.rate = topic, subscription, rate
        self.lock = threading.Lock()
        self.acked_publishes: dict[str, bytes] = {}  # message id -> data
        self.publish_errors: dict[str, int] = {}
        self.publish_seconds: list[tuple[float, float]] = []  # (started, took)
        self.received: list[tuple[float, int, bytes]] = []  # (time, partition, data)
        self.confirmed: set[bytes] = set()
        self.redelivered: set[bytes] = set()
        self.ack_failures: dict[str, int] = {}
        self._stop = threading.Event()
        self._seq = 0
        self._threads: list[threading.Thread] = []
        self._stream: Any = None

    def start(self) -> None:
        self._stream = self.sub.subscribe(self.subscription, self._on_message)
        thread = threading.Thread(target=self._publish_loop, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _publish_loop(self) -> None:
        period = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            data = f"m{self._seq}".encode()
            self._seq += 1
            started = time.monotonic()
            future = self.pub.publish(self.topic, data)
            future.add_done_callback(lambda f, d=data, s=started: self._published(f, d, s))
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _published(self, future: Any, data: bytes, started: float) -> None:
        took = time.monotonic() - started
        try:
            message_id = future.result()
        except Exception as exc:
            self._tally(self.publish_errors, exc)
            return
        with self.lock:
            self.acked_publishes[message_id] = data
            self.publish_seconds.append((started, took))

    def _on_message(self, message: Any) -> None:
        partition = int(message.message_id) >> 40
        with self.lock:
            self.received.append((time.monotonic(), partition, message.data))
            if message.data in self.confirmed:
                self.redelivered.add(message.data)
        # Not waited for here: the client runs callbacks on 10 threads, and a callback that
        # blocked on its ack would cap receiving at 10 per ack round trip.
        message.ack_with_response().add_done_callback(lambda f, d=message.data: self._acked(f, d))

    def _acked(self, future: Any, data: bytes) -> None:
        try:
            future.result()
        except Exception as exc:
            self._tally(self.ack_failures, exc)
            return
        with self.lock:
            self.confirmed.add(data)

    def _tally(self, counts: dict[str, int], exc: BaseException) -> None:
        with self.lock:
            kind = type(exc).__name__
            counts[kind] = counts.get(kind, 0) + 1

    def stop_publishing(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        self.pub.stop()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            try:
                self._stream.result(timeout=30)
            except Exception:
                pass
        self.sub.close()


def _watch_ready(rest_address: str, since: float, seconds: float) -> float | None:
    """Ask the gateway's /readyz every half second for `seconds`: when it was ready from on."""
    ready_from: float | None = 0.0
    end = since + seconds
    while (now := time.monotonic()) < end:
        try:
            with urllib.request.urlopen(f"http://{rest_address}/readyz", timeout=2) as answer:
                ready = answer.status == 200
        except (OSError, urllib.error.URLError):  # a 503 raises HTTPError, an URLError
            ready = False
        if not ready:
            ready_from = None
        elif ready_from is None:
            ready_from = round(now - since, 1)
        time.sleep(max(0.0, min(0.5, end - time.monotonic())))
    return ready_from


def _figures(load: Load, rnd: Round, killed_at: float, parts: set[int], since: float) -> None:
    with load.lock:
        received = sorted(t for t in load.received if t[0] >= since)
        rnd.published = sum(1 for s, _ in load.publish_seconds if s >= since)
        rnd.publish_errors = dict(load.publish_errors)
        rnd.redelivered_after_confirmed_ack = len(load.redelivered)
        rnd.ack_failures = dict(load.ack_failures)
        took = [d for s, d in load.publish_seconds if s >= since]
    after = [t for t, _, _ in received if t > killed_at]
    rnd.resumed_any_s = round(after[0] - killed_at, 2) if after else None
    mine = [t for t, p, _ in received if t > killed_at and p in parts]
    rnd.resumed_killed_partitions_s = round(mine[0] - killed_at, 2) if mine else None
    times = [*(t for t, _, _ in received), time.monotonic()]
    rnd.longest_delivery_gap_s = round(max((b - a for a, b in itertools.pairwise(times)), default=0.0), 2)
    warm = [t for t, _, _ in received if t <= killed_at]
    rnd.longest_gap_before_kill_s = round(max((b - a for a, b in itertools.pairwise(warm)), default=0.0), 2)
    rnd.longest_publish_s = round(max(took, default=0.0), 2)
    rnd.publish_p50_s = round(statistics.median(took), 3) if took else 0.0
    with load.lock:
        started = [s for s, _ in load.publish_seconds if s > killed_at]
    seconds = int(time.monotonic() - killed_at)
    rnd.received_per_s = [sum(1 for t in after if i <= t - killed_at < i + 1) for i in range(seconds)]
    quiet = [i for i, n in enumerate(rnd.received_per_s) if n == 0]
    if not quiet:
        rnd.flowing_again_s = 0.0
    elif quiet[-1] + 1 < seconds:
        rnd.flowing_again_s = float(quiet[-1] + 1)
    rnd.published_per_s = [sum(1 for s in started if i <= s - killed_at < i + 1) for i in range(seconds)]


def run(
    rounds: int = 2,
    rate: float = 200.0,
    before: float = 8.0,
    after: float = 25.0,
    log_dir: Path | None = None,
    detect_ms: int | None = None,
) -> dict[str, Any]:
    """`detect_ms`: the brokers' `broker.session.timeout.ms` (Kafka's default is 9000), how long
    the controller takes to fence a dead broker. Until then every acks=all write to a partition
    the dead broker follows waits for it, the partitions of all other leaders included."""
    log_dir = log_dir or Path(os.environ.get("TMPDIR", "/tmp"))
    extra = (
        {}
        if detect_ms is None
        else {
            "broker.session.timeout.ms": str(detect_ms),
            "broker.heartbeat.interval.ms": str(max(500, detect_ms // 3)),
        }
    )
    out: dict[str, Any] = {
        "cluster": {"nodes": 3, **CLUSTER_SETTINGS, **extra},
        "rate_msg_s": rate,
        "partitions": PARTITIONS,
        "rounds": [],
    }
    with cluster(settings=extra) as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        prefix = f"fo{uuid.uuid4().hex[:6]}"
        gw = GatewayProc(kafka.bootstrap, prefix, log_dir / f"failover-{prefix}.log", "--log-level", "INFO")
        try:
            topic, subscription = "projects/p/topics/failover", "projects/p/subscriptions/failover"
            load = Load(gw.address, topic, subscription, rate)
            load.pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": str(PARTITIONS)}})
            load.sub.create_subscription(
                request={
                    "name": subscription,
                    "topic": topic,
                    "ack_deadline_seconds": 30,
                    "enable_exactly_once_delivery": True,
                }
            )
            kafka_topic = names.kafka_topic_for(topic)
            group: str | None = None
            load.start()
            for i in range(rounds):
                since = time.monotonic()
                time.sleep(before)
                lead = leaders(admin, kafka_topic)
                if i % 2 == 0:
                    counts: dict[int, int] = {}
                    for node in lead.values():
                        counts[node] = counts.get(node, 0) + 1
                    node, what = max(counts, key=lambda n: counts[n]), "leader"
                else:
                    group = group or next(
                        g.group_id
                        for g in admin.list_consumer_groups().result(30).valid
                        if g.group_id.startswith(f"{prefix}.")
                    )
                    node, what = coordinator(admin, group), "coordinator"
                parts = {p for p, n in lead.items() if n == node}
                rnd = Round(what, node)
                killed_at, killed_wall = time.monotonic(), time.time()
                kafka.kill_node(node)
                rnd.ready_again_s = _watch_ready(gw.rest_address, killed_at, after)
                _figures(load, rnd, killed_at, parts, since)
                fence = fenced_at(kafka, node, killed_wall)
                if fence is not None:
                    rnd.fenced_s = round(fence - killed_wall, 2)
                    with load.lock:
                        fenced_mono = killed_at + (fence - killed_wall)
                        later = [t for t, _, _ in load.received if t > fenced_mono]
                    rnd.resumed_after_fence_s = round(min(later) - fenced_mono, 2) if later else None
                out["rounds"].append(asdict(rnd))
                kafka.start_node(node, timeout=180)
            load.stop_publishing()
            stopped_at = time.monotonic()
            deadline = stopped_at + 120
            while time.monotonic() < deadline:
                # Copies taken under the lock, compared outside it: the subscriber's callbacks
                # need the lock to record what they receive.
                with load.lock:
                    published = list(load.acked_publishes.values())
                    received_now = [d for _, _, d in load.received]
                seen = set(received_now)
                if all(d in seen for d in published):
                    break
                time.sleep(1)
            out["caught_up_after_s"] = round(time.monotonic() - stopped_at, 2)
            with load.lock:
                received = {d for _, _, d in load.received}
                out["acknowledged_publishes"] = len(load.acked_publishes)
                missing = {m: d for m, d in load.acked_publishes.items() if d not in received}
                out["lost_in_total"] = len(missing)  # acknowledged, not received 2 minutes on
                by_partition: dict[str, int] = {}
                for m in missing:
                    key = str(int(m) >> 40)
                    by_partition[key] = by_partition.get(key, 0) + 1
                out["lost_by_partition"] = by_partition
                start = min((t for t, _, _ in load.received), default=0.0)
                timeline: dict[str, int] = {}
                for t, _, _ in load.received:
                    key = str(int((t - start) // 5 * 5))
                    timeline[key] = timeline.get(key, 0) + 1
                out["received_per_5_s"] = timeline
                out["redelivered_after_confirmed_ack"] = len(load.redelivered)
                out["publish_errors"] = dict(load.publish_errors)
                out["ack_failures"] = dict(load.ack_failures)
            load.close()
        finally:
            gw.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/failover.json"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument(
        "--detect-ms",
        type=int,
        default=None,
        help="the brokers' broker.session.timeout.ms (Kafka's default: 9000)",
    )
    args = parser.parse_args()
    figures = run(rounds=args.rounds, rate=args.rate, detect_ms=args.detect_ms)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
