"""python -m benchmarks.figures [--check]: the benchmark figures the docs quote, rendered from the
results files in benchmarks/results.

A doc quotes a benchmark figure only inside a generated block, two marker lines of their own:

    <!-- figures: NAME -->
    (what the renderer NAME returns)
    <!-- /figures -->

NAME picks a renderer (RENDERERS below). Each reads named results files and returns Markdown, a
table or a few sentences, that names its files with their date and commit. Without --check every
block of every doc is rewritten; with --check nothing is written, each stale block is named, and
the exit status is 1. tests/unit/test_doc_figures.py runs the check."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import figure_faults as faults
from benchmarks import figure_summary as summary
from benchmarks import figure_tables as tables
from benchmarks.figure_data import ROOT
from benchmarks.figure_summary import LATEST

RENDERERS: dict[str, Callable[[], str]] = {
    "machine": tables.machine,
    "targets": tables.targets,
    **{
        f"latest-{name}": tables.scenario(name)
        for name in ("publish", "deliver", "latency", "backlog", "scaleout", "policies")
    },
    "goclient": tables.goclient(LATEST),
    "goclient-messages": tables.goclient(summary.MESSAGES),
    "goclient-runs": tables.goclient_runs("goclient-final", with_latest=True),
    "run-ahead": tables.goclient_runs("run-ahead", with_latest=False),
    "push": tables.push,
    "schema-validation": tables.schema_validation,
    "spark-local": tables.spark_local,
    "spark-local-costs": tables.spark_local_costs,
    "spark-cluster": tables.spark_cluster,
    "spark-cluster-setup": tables.spark_cluster_setup,
    "spark-cluster-costs": tables.spark_cluster_costs,
    "failover": tables.failover,
    "failover-fast-fence": tables.failover_fast_fence,
    "workers": tables.workers,
    "one-port": tables.one_port,
    "idle": tables.idle,
    "faults": faults.faults,
    "containers": tables.containers,
    "attributes": tables.attributes,
    "soak": tables.soak,
    "source-ab-lease-log": tables.source_ab("lease_log_owner"),
    "source-ab-attributes": tables.source_ab("attributes_encoded"),
    "readme-performance": summary.readme_performance,
    "readme-sizing": summary.readme_sizing,
    "log": summary.log,
}

OPEN = re.compile(r"^<!-- figures: (\S+) -->$")
CLOSE = "<!-- /figures -->"


class FiguresError(ValueError):
    """A doc's markers are wrong: an unknown renderer, a block not closed, a close without an open."""


@dataclass(frozen=True, slots=True)
class Block:
    doc: str  # the path from the checkout's root
    line: int  # the opening marker's line, from 1
    name: str
    start: int  # index of the first line inside the block
    end: int  # index of the closing marker's line

    def where(self) -> str:
        return f"{self.doc}:{self.line} ({self.name})"


def docs() -> list[Path]:
    """Every file whose generated blocks the command keeps: the user docs and the results' history."""
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "docker" / "README.md",
        ROOT / "benchmarks" / "results" / "HISTORY.md",
    ]


def blocks(lines: list[str], doc: str) -> list[Block]:
    found: list[Block] = []
    opened: tuple[int, str] | None = None
    for index, line in enumerate(lines):
        start = OPEN.match(line.strip())
        if start:
            if opened is not None:
                raise FiguresError(
                    f"{doc}:{index + 1}: a block opens inside the block of line {opened[0] + 1}"
                )
            opened = (index, start.group(1))
        elif line.strip() == CLOSE:
            if opened is None:
                raise FiguresError(f"{doc}:{index + 1}: {CLOSE} closes no block")
            line_no, name = opened
            if name not in RENDERERS:
                raise FiguresError(
                    f"{doc}:{line_no + 1}: no renderer named {name!r} in benchmarks/figures.py"
                )
            found.append(Block(doc, line_no + 1, name, line_no + 1, index))
            opened = None
    if opened is not None:
        raise FiguresError(f"{doc}:{opened[0] + 1}: the block {opened[1]!r} is not closed by {CLOSE}")
    return found


def rewrite(text: str, doc: str) -> tuple[str, list[Block]]:
    """The text with every block rendered afresh, and the blocks whose text that changed."""
    lines = text.split("\n")
    found = blocks(lines, doc)
    stale = []
    for block in reversed(found):  # from the end, so that the earlier blocks' indices hold
        fresh = RENDERERS[block.name]().strip("\n").split("\n")
        if lines[block.start : block.end] != fresh:
            stale.append(block)
            lines[block.start : block.end] = fresh
    return "\n".join(lines), sorted(stale, key=lambda b: b.line)


def run(paths: list[Path], write: bool) -> list[str]:
    """What is wrong or stale, one line each (empty: every block is fresh); written when `write`."""
    problems = []
    for path in paths:
        if not path.exists():
            continue
        doc = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        text = path.read_text(encoding="utf-8")
        try:
            fresh, stale = rewrite(text, doc)
        except FiguresError as exc:
            problems.append(str(exc))
            continue
        problems += [f"{b.where()}: stale" for b in stale]
        if write and fresh != text:
            path.write_text(fresh, encoding="utf-8")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.figures", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--check", action="store_true", help="write nothing; name each stale block, exit 1")
    args = parser.parse_args(argv)
    problems = run(docs(), write=not args.check)
    for problem in problems:
        print(problem if args.check or "stale" not in problem else problem.replace("stale", "rewritten"))
    wrong = [p for p in problems if not p.endswith(": stale")]
    if args.check:
        if problems:
            print("run: python -m benchmarks.figures", file=sys.stderr)
        return 1 if problems else 0
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
