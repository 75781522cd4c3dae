"""Every relative link of the user docs reaches a file that exists, and a `#fragment` a heading
of it (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.doc_examples import ROOT, user_docs

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")


def anchors(path: Path) -> set[str]:
    out: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading:
            out.add(re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-"))
    return out


def test_relative_links_reach_their_files_and_headings() -> None:
    broken = []
    for doc in [*user_docs(), ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "results" / "HISTORY.md"]:
        for link in _LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, fragment = link.partition("#")
            target = (doc.parent / path).resolve() if path else doc
            if not target.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {link} (no such file)")
            elif fragment and target.suffix == ".md" and fragment not in anchors(target):
                broken.append(f"{doc.relative_to(ROOT)}: {link} (no such heading)")
    assert not broken, "\n".join(broken)
