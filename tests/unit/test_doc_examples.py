"""Every code block in the user docs is either run by a test or says why it is not.

The rules are in tests/doc_examples.py: each fence names its language, each ``sh`` and
``python`` block is marked ``example: NAME`` or ``not-run: REASON``, and each NAME is asked for
by a test (``example(doc, NAME)`` in a file under tests/), so an example that stops working
fails the build."""

from __future__ import annotations

import re
from collections import Counter

from tests.doc_examples import ROOT, RUNNABLE, blocks, user_docs

_ASKED = re.compile(r"""\bexample\(\s*["']([^"']+)["']\s*,\s*["']([^"']+)["']\s*\)""")
_SHELLS = {"bash", "shell", "console", "zsh", "shell-session"}


def _all_blocks() -> list:  # type: ignore[type-arg]
    return [b for path in user_docs() for b in blocks(path)]


def test_every_fence_names_its_language() -> None:
    bare = [f"{b.doc}:{b.line}" for b in _all_blocks() if not b.language]
    assert not bare, f"fences without a language (```text, ```json, ```sh ...): {bare}"


def test_shell_blocks_are_sh() -> None:
    other = [f"{b.doc}:{b.line} ({b.language})" for b in _all_blocks() if b.language in _SHELLS]
    assert not other, f"shell blocks are ```sh, so that the checks find them: {other}"


def test_every_runnable_block_is_run_or_says_why_not() -> None:
    unmarked = [f"{b.doc}:{b.line}" for b in _all_blocks() if b.language in RUNNABLE and b.marker is None]
    assert not unmarked, (
        "each sh/python block needs `<!-- example: NAME -->` (a test runs it) or "
        f"`<!-- not-run: REASON -->` on the line above its fence: {unmarked}"
    )
    no_reason = [f"{b.doc}:{b.line}" for b in _all_blocks() if b.marker == "not-run" and len(b.value) < 10]
    assert not no_reason, f"not-run needs a reason a reader can act on: {no_reason}"


def test_example_names_are_unique_and_each_is_run_by_a_test() -> None:
    examples = [(b.doc, b.value) for b in _all_blocks() if b.marker == "example"]
    twice = [name for name, n in Counter(name for _, name in examples).items() if n > 1]
    assert not twice, f"example names used twice: {twice}"
    bad = [
        b.value for b in _all_blocks() if b.marker == "example" and not re.fullmatch(r"[a-z0-9-]+", b.value)
    ]
    assert not bad, bad
    asked: set[tuple[str, str]] = set()
    for source in (ROOT / "tests").rglob("*.py"):
        asked |= set(_ASKED.findall(source.read_text(encoding="utf-8")))
    missing = sorted(set(examples) - asked)
    assert not missing, f"examples no test runs (call tests.doc_examples.example(doc, name)): {missing}"
    stale = sorted(asked - set(examples))
    assert not stale, f"tests ask for examples the docs no longer have: {stale}"


def test_no_indented_code_blocks() -> None:
    """Markdown's indented code blocks escape the checks above: the docs fence every block."""
    found = []
    for path in user_docs():
        lines = path.read_text(encoding="utf-8").splitlines()
        fenced = False
        for index, line in enumerate(lines):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            starts_block = index > 0 and not lines[index - 1].strip()
            listed = re.match(r"\s*([-*+]|\d+\.)\s", line)
            if not fenced and starts_block and line.startswith("    ") and line.strip() and not listed:
                found.append(f"{path.relative_to(ROOT)}:{index + 1}")
    assert not found, f"indented code blocks (fence them, with a language): {found}"
