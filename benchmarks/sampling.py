"""Measurement windows: a thread samples the CPU and memory of the gateways, the broker and the
machine while generators run; any stretch within the window can then be judged."""

from __future__ import annotations

import dataclasses
import threading
import time

from benchmarks import procstats

SAMPLE_PERIOD = 0.1


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
        rss = [_peak_rss(s[i : j + 1], n) for n in range(len(a.gateways))]
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
        return Sample(
            time.time(),
            [procstats.proc_sample(p) for p in self._pids],
            procstats.proc_sample(self._kafka),
            procstats.machine_busy_s(),
        )

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
