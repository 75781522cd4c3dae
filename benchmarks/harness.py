"""The benchmark's processes: a Kafka broker (started or reused), gateway subprocesses, a pool of
load-generator processes (spawned, so they share nothing with this one), and measurement windows
that read the CPU and memory of every process involved."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import multiprocessing.pool
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from benchmarks import procstats

READY_TIMEOUT = 120.0
SAMPLE_PERIOD = 0.1
GenResult = dict[str, Any]
Task = tuple[Callable[[dict[str, Any]], GenResult], Mapping[str, Any]]


class GatewayProc:
    """`python -m gateway serve` as a subprocess; its address comes from the READY line."""

    def __init__(self, bootstrap: str, prefix: str, log_path: Path, *extra: str) -> None:
        cmd = [sys.executable, "-m", "gateway", "serve", "--port", "0", "--kafka-bootstrap", bootstrap,
               "--internal-prefix", prefix, "--log-level", "WARNING", *extra]
        self.log_path = log_path
        with log_path.open("wb") as log_file:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file)
        self.address = self._await_ready()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _await_ready(self) -> str:
        found: list[str] = []
        stdout = self.proc.stdout
        assert stdout is not None
        threading.Thread(target=_read_ready, args=(stdout, found), daemon=True).start()
        deadline = time.monotonic() + READY_TIMEOUT
        while not found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gateway did not start; log:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        return found[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _read_ready(stream: IO[bytes], found: list[str]) -> None:
    with stream:
        for raw in stream:
            line = raw.decode(errors="replace")
            if line.startswith("READY ") and not found:
                found.append(line.split()[1].split("=", 1)[1])


@dataclasses.dataclass(frozen=True, slots=True)
class WindowStats:
    """What the processes used during one stretch of time."""

    seconds: float
    gw_cpu_pct: list[float]  # per gateway process, % of one core
    gw_rss_mb: list[float]  # per gateway process, the most seen in the stretch
    kafka_cpu_pct: float | None
    machine_cpu_pct: float  # % of all cores busy


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    t: float  # time.time()
    gateways: list[procstats.ProcSample | None]
    kafka: procstats.ProcSample | None
    busy_s: float


class Samples:
    """Samples taken every SAMPLE_PERIOD during a run; any stretch within it can be judged."""

    def __init__(self, samples: list[Sample]) -> None:
        self._samples = samples

    def between(self, t0: float, t1: float) -> WindowStats:
        """Usage from the last sample at or before t0 to the first at or after t1."""
        s = self._samples
        i = max([k for k, x in enumerate(s) if x.t <= t0], default=0)
        j = min([k for k, x in enumerate(s) if x.t >= t1], default=len(s) - 1)
        j = max(j, min(i + 1, len(s) - 1))
        a, b = s[i], s[j]
        seconds = max(1e-6, b.t - a.t)
        rss = [_peak_rss(s[i:j + 1], n) for n in range(len(a.gateways))]
        return WindowStats(
            seconds=seconds,
            gw_cpu_pct=[_pct(g0, g1, seconds) or 0.0 for g0, g1 in zip(a.gateways, b.gateways, strict=True)],
            gw_rss_mb=rss,
            kafka_cpu_pct=_pct(a.kafka, b.kafka, seconds),
            machine_cpu_pct=100.0 * (b.busy_s - a.busy_s) / seconds / procstats.CORES,
        )


class Window:
    """Samples the gateways, the broker and the machine in a thread until closed."""

    def __init__(self, gateways: list[int], kafka_pid: int | None) -> None:
        self._pids = gateways
        self._kafka = kafka_pid
        self._samples = [self._take()]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()

    def _take(self) -> Sample:
        return Sample(time.time(), [procstats.proc_sample(p) for p in self._pids],
                      procstats.proc_sample(self._kafka), procstats.machine_busy_s())

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_PERIOD):
            self._samples.append(self._take())

    def close(self) -> Samples:
        self._stop.set()
        self._thread.join()
        self._samples.append(self._take())
        return Samples(self._samples)


def _peak_rss(samples: list[Sample], n: int) -> float:
    return max((g.rss_mb for x in samples if (g := x.gateways[n]) is not None), default=0.0)


def _pct(a: procstats.ProcSample | None, b: procstats.ProcSample | None, seconds: float) -> float | None:
    if a is None or b is None:
        return None
    return 100.0 * (b.cpu_s - a.cpu_s) / seconds


def _import_all() -> None:
    """Pool initializer: import what the generators use before anything is measured."""
    import confluent_kafka  # noqa: F401
    import grpc  # noqa: F401

    from benchmarks.gen import latency, publish, subscribe  # noqa: F401


def _settle(_: int) -> int:
    time.sleep(0.5)  # long enough that every pool process takes one
    return 0


class Bench:
    """Shared state of one benchmark run: the broker, the gateways, the generator pool."""

    def __init__(self, bootstrap: str, kafka_pid: int | None, log_dir: Path, workers: int) -> None:
        self.bootstrap = bootstrap
        self.kafka_pid = kafka_pid
        self.log_dir = log_dir
        self.uid = uuid.uuid4().hex[:8]
        self.prefix = f"bench{self.uid}"
        self.gateways: list[GatewayProc] = []
        self.workers = workers
        ctx = multiprocessing.get_context("spawn")
        self.pool: multiprocessing.pool.Pool = ctx.Pool(workers, initializer=_import_all)
        self.pool.map(_settle, range(workers), chunksize=1)

    def start_gateway(self) -> GatewayProc:
        n = len(self.gateways) + 1
        gw = GatewayProc(self.bootstrap, self.prefix, self.log_dir / f"gateway-{n}.log")
        self.gateways.append(gw)
        return gw

    def stop_gateway(self, gw: GatewayProc) -> None:
        gw.stop()
        self.gateways.remove(gw)

    @property
    def gateway(self) -> GatewayProc:
        return self.gateways[0]

    def name(self, collection: str, label: str) -> str:
        return f"projects/bench/{collection}/{label}-{self.uid}"

    def window(self, gateways: list[GatewayProc] | None = None) -> Window:
        return Window([g.pid for g in (gateways or self.gateways[:1])], self.kafka_pid)

    def run(self, tasks: Sequence[Task], lead: float = 1.0, timeout: float = 600.0,
            gateways: list[GatewayProc] | None = None) -> tuple[list[GenResult], Samples]:
        """Run tasks in the pool, all starting at one instant; measure the window they run in."""
        if len(tasks) > self.workers:
            raise ValueError(f"{len(tasks)} tasks for {self.workers} generator processes")
        start_at = time.time() + lead
        pending = [self.pool.apply_async(fn, ({**args, "start_at": start_at},)) for fn, args in tasks]
        time.sleep(max(0.0, start_at - time.time()))
        window = self.window(gateways)
        results = [p.get(timeout) for p in pending]
        return results, window.close()

    def close(self) -> None:
        for gw in list(self.gateways):
            self.stop_gateway(gw)
        self.pool.terminate()
        self.pool.join()


@contextlib.contextmanager
def kafka_broker(bootstrap: str | None) -> Iterator[tuple[str, int | None, str]]:
    """(bootstrap, broker pid if we can see it, Kafka version): the given broker or a new one."""
    from gateway.kafka.local import KAFKA_VERSION, LocalKafka

    if bootstrap:
        pid = procstats.pid_listening_on(int(bootstrap.rsplit(":", 1)[1]))
        yield bootstrap, pid, f"{KAFKA_VERSION} (if the given broker is the embedded one)"
        return
    kafka = LocalKafka(heap_mb=512)
    started = kafka.start()
    try:
        yield started, kafka.pid, KAFKA_VERSION
    finally:
        kafka.stop()


def delete_topics(bootstrap: str, prefix: str) -> None:
    """Remove what a run left on the broker: its internal topics and raw consumer groups."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)]
        for fut in admin.delete_topics(topics, operation_timeout=30).values() if topics else []:
            fut.exception(60)
        groups = [g.group_id for g in admin.list_consumer_groups().result(30).valid
                  if g.group_id.startswith(prefix)]
        for fut in admin.delete_consumer_groups(groups).values() if groups else []:
            fut.exception(60)
    except Exception as exc:
        print(f"cleanup of {prefix}* on {bootstrap} incomplete: {exc}", file=sys.stderr)
