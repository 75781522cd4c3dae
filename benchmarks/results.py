"""One row of results, built from the generators' reports and a measurement window, with a
judgement of what limited it."""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.gen.common import MSG_BYTES
from benchmarks.harness import GenResult
from benchmarks.procstats import CORES
from benchmarks.sampling import Samples, WindowStats

SATURATED = 90.0  # % busy that counts as "this was the limit"
NOTHING_SATURATED = "no CPU saturated: bound by waiting (latency), not by CPU"


@dataclasses.dataclass(slots=True)
class Row:
    scenario: str
    case: str
    kind: str  # "raw" (confluent-kafka straight to the broker) or "gateway"
    status: str = "ok"  # or "not implemented", "failed: ..."
    messages: int = 0
    seconds: float = 0.0
    msgs_per_s: float = 0.0
    mb_per_s: float = 0.0
    ratio: float | None = None  # gateway figure / raw figure, same run
    gen_procs: int = 0
    gen_cpu_pct: float = 0.0  # all generator processes together, % of one core
    gw_cpu_pct: float | None = None  # all gateway processes together, % of one core
    gw_rss_mb: float | None = None
    kafka_cpu_pct: float | None = None
    machine_cpu_pct: float = 0.0  # % of all cores
    other_cpu_pct: float = 0.0  # machine CPU not used by the processes above, % of one core
    limits: list[str] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def build(scenario: str, case: str, kind: str, results: list[GenResult], samples: Samples) -> Row:
    """A row over the stretch from the first generator's start to the last one's end."""
    count = sum(int(r["count"]) for r in results)
    t0 = min(float(r["t0"]) for r in results)
    t1 = max(float(r["t1"]) for r in results)
    seconds = max(1e-6, t1 - t0)
    win = samples.between(t0, t1)
    gateway = kind == "gateway"
    row = Row(
        scenario=scenario,
        case=case,
        kind=kind,
        messages=count,
        seconds=round(seconds, 3),
        msgs_per_s=count / seconds,
        mb_per_s=count * MSG_BYTES / seconds / 1e6,
        gen_procs=len(results),
        gen_cpu_pct=100.0 * sum(float(r["cpu_s"]) for r in results) / seconds,
        gw_cpu_pct=sum(win.gw_cpu_pct) if gateway else None,
        gw_rss_mb=max(win.gw_rss_mb, default=0.0) if gateway else None,
        kafka_cpu_pct=win.kafka_cpu_pct,
        machine_cpu_pct=win.machine_cpu_pct,
    )
    if gateway and count:
        row.extra["gw_cpu_us_per_msg"] = round(sum(win.gw_cpu_pct) / 100.0 * seconds * 1e6 / count, 1)
    if all("pulls" in r for r in results):
        row.extra.update(_pull_figures(results))
    known = sum(win.gw_cpu_pct) + (win.kafka_cpu_pct or 0.0) + row.gen_cpu_pct
    row.other_cpu_pct = max(0.0, win.machine_cpu_pct * CORES - known)
    if gateway and len(win.gw_cpu_pct) > 1:
        row.extra["gw_cpu_pct_each"] = [round(c) for c in win.gw_cpu_pct]
    row.limits = judge(row, results, win)
    return row


def _pull_figures(results: list[GenResult]) -> dict[str, float]:
    """Messages per non-empty Pull and how long Pulls took (worst generator's p50 and p99)."""
    pulls = sum(int(r["pulls"]) for r in results)
    return {
        "msgs_per_pull": round(sum(int(r["count"]) for r in results) / max(pulls, 1)),
        "pull_p50_ms": round(max(float(r["pull_p50_ms"]) for r in results), 1),
        "pull_p99_ms": round(max(float(r["pull_p99_ms"]) for r in results), 1),
    }


def judge(row: Row, results: list[GenResult], win: WindowStats) -> list[str]:
    """Name every process (or the machine) that was busy enough to be the limit."""
    found = []
    if win.machine_cpu_pct >= SATURATED:
        found.append(
            f"machine CPU ({CORES} cores {win.machine_cpu_pct:.0f}% busy, "
            f"{row.other_cpu_pct:.0f}% of a core by other processes)"
        )
    if row.kind == "gateway" and any(c >= SATURATED for c in win.gw_cpu_pct):
        found.append("gateway process at ~1 core (one Python process)")
    seconds = max(row.seconds, 1e-6)
    if any(100.0 * float(r["cpu_s"]) / seconds >= SATURATED for r in results):
        found.append("generator process at ~1 core")
    if win.kafka_cpu_pct is not None and win.kafka_cpu_pct >= SATURATED:
        found.append(f"Kafka broker CPU {win.kafka_cpu_pct:.0f}%")
    return found or [NOTHING_SATURATED]


def ratio(value: float, base: float) -> float | None:
    return value / base if base > 0 else None


def missing(scenario: str, case: str, status: str) -> Row:
    return Row(scenario=scenario, case=case, kind="gateway", status=status)
