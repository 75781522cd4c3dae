"""python -m benchmarks.render [FILE]: a results JSON as the Markdown tables of docs/benchmarks.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).parent / "results" / "latest.json"
_SKIP = {"sent", "gw_cpu_pct_each"}


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _extra(row: dict[str, Any]) -> str:
    items = [f"{k}={_short(v)}" for k, v in row["extra"].items() if k not in _SKIP]
    return ", ".join(items)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def _line(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"| {row['case']} | {row['status']} | | | | | | |"
    cells = [
        row["case"],
        f"{row['msgs_per_s']:,.0f}",
        f"{row['mb_per_s']:.1f}",
        _num(row["ratio"], ".2f"),
        _num(row["gw_cpu_pct"], ".0f"),
        f"{row['machine_cpu_pct']:.0f} / {row['other_cpu_pct']:.0f}",
        _extra(row),
        "; ".join(row["limits"]),
    ]
    return "| " + " | ".join(cells) + " |"


HEAD = (
    "| case | msg/s | MB/s | x raw | gateway CPU % | machine % / others' % of a core | figures | "
    "limit |\n|---|---:|---:|---:|---:|---:|---|---|"
)


def scenario_table(rows: list[dict[str, Any]]) -> str:
    """One scenario's rows as a Markdown table (benchmarks/figures.py renders the docs' with it)."""
    return "\n".join([HEAD, *(_line(r) for r in rows)])


def markdown(data: dict[str, Any]) -> str:
    parts = []
    for name, rows in data["scenarios"].items():
        parts += [f"### {name}", "", scenario_table(rows), ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else DEFAULT
    print(markdown(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
