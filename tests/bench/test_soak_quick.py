"""The soak (benchmarks/soak.py) for two minutes at a small rate, on a broker of its own: it
samples, judges every metric and loses nothing. Whether a metric grows is not asserted here:
two minutes say nothing about an hour, and the machine running the suite is not quiet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKED = {"rss_mb", "fds", "threads", "lease_log_segment_bytes", "lease_log_topics", "p99_ms"}

pytestmark = pytest.mark.integration


@pytest.mark.timeout(480)
def test_soak_quick_samples_judges_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", "--minutes", "2", "--rate", "20", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=460,
        check=False,
        cwd=REPO,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-6000:]
    result = json.loads(out.read_text())
    assert result["settings"]["rate_msg_s"] == 20 and result["commit"] and result["date"]
    samples = result["samples"]
    assert 10 <= len(samples) <= 13, len(samples)
    for sample in samples:
        assert sample["alive"] and sample["rss_mb"] > 0 and sample["fds"] > 0 and sample["threads"] > 0
        assert sample["lease_log_topics"] >= 2, sample
    assert samples[-1]["lease_log_end_offsets"] > 0 and samples[-1]["lease_log_segment_bytes"] > 0
    assert any(s["p99_ms"] is not None for s in samples)
    verdict = result["verdict"]
    assert set(verdict) >= CHECKED
    for metric in CHECKED:
        assert {"first_third_median", "last_third_median", "slope_per_minute_second_half"} <= set(
            verdict[metric]
        ), verdict[metric]
    assert verdict["lease_log_end_offsets"]["growth_per_minute"] > 0
    history = result["history"]
    assert history["confirmed_publishes"] > 1000
    assert history["lost_confirmed_publishes"] == 0, history
    assert history["exactly_once"]["deliveries_after_confirmed_ack"] == 0, history
    for sub in ("plain", "exactly_once"):
        assert history[sub]["nacks"] > 0 and history[sub]["held_past_deadline"] > 0, history[sub]
    assert result["churn"] and all(row["error"] is None for row in result["churn"]), result["churn"]
    # The exit status follows the checks, whatever they found.
    assert proc.returncode == (0 if result["ok"] else 1), proc.stdout[-3000:]
