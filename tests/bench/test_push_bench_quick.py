"""The push benchmark in quick mode, on the session's broker: it runs and every case finishes.

It once went unnoticed that it no longer imported. No performance threshold is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_push_bench_quick_delivers_every_message(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "push.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.push_bench",
            "--quick",
            "--out",
            str(out),
            "--kafka-bootstrap",
            kafka_bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    rows = {r["case"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"acks at once", "fails 20%", "bare push client", "bare aiohttp ClientSession"}
    for row in rows.values():
        assert row["finished"] and row["acknowledged"] == row["messages"] == 2000, row
        assert row["msgs_per_s"] > 0, row
    assert rows["acks at once"]["requests_per_message"] == 1.0
    assert len(rows["acks at once"]["rounds_msgs_per_s"]) == 3
    assert 6 <= len(rows["acks at once"]["warm_up_msgs_per_s"]) <= 10
    for case in ("acks at once", "fails 20%"):
        assert rows[case]["gateway_cpu_us_per_msg"] > 0, rows[case]
    for case in ("acks at once", "fails 20%", "bare aiohttp ClientSession"):
        assert rows[case]["x_bare"] == round(
            rows[case]["msgs_per_s"] / rows["bare push client"]["msgs_per_s"], 2
        )
    assert rows["fails 20%"]["requests_per_message"] > 1.0
