"""The committed generated code must equal a fresh ``python -m gateway.protogen`` run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import protogen

pytest.importorskip("grpc_tools")


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    written = protogen.generate(tmp_path)
    assert written, "protogen wrote nothing"
    fresh = _tree(tmp_path / "google")
    committed = _tree(protogen.DEFAULT_OUT / "google")
    stale = sorted(k for k in fresh.keys() | committed.keys() if fresh.get(k) != committed.get(k))
    assert not stale, f"generated code is stale ({', '.join(stale)}); run `python -m gateway.protogen`"
