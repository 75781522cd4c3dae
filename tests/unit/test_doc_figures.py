"""Every figure in the docs comes from a results file.

The docs quote benchmark figures only inside generated blocks (``<!-- figures: NAME -->`` ...
``<!-- /figures -->``), which benchmarks/figures.py renders from benchmarks/results. This fails
when a block is stale, names a renderer that does not exist, or when a doc quotes a figure outside
a block (a rate in msg/s or rows/s, microseconds of CPU, a p99 in ms: a heuristic, with the few
numbers that are not measurements listed in ALLOWED)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import figures
from benchmarks.figure_data import ROOT

QUOTED = re.compile(
    r"\d[\d,.]*\s?[kKM]?\s?(?:msg/s|rows/s)"  # a rate
    r"|\d\s?us\b"  # microseconds (of CPU, in these docs)
    r"|\bp99\b[^|\n]{0,25}?\d\s?ms\b|\d\s?ms p99"  # a tail latency
)
_GO_BOUND = (
    "arithmetic from the Go client's settings (1,000 outstanding, acks every 100 ms), not a measurement"
)
ALLOWED = [  # (doc, text on the line, why it is not a benchmark figure)
    ("docs/delivery.md", "about 10k msg/s", _GO_BOUND),
    ("docs/delivery.md", "more than ~10k msg/s a stream", _GO_BOUND),
    ("docs/configuration.md", "at most ~10k msg/s", _GO_BOUND),
    ("docs/kafka.md", "200 msg/s", "the failover benchmark's offered rate: a setting, not a result"),
]
# README.md is being rewritten to quote the readme-performance and readme-sizing blocks. Until it
# has a generated block it is not held to the rule; from its first block on it is, as every doc.
NOT_YET = {"README.md"}


def user_docs() -> list[Path]:
    return [p for p in figures.docs() if p.exists() and p.parent.name != "results"]


def _outside_blocks(path: Path) -> list[tuple[int, str]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    inside: set[int] = set()
    for block in figures.blocks(lines, path.name):
        inside.update(range(block.start - 1, block.end + 1))
    return [(i + 1, line) for i, line in enumerate(lines) if i not in inside]


def _quotes() -> list[tuple[str, int, str]]:
    """(doc, line, text) of every figure quoted outside a generated block."""
    found = []
    for path in user_docs():
        doc = path.relative_to(ROOT).as_posix()
        if doc in NOT_YET and "<!-- figures:" not in path.read_text(encoding="utf-8"):
            continue
        for number, line in _outside_blocks(path):
            found += [(doc, number, line)] if QUOTED.search(line) else []
    return found


def _allowed(doc: str, line: str) -> bool:
    return any(doc == d and text in line for d, text, _ in ALLOWED)


def test_every_generated_block_is_fresh() -> None:
    problems = figures.run(figures.docs(), write=False)
    assert not problems, "stale or broken figure blocks (run: python -m benchmarks.figures):\n" + "\n".join(
        problems
    )


def test_a_stale_block_is_named_then_rewritten(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("# A page\n<!-- figures: push -->\nan old figure\n<!-- /figures -->\n", encoding="utf-8")
    assert figures.run([doc], write=False) == [f"{doc}:2 (push): stale"]
    assert "an old figure" in doc.read_text(encoding="utf-8")
    figures.run([doc], write=True)
    text = doc.read_text(encoding="utf-8")
    assert "an old figure" not in text and "`benchmarks/results/push.json`" in text
    assert text.startswith("# A page\n<!-- figures: push -->\n") and text.endswith("\n<!-- /figures -->\n")
    assert figures.run([doc], write=False) == []


def test_the_check_command_passes_on_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    assert figures.main(["--check"]) == 0, capsys.readouterr().out


def test_the_check_command_exits_1_naming_each_stale_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- figures: push -->\nold\n<!-- /figures -->\n<!-- figures: idle -->\n<!-- /figures -->\n"
    )
    monkeypatch.setattr(figures, "docs", lambda: [doc])
    assert figures.main(["--check"]) == 1
    assert capsys.readouterr().out.splitlines() == [f"{doc}:1 (push): stale", f"{doc}:4 (idle): stale"]
    assert figures.main([]) == 0
    assert figures.main(["--check"]) == 0


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- figures: no-such-renderer -->\n<!-- /figures -->\n", "no renderer named 'no-such-renderer'"),
        ("<!-- figures: push -->\nnever closed\n", "is not closed"),
        ("text\n<!-- /figures -->\n", "closes no block"),
        ("<!-- figures: push -->\n<!-- figures: push -->\n<!-- /figures -->\n", "opens inside"),
    ],
)
def test_a_wrong_block_is_an_error(text: str, error: str) -> None:
    with pytest.raises(figures.FiguresError, match=error):
        figures.rewrite(text, "doc.md")


@pytest.mark.parametrize("name", sorted(figures.RENDERERS))
def test_every_renderer_names_its_source_with_date_and_commit(name: str) -> None:
    text = figures.RENDERERS[name]()
    assert "benchmarks/results/" in text, name
    assert re.search(r"\d{4}-\d\d-\d\d", text), f"{name} names no date"
    assert re.search(r"`[0-9a-f]{7,}`", text), f"{name} names no commit"
    assert "{" not in text and "}" not in text, f"{name} left a placeholder unfilled"


def test_no_doc_quotes_a_benchmark_figure_outside_a_generated_block() -> None:
    quoted = [f"{doc}:{n}: {line.strip()}" for doc, n, line in _quotes() if not _allowed(doc, line)]
    assert not quoted, (
        "a benchmark figure outside a generated block: render it (benchmarks/figures.py, "
        "<!-- figures: NAME -->) or say it without the number and link docs/benchmarks.md:\n"
        + "\n".join(quoted)
    )


def test_every_allowed_number_is_still_in_its_doc() -> None:
    texts = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in user_docs()}
    unused = [(doc, text) for doc, text, _ in ALLOWED if text not in texts.get(doc, "")]
    assert not unused, f"ALLOWED lists text its doc no longer has: {unused}"
