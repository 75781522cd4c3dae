"""The code blocks of the user docs, as tests find and run them.

Every fenced block in README.md, docs/*.md and docker/README.md names its language. A ``sh`` or
``python`` block is preceded, on the line just above its fence, by one of two markers:

- ``<!-- example: NAME -->``: a test runs it, finding its text with ``example(doc, NAME)``;
- ``<!-- not-run: REASON -->``: it is not run, and REASON says why.

tests/unit/test_doc_examples.py holds every block to this, and every NAME to a test that asks
for it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNABLE = ("sh", "python")
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(example|not-run):\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    doc: str  # the path from the checkout's root, e.g. "docs/rest.md"
    line: int  # the opening fence's line, from 1
    language: str
    marker: str | None  # "example", "not-run" or None
    value: str  # the example's NAME or the reason not to run it
    text: str


def user_docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docker" / "README.md"]


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    index = 0
    while index < len(lines):
        opened = _FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        indent, language = opened.groups()
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[index + 1 : end]]
        marked = _MARKER.match(lines[index - 1]) if index else None
        out.append(
            Block(
                doc=path.relative_to(ROOT).as_posix(),
                line=index + 1,
                language=language,
                marker=marked.group(1) if marked else None,
                value=marked.group(2) if marked else "",
                text="\n".join(body) + "\n",
            )
        )
        index = end + 1
    return out


def example(doc: str, name: str) -> str:
    """The text of the block marked ``<!-- example: name -->`` in doc (a path from the root)."""
    found = [b for b in blocks(ROOT / doc) if b.marker == "example" and b.value == name]
    assert len(found) == 1, f"{doc} has {len(found)} examples named {name!r}"
    return found[0].text
