"""The results files the docs' figures come from: reading them, naming where each came from, and
the few number formats the rendered text uses (benchmarks/figures.py renders with these)."""

from __future__ import annotations

import functools
import json
import statistics
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parents[1]


@dataclass(frozen=True, slots=True)
class Source:
    """One results file, and what it says (or git says) about when and from what it was run."""

    name: str  # the path under benchmarks/results/, e.g. "latest.json"
    data: dict[str, Any]
    when: str  # "2026-11-28 05:03 UTC", or "committed 2026-11-21" for a file that records no date
    commit: str  # the gateway's commit, or the commit that added the file
    recorded: bool  # whether date and commit are the file's own (else git's, of the file)

    def cite(self) -> str:
        """`benchmarks/results/latest.json` (2026-11-28 05:03 UTC, gateway at `97846fd`)."""
        at = f"gateway at `{self.commit}`" if self.recorded else f"in `{self.commit}`"
        return f"`benchmarks/results/{self.name}` ({self.when}, {at})"

    def scenario(self, name: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.data.get("scenarios", {}).get(name, [])
        return rows

    def row(self, scenario: str, case: str) -> dict[str, Any]:
        """The row of that case (its name's start is enough), measured ("ok")."""
        found = [r for r in self.scenario(scenario) if r["case"].startswith(case) and r["status"] == "ok"]
        if not found:
            raise LookupError(f"{self.name}: no measured row {case!r} in scenario {scenario!r}")
        return found[0]


@functools.cache
def load(name: str) -> Source:
    path = RESULTS / name
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    when, commit = _recorded(data)
    if when and commit:
        return Source(name, data, when, commit, recorded=True)
    day, sha = _committed(path)
    return Source(name, data, f"committed {day}", sha, recorded=False)


def bench_runs(under: str) -> list[Source]:
    """The `python -m benchmarks` results files under a folder of benchmarks/results, oldest first."""
    found = [load(p.relative_to(RESULTS).as_posix()) for p in sorted((RESULTS / under).rglob("*.json"))]
    runs = [s for s in found if "scenarios" in s.data and "machine" in s.data]
    return sorted(runs, key=lambda s: (s.data["machine"]["date"], s.name))


def _recorded(data: dict[str, Any]) -> tuple[str, str]:
    """(date, commit) as the file records them: `python -m benchmarks` files in machine/source,
    benchmarks.schema_validation's at the top level."""
    if "machine" in data and "source" in data:
        stamp = str(data["machine"]["date"])  # 2026-11-28T05:03:22+00:00
        return f"{stamp[:10]} {stamp[11:16]} UTC", str(data["source"]["commit"])
    if "date" in data and "commit" in data:
        return str(data["date"]), str(data["commit"])
    return "", ""


def _committed(path: Path) -> tuple[str, str]:
    """The day and short hash of the last commit that changed the file: for the benchmarks whose
    files record neither (push_bench, spark_bench, spark_cluster_bench, failover, idle)."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%cs %h", "--", str(path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        out = []
    return (out[0], out[1]) if len(out) == 2 else ("date not recorded", "no commit")


def rate(value: float) -> str:
    """A rate as people read it: 3447000 -> 3.4M, 205527 -> 206k, 89306 -> 89.3k, 4700 -> 4,700."""
    if value >= 1_000_000:
        return f"{value / 1e6:.1f}M"
    if value >= 100_000:
        return f"{value / 1000:,.0f}k"
    if value >= 10_000:
        return f"{value / 1000:.1f}k"
    return f"{value:,.0f}"


def us(value: float) -> str:
    """Microseconds of CPU: 10.94 -> 10.9 us, 300.7 -> 301 us."""
    return f"{value:.0f} us" if value >= 100 else f"{value:.1f} us"


def ms(value: float) -> str:
    return f"{value:.1f} ms"


def times(value: float) -> str:
    return f"{value:.2f}x"


def share(value: float) -> str:
    """+0.456 -> +46%."""
    return f"{value * 100:+.0f}%"


def span(values: Iterable[float], fmt: Callable[[float], str] = rate) -> str:
    """The lowest and highest: "74.6k-92.3k", "13.0-15.1 us" (one value alone when they are equal)."""
    ordered = sorted(values)
    low, high = fmt(ordered[0]), fmt(ordered[-1])
    if low == high:
        return low
    unit = low.partition(" ")[2]
    return f"{low.partition(' ')[0]}-{high}" if unit and high.endswith(" " + unit) else f"{low}-{high}"


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def table(head: list[str], rows: Iterable[list[str]], right: Iterable[int] = ()) -> str:
    """A Markdown table; the columns numbered in `right` are right-aligned."""
    aligned = set(right)
    rule = ["---:" if i in aligned else "---" for i in range(len(head))]
    lines = [head, rule, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
