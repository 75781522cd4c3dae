"""A soak: one gateway under steady traffic from the official Python clients for an hour, sampled
every minute; none of what is sampled may grow without bound (issue 56).

An embedded broker with Kafka's stock settings, one gateway (`python -m gateway serve`), the
official publisher at a steady rate (each message ~1 KiB with two attributes: its sequence number
and its publish time) and the official StreamingPull subscriber on two subscriptions of its topic,
one plain and one exactly-once. Each delivery is acked at once, nacked (a few percent), or held
past the subscription's ack deadline so that the client's lease manager extends it, or given a
longer deadline with modify_ack_deadline and acked later. Every `--churn-seconds` a subscription is
created, read for a while and deleted.

Each sample (every minute; every 10 s in runs under 10 minutes) records the gateway's RSS, open
file descriptors and threads, the lease logs' end offsets and their bytes on the broker's disk,
and the p50/p99 publish-to-receive latency of the first deliveries since the previous sample.
The verdict per metric, after a warm-up: the median of the last third of the samples against the
median of the first third (within a slack), and the least-squares slope over the second half
(what it would add over another run as long, within the same slack). Checked besides: no
confirmed publish lost, no delivery on the exactly-once subscription after its ack was confirmed.

`python -m benchmarks.soak --minutes 60 --out benchmarks/results/soak.json` (`make soak`);
exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import json
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient

from benchmarks import procstats
from benchmarks.processes import GatewayProc
from gateway.kafka.local import KAFKA_VERSION, STOCK, LocalKafka
from gateway.translate import names

PROJECT = "projects/soak"
TOPIC = f"{PROJECT}/topics/soak"
PLAIN = f"{PROJECT}/subscriptions/plain"
EXACTLY_ONCE = f"{PROJECT}/subscriptions/exactly-once"
ACK_DEADLINE_S = 10
DRAIN_S = 120.0


@dataclass(frozen=True)
class Slack:
    """How much a metric may grow: `relative` of the first third's median plus `absolute`."""

    relative: float
    absolute: float

    def allowed(self, base: float) -> float:
        return abs(base) * self.relative + self.absolute


# What each checked metric may grow by. RSS: the allocator keeps what it once used, so some
# settling is normal. fds and threads: a few come and go with connections and pools. p99: the
# machine is shared, so a tail doubles now and then without anything growing.
CHECKED: dict[str, Slack] = {
    "rss_mb": Slack(0.10, 16.0),
    "fds": Slack(0.0, 6.0),
    "threads": Slack(0.0, 4.0),
    "lease_log_segment_bytes": Slack(0.25, 1024 * 1024),
    "lease_log_topics": Slack(0.0, 1.0),
    "p99_ms": Slack(1.0, 50.0),
}


@dataclass
class SubRecord:
    """What one persistent subscription saw."""

    name: str
    exactly_once: bool
    first_seen: dict[int, float] = field(default_factory=dict)  # seq -> wall time of first delivery
    deliveries: int = 0
    acks: int = 0
    nacks: int = 0
    holds: int = 0
    modacks: int = 0
    confirmed: set[int] = field(default_factory=set)  # acks confirmed (ack_with_response)
    after_confirmed_ack: int = 0
    redelivered_while_held: int = 0
    held: set[int] = field(default_factory=set)
    ack_failures: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)  # first deliveries since the last sample


class Scheduler:
    """Runs callables at given monotonic times on one thread (the holds' late acks)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._n = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="soak-scheduler", daemon=True)
        self._thread.start()

    def at(self, when: float, action: Callable[[], None]) -> None:
        with self._cond:
            self._n += 1
            heapq.heappush(self._heap, (when, self._n, action))
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._heap)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(10)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                if self._stopped:
                    return
                _, _, action = heapq.heappop(self._heap)
            try:
                action()
            except Exception as exc:  # a message whose stream has ended: nothing to ack on
                print(f"soak: a late action failed: {exc!r}", file=sys.stderr)


class Soak:
    """The clients and their records."""

    def __init__(self, address: str, rate: float, size: int, fractions: dict[str, float]) -> None:
        from google.cloud import pubsub_v1  # type: ignore[import-untyped]

        os.environ["PUBSUB_EMULATOR_HOST"] = address  # the clients read it when they are made
        self.pub = pubsub_v1.PublisherClient()
        self.sub = pubsub_v1.SubscriberClient()
        self.rate, self.size, self.fractions = rate, size, fractions
        self.lock = threading.Lock()
        self.confirmed_publishes: dict[int, str] = {}  # seq -> message id
        self.publish_errors: dict[str, int] = {}
        self.subs = {PLAIN: SubRecord(PLAIN, False), EXACTLY_ONCE: SubRecord(EXACTLY_ONCE, True)}
        self.churn: list[dict[str, Any]] = []
        self.scheduler = Scheduler()
        self._stop = threading.Event()
        self._seq = 0
        self._streams: list[Any] = []
        self._rng = random.Random(56)
        self._payload = bytes(random.Random(3).randrange(256) for _ in range(size))

    def setup(self) -> None:
        self.pub.create_topic(request={"name": TOPIC})
        for name, record in self.subs.items():
            self.sub.create_subscription(
                request={
                    "name": name,
                    "topic": TOPIC,
                    "ack_deadline_seconds": ACK_DEADLINE_S,
                    "enable_exactly_once_delivery": record.exactly_once,
                }
            )

    def start(self) -> None:
        for name, record in self.subs.items():
            self._streams.append(self.sub.subscribe(name, self._callback(record)))
        threading.Thread(target=self._publish_loop, name="soak-publisher", daemon=True).start()

    # ------------------------------------------------------------------ publishing

    def _publish_loop(self) -> None:
        period = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            seq = self._seq
            self._seq += 1
            future = self.pub.publish(TOPIC, self._payload, seq=str(seq), sent=repr(time.time()))
            future.add_done_callback(lambda f, s=seq: self._published(f, s))
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _published(self, future: Any, seq: int) -> None:
        try:
            message_id = future.result()
        except Exception as exc:
            _tally(self.lock, self.publish_errors, exc)
            return
        with self.lock:
            self.confirmed_publishes[seq] = message_id

    def published(self) -> int:
        return self._seq

    # ------------------------------------------------------------------ receiving

    def _callback(self, record: SubRecord) -> Callable[[Any], None]:
        def on_message(message: Any) -> None:
            now = time.time()
            seq = int(message.attributes["seq"])
            with self.lock:
                record.deliveries += 1
                if seq in record.confirmed:
                    record.after_confirmed_ack += 1
                if seq in record.held:
                    record.redelivered_while_held += 1
                if seq not in record.first_seen:
                    record.first_seen[seq] = now
                    record.latencies_ms.append((now - float(message.attributes["sent"])) * 1000)
                draw = self._rng.random()
            nack, hold, modack = (self.fractions[k] for k in ("nack", "hold", "modack"))
            if draw < nack:
                with self.lock:
                    record.nacks += 1
                if record.exactly_once:
                    message.nack_with_response()
                else:
                    message.nack()
            elif draw < nack + hold:
                # Past the ack deadline: only the client's lease manager keeps it leased.
                with self.lock:
                    record.holds += 1
                    record.held.add(seq)
                self.scheduler.at(time.monotonic() + ACK_DEADLINE_S * 1.6, lambda: self._ack(record, message))
            elif draw < nack + hold + modack:
                with self.lock:
                    record.modacks += 1
                if record.exactly_once:
                    message.modify_ack_deadline_with_response(ACK_DEADLINE_S * 3)
                else:
                    message.modify_ack_deadline(ACK_DEADLINE_S * 3)
                self.scheduler.at(time.monotonic() + ACK_DEADLINE_S * 1.2, lambda: self._ack(record, message))
            else:
                self._ack(record, message)

        return on_message

    def _ack(self, record: SubRecord, message: Any) -> None:
        seq = int(message.attributes["seq"])
        with self.lock:
            record.acks += 1
            record.held.discard(seq)
        if not record.exactly_once:
            message.ack()
            return
        # Not waited for: the client runs callbacks on 10 threads, each would wait a round trip.
        message.ack_with_response().add_done_callback(lambda f: self._acked(record, seq, f))

    def _acked(self, record: SubRecord, seq: int, future: Any) -> None:
        try:
            future.result()
        except Exception as exc:
            _tally(self.lock, record.ack_failures, exc)
            return
        with self.lock:
            record.confirmed.add(seq)

    # ------------------------------------------------------------------ churn

    def churn_once(self, n: int, read_s: float) -> None:
        """Create a subscription, read it for `read_s`, delete it; what happened goes to self.churn."""
        name = f"{PROJECT}/subscriptions/churn-{n}"
        row: dict[str, Any] = {"n": n, "received": 0, "error": None}
        counted = threading.Lock()

        def on_message(message: Any) -> None:
            with counted:
                row["received"] += 1
            message.ack()

        try:
            started = time.monotonic()
            self.sub.create_subscription(
                request={"name": name, "topic": TOPIC, "ack_deadline_seconds": ACK_DEADLINE_S}
            )
            row["create_s"] = round(time.monotonic() - started, 3)
            stream = self.sub.subscribe(name, on_message)
            time.sleep(read_s)
            stream.cancel()
            try:
                stream.result(timeout=30)
            except Exception:
                pass
            started = time.monotonic()
            self.sub.delete_subscription(request={"subscription": name})
            row["delete_s"] = round(time.monotonic() - started, 3)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        with self.lock:
            self.churn.append(row)

    # ------------------------------------------------------------------ the end

    def stop_publishing(self) -> None:
        self._stop.set()
        time.sleep(0.5)
        self.pub.stop()

    def drain(self, seconds: float) -> float:
        """Wait until each persistent subscription has received every confirmed publish and no
        hold is pending, or `seconds`: how long that took."""
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            with self.lock:
                wanted = set(self.confirmed_publishes)
                done = all(wanted <= set(r.first_seen) for r in self.subs.values())
            if done and self.scheduler.pending() == 0:
                break
            time.sleep(1)
        time.sleep(2)  # the last acks' confirmations
        return round(time.monotonic() - started, 1)

    def close(self) -> None:
        for stream in self._streams:
            stream.cancel()
            try:
                stream.result(timeout=30)
            except Exception:
                pass
        self.scheduler.stop()
        self.sub.close()


class ClientErrors(logging.Handler):
    """Counts what the subscriber client logs at WARNING or above (its lease manager's failed
    extensions, say), by the log message's first line, instead of printing each traceback."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().splitlines()[0][:120] if record.getMessage() else record.name
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {str(record.exc_info[1])[:80]})"
        with self._lock:
            self.counts[text] = self.counts.get(text, 0) + 1


def _tally(lock: threading.Lock, counts: dict[str, int], exc: BaseException) -> None:
    with lock:
        kind = type(exc).__name__
        counts[kind] = counts.get(kind, 0) + 1


# ---------------------------------------------------------------------- sampling


class Sampler:
    """What one sample reads: the gateway's /proc, the lease logs' offsets and bytes on disk."""

    def __init__(self, gateway: GatewayProc, bootstrap: str, prefix: str, log_dir: Path) -> None:
        self.gateway, self.log_dir = gateway, log_dir
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{prefix}-soak-sampler",
                "enable.auto.commit": False,
            }
        )
        self.log_base = str(names.internal_topic(prefix, "acks")) + "."
        self.persistent = {
            sub: str(names.internal_topic(prefix, "acks", sub)) + "." for sub in (PLAIN, EXACTLY_ONCE)
        }

    def lease_logs(self) -> list[str]:
        topics = self.admin.list_topics(timeout=30).topics
        return sorted(t for t in topics if t.startswith(self.log_base))

    def take(self, soak: Soak, minute: float) -> dict[str, Any]:
        pid = self.gateway.pid
        proc = procstats.proc_sample(pid)
        status = _status(pid)
        try:
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            fds = -1
        logs = self.lease_logs()
        ends = self._end_offsets(logs)
        disk = {t: _disk_bytes(self.log_dir, t) for t in logs}
        with soak.lock:
            latencies = [x for r in soak.subs.values() for x in r.latencies_ms]
            by_sub = {r.name.rsplit("/", 1)[1]: _percentiles(r.latencies_ms) for r in soak.subs.values()}
            for r in soak.subs.values():
                r.latencies_ms = []
            delivered = {r.name.rsplit("/", 1)[1]: r.deliveries for r in soak.subs.values()}
            confirmed = len(soak.confirmed_publishes)
        p50, p99 = _percentiles(latencies)
        persistent_ends = {
            sub.rsplit("/", 1)[1]: sum(v for t, v in ends.items() if t.startswith(base))
            for sub, base in self.persistent.items()
        }
        persistent_disk = {
            sub.rsplit("/", 1)[1]: sum(v[0] for t, v in disk.items() if t.startswith(base))
            for sub, base in self.persistent.items()
        }
        allocated = sum(
            v[1] for t, v in disk.items() if any(t.startswith(b) for b in self.persistent.values())
        )
        return {
            "minute": round(minute, 2),
            "alive": proc is not None,
            "rss_mb": round(proc.rss_mb, 1) if proc else None,
            "hwm_mb": round(proc.hwm_mb, 1) if proc else None,
            "cpu_s": round(proc.cpu_s, 1) if proc else None,
            "fds": fds,
            "threads": int(status.get("Threads", "-1")),
            "lease_log_topics": len(logs),
            "lease_log_end_offsets": sum(persistent_ends.values()),
            "lease_log_end_offsets_by_sub": persistent_ends,
            "lease_log_segment_bytes": sum(persistent_disk.values()),
            "lease_log_segment_bytes_by_sub": persistent_disk,
            "lease_log_allocated_bytes": allocated,
            "p50_ms": p50,
            "p99_ms": p99,
            "latency_ms_by_sub": {k: {"p50": a, "p99": b} for k, (a, b) in by_sub.items()},
            "first_deliveries": len(latencies),
            "published": soak.published(),
            "confirmed_publishes": confirmed,
            "deliveries": delivered,
        }

    def _end_offsets(self, topics: list[str]) -> dict[str, int]:
        """The persistent lease logs' end offsets summed over partitions, by topic."""
        mine = [t for t in topics if any(t.startswith(b) for b in self.persistent.values())]
        meta = self.admin.list_topics(timeout=30).topics
        out: dict[str, int] = {}
        for topic in mine:
            for p in meta[topic].partitions if topic in meta else []:
                tp = confluent_kafka.TopicPartition(topic, p)
                out[topic] = out.get(topic, 0) + int(self.consumer.get_watermark_offsets(tp, timeout=30)[1])
        return out


def _status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _disk_bytes(log_dir: Path, topic: str) -> tuple[int, int]:
    """A topic's partition directories under the broker's log.dirs: the bytes of its segments
    (*.log, the records retained) and the disk its files take (st_blocks: Kafka preallocates
    10 MiB sparse index files per segment, so their sizes say little)."""
    segments = allocated = 0
    for part in log_dir.glob(f"{topic}-*"):
        if not part.name[len(topic) + 1 :].isdigit():
            continue
        for f in part.iterdir():
            try:
                st = f.stat()
            except OSError:
                continue
            allocated += st.st_blocks * 512
            segments += st.st_size if f.suffix == ".log" else 0
    return segments, allocated


def _percentiles(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    ordered = sorted(values)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return round(p50, 1), round(p99, 1)


# ---------------------------------------------------------------------- the verdict


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys on xs (0 with fewer than two points)."""
    if len(xs) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def verdict(samples: list[dict[str, Any]], warm_up: int) -> dict[str, dict[str, Any]]:
    """Per checked metric: the first and last third's medians after the warm-up, the slope over
    the second half, what the slack allows, and whether both stay within it."""
    out: dict[str, dict[str, Any]] = {}
    kept = samples[warm_up:]
    for metric, slack in CHECKED.items():
        points = [(s["minute"], float(s[metric])) for s in kept if s.get(metric) is not None]
        if len(points) < 3:
            out[metric] = {"ok": False, "why": f"only {len(points)} samples after the warm-up"}
            continue
        third = max(1, len(points) // 3)
        first = statistics.median(y for _, y in points[:third])
        last = statistics.median(y for _, y in points[-third:])
        half = points[len(points) // 2 :]
        per_minute = slope([x for x, _ in half], [y for _, y in half])
        span = points[-1][0] - points[0][0]
        allowed = slack.allowed(first)
        thirds_ok = last - first <= allowed
        slope_ok = per_minute * span <= allowed
        out[metric] = {
            "ok": thirds_ok and slope_ok,
            "first_third_median": round(first, 1),
            "last_third_median": round(last, 1),
            "growth": round(last - first, 1),
            "allowed_growth": round(allowed, 1),
            "slope_per_minute_second_half": round(per_minute, 3),
            "slope_over_run": round(per_minute * span, 1),
            "thirds_ok": thirds_ok,
            "slope_ok": slope_ok,
            "slack": asdict(slack),
        }
    ends = [(s["minute"], float(s["lease_log_end_offsets"])) for s in kept]
    out["lease_log_end_offsets"] = {
        "ok": True,
        "checked": False,
        "why": "grows with traffic by design (a compacted topic's offsets never go back); reported only",
        "growth_per_minute": round(slope([x for x, _ in ends], [y for _, y in ends]), 1),
    }
    return out


# ---------------------------------------------------------------------- the run


def _git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def run(
    minutes: float,
    rate: float,
    size: int,
    sample_s: float,
    churn_s: float,
    heap_mb: int,
    fractions: dict[str, float],
    log_path: Path,
) -> dict[str, Any]:
    total_s = minutes * 60
    warm_up = max(1, round(total_s / sample_s / 12))
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git_commit(),
        "machine": {"cores": procstats.CORES, "kafka": KAFKA_VERSION},
        "settings": {
            "minutes": minutes,
            "rate_msg_s": rate,
            "data_bytes": size,
            "attributes": 2,
            "sample_seconds": sample_s,
            "warm_up_samples": warm_up,
            "churn_every_seconds": churn_s,
            "ack_deadline_seconds": ACK_DEADLINE_S,
            "fractions": fractions,
            "broker": {"profile": STOCK, "heap_mb": heap_mb, "nodes": 1},
            "gateway": "python -m gateway serve, default settings",
            "subscriptions": {"plain": PLAIN, "exactly_once": EXACTLY_ONCE},
        },
        "measured": {
            "rss_mb, fds, threads": "the gateway process: /proc/PID/status VmRSS and Threads, /proc/PID/fd",
            "lease_log_end_offsets": "the two persistent subscriptions' lease-log topics: end offsets "
            "summed over partitions (records ever written)",
            "lease_log_segment_bytes": "the same topics' segment files (*.log) under the broker's log.dirs: "
            "the records retained after compaction (checked)",
            "lease_log_allocated_bytes": "the disk all their files take (st_blocks; reported only)",
            "lease_log_topics": "lease-log topics on the broker: 2, and a churned one while it lives",
            "p50_ms, p99_ms": "publish (the `sent` attribute, wall clock) to first delivery, both "
            "persistent subscriptions, over the deliveries since the previous sample",
        },
    }
    client_errors = ClientErrors()
    client_logger = logging.getLogger("google.cloud.pubsub_v1")
    client_logger.addHandler(client_errors)
    client_logger.propagate = False
    data = Path(tempfile.mkdtemp(prefix="soak-kafka-"))
    kafka = LocalKafka(heap_mb=heap_mb, data_dir=data, profile=STOCK)
    bootstrap = kafka.start()
    prefix = f"soak{uuid.uuid4().hex[:6]}"
    gateway = GatewayProc(bootstrap, prefix, log_path)
    soak: Soak | None = None
    sampler: Sampler | None = None
    try:
        soak = Soak(gateway.address, rate, size, fractions)
        soak.setup()
        sampler = Sampler(gateway, bootstrap, prefix, data / "kraft-logs")
        soak.start()
        samples: list[dict[str, Any]] = []
        started = time.monotonic()
        next_sample, next_churn, n_churn = sample_s, churn_s / 2, 0
        churners: list[threading.Thread] = []
        while (elapsed := time.monotonic() - started) < total_s:
            if elapsed >= next_churn:
                read_s = min(20.0, churn_s * 0.8)
                t = threading.Thread(target=soak.churn_once, args=(n_churn, read_s), daemon=True)
                t.start()
                churners.append(t)
                n_churn += 1
                next_churn += churn_s
            if elapsed >= next_sample:
                sample = sampler.take(soak, elapsed / 60)
                samples.append(sample)
                print(json.dumps({k: sample[k] for k in _SHOWN}), flush=True)
                next_sample += sample_s
                if not sample["alive"]:
                    break
            time.sleep(max(0.05, min(next_sample, next_churn) - (time.monotonic() - started)))
        for t in churners:
            t.join(60)
        soak.stop_publishing()
        result["drain_s"] = soak.drain(DRAIN_S)
        result["samples"] = samples
        result["after_drain"] = sampler.take(soak, (time.monotonic() - started) / 60)
        result["verdict"] = verdict(samples, warm_up)
        result["history"] = _history(soak)
        result["churn"] = soak.churn
        result["gateway_log"] = _log_summary(log_path)
    finally:
        if soak is not None:
            soak.close()
        result["client_log"] = dict(client_errors.counts)
        if sampler is not None:
            sampler.consumer.close()
        gateway.stop()
        kafka.stop()
        shutil.rmtree(data, ignore_errors=True)
    checks = {
        "no confirmed publish lost": result["history"]["lost_confirmed_publishes"] == 0,
        "no delivery after a confirmed ack (exactly-once)": result["history"]["exactly_once"][
            "deliveries_after_confirmed_ack"
        ]
        == 0,
        "gateway alive throughout": all(s["alive"] for s in result["samples"]),
        "every churned subscription created and deleted": all(r["error"] is None for r in result["churn"]),
        "every churned subscription received messages": all(r["received"] > 0 for r in result["churn"]),
        **{f"{m} bounded": v["ok"] for m, v in result["verdict"].items()},
    }
    result["checks"] = checks
    result["ok"] = all(checks.values())
    return result


_SHOWN = ("minute", "rss_mb", "fds", "threads", "lease_log_end_offsets", "lease_log_segment_bytes", "p99_ms")


def _history(soak: Soak) -> dict[str, Any]:
    with soak.lock:
        confirmed = dict(soak.confirmed_publishes)
        out: dict[str, Any] = {
            "published": soak.published(),
            "confirmed_publishes": len(confirmed),
            "publish_errors": dict(soak.publish_errors),
        }
        lost = 0
        for record in soak.subs.values():
            missing = [s for s in confirmed if s not in record.first_seen]
            lost += len(missing)
            out[record.name.rsplit("/", 1)[1].replace("-", "_")] = {
                "deliveries": record.deliveries,
                "distinct_received": len(record.first_seen),
                "lost_confirmed_publishes": len(missing),
                "lost_examples": sorted(missing)[:10],
                "acks": record.acks,
                "nacks": record.nacks,
                "held_past_deadline": record.holds,
                "modify_ack_deadline": record.modacks,
                "redelivered_while_held": record.redelivered_while_held,
                "confirmed_acks": len(record.confirmed) if record.exactly_once else None,
                "deliveries_after_confirmed_ack": record.after_confirmed_ack if record.exactly_once else None,
                "ack_failures": dict(record.ack_failures),
            }
        out["lost_confirmed_publishes"] = lost
    return out


def _log_summary(path: Path) -> dict[str, Any]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    flagged = [ln for ln in lines if "ERROR" in ln or "WARNING" in ln or "Traceback" in ln]
    return {"lines": len(lines), "warnings_or_errors": len(flagged), "first": flagged[:10]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/soak.json"))
    parser.add_argument("--rate", type=float, default=100.0, help="messages a second (default 100)")
    parser.add_argument("--size", type=int, default=1024, help="bytes of data a message (default 1024)")
    parser.add_argument(
        "--sample-seconds", type=float, default=None, help="default 60; 10 in runs under 10 minutes"
    )
    parser.add_argument("--churn-seconds", type=float, default=None, help="default: the sampling interval")
    parser.add_argument("--heap-mb", type=int, default=512)
    parser.add_argument("--nack", type=float, default=0.03)
    parser.add_argument("--hold", type=float, default=0.02, help="held past the ack deadline, then acked")
    parser.add_argument("--modack", type=float, default=0.02, help="modify_ack_deadline, acked later")
    parser.add_argument("--log", type=Path, default=None, help="the gateway's log (default: beside --out)")
    args = parser.parse_args(argv)
    sample_s = args.sample_seconds or (60.0 if args.minutes >= 10 else 10.0)
    churn_s = args.churn_seconds or sample_s
    log_path = args.log or Path(tempfile.gettempdir()) / f"soak-gateway-{os.getpid()}.log"
    fractions = {"nack": args.nack, "hold": args.hold, "modack": args.modack}
    result = run(args.minutes, args.rate, args.size, sample_s, churn_s, args.heap_mb, fractions, log_path)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for metric, v in result["verdict"].items():
        if "first_third_median" in v:
            print(
                f"{metric}: first third {v['first_third_median']}, last third {v['last_third_median']}, "
                f"slope {v['slope_per_minute_second_half']}/min: {'ok' if v['ok'] else 'GROWS'}"
            )
        else:
            print(f"{metric}: {v}")
    print(json.dumps({k: result[k] for k in ("history", "client_log", "checks")}, indent=2))
    print(f"{'ok' if result['ok'] else 'FAILED'}; written to {args.out}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
