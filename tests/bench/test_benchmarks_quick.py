"""The benchmark harness in quick mode, on the session's broker: every scenario produces figures.

Only that the harness works is asserted (every scenario ran; rates, ratios and the scenario's own
figures are present and positive). No performance threshold is: the machine running the suite
is not a benchmark machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCENARIOS = {"publish", "deliver", "latency", "backlog", "scaleout"}
NOT_IMPLEMENTED = "not implemented"
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def quick(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--out",
            str(out),
            "--kafka-bootstrap",
            kafka_bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@pytest.mark.timeout(420)
def test_every_scenario_has_raw_and_gateway_figures(quick: dict[str, Any]) -> None:
    assert quick["mode"] == "quick"
    assert quick["errors"] == {}
    assert set(quick["scenarios"]) >= SCENARIOS
    for name in SCENARIOS:
        measured = [r for r in quick["scenarios"][name] if r["status"] == "ok"]
        assert any(r["kind"] == "raw" for r in measured), name
        assert any(r["kind"] == "gateway" for r in measured), name
    for rows in quick["scenarios"].values():
        for row in rows:
            if row["status"] != "ok":
                assert row["status"].startswith(NOT_IMPLEMENTED), row
                continue
            assert row["messages"] > 0 and row["msgs_per_s"] > 0 and row["mb_per_s"] > 0, row
            if row["kind"] == "gateway":
                assert row["ratio"] is not None and row["ratio"] > 0, row
                assert row["gw_rss_mb"] > 0 and row["gw_cpu_pct"] >= 0, row


@pytest.mark.timeout(420)
def test_machine_and_targets_are_described(quick: dict[str, Any]) -> None:
    machine = quick["machine"]
    assert machine["cores"] >= 1 and machine["memory_gib"] > 0
    for key in ("cpu_model", "python", "kafka", "confluent_kafka", "grpcio", "date"):
        assert machine[key], key
    # Six of the benchmark's own, five of the Go client's, six on messages with attributes.
    assert len(quick["targets"]) == 17
    for target in quick["targets"]:
        assert isinstance(target["met"], bool) and target["target"], target
    go = quick["targets"][6:]  # the goclient scenario's: --quick runs no Go
    assert all(t["value"] is None and not t["met"] and t["note"] for t in go)


@pytest.mark.timeout(420)
def test_publish_is_measured_against_raw_kafka_in_its_own_pattern(quick: dict[str, Any]) -> None:
    rows = {r["case"]: r for r in quick["scenarios"]["publish"]}
    pattern = next(r for case, r in rows.items() if case.startswith("raw runs of 1000,"))
    assert pattern["kind"] == "raw" and pattern["messages"] >= 1000 and pattern["ratio"] > 0
    assert "errors" not in pattern["extra"]  # every record confirmed
    gateway = next(r for case, r in rows.items() if case.startswith("Publish batch=1000,"))
    share = gateway["extra"]["vs_raw_same_pattern"]
    assert share == pytest.approx(gateway["msgs_per_s"] / pattern["msgs_per_s"], abs=1e-3)
    drops = quick["page_cache_emptied_before_runs"]  # each publish run asks; only root may
    assert drops["done"] + drops["refused"] >= len(rows)
    verdict = next(t for t in quick["targets"] if t["target"].startswith("raw-stub Publish"))
    assert verdict["value"] == pytest.approx(gateway["ratio"], abs=1e-3)
    assert verdict["met"] == (verdict["value"] >= 0.5)


@pytest.mark.timeout(420)
def test_latency_rows_have_percentiles(quick: dict[str, Any]) -> None:
    rows = quick["scenarios"]["latency"]
    assert {r["kind"] for r in rows} == {"raw", "gateway"}
    assert any(r["case"].startswith("Publish -> StreamingPull") for r in rows)
    for row in rows:
        extra = row["extra"]
        assert 0 < extra["p50_ms"] <= extra["p99_ms"] <= extra["max_ms"], row


@pytest.mark.timeout(420)
def test_backlog_rows_have_memory_and_lease_log_figures(quick: dict[str, Any]) -> None:
    rows = [r for r in quick["scenarios"]["backlog"] if r["kind"] == "gateway"]
    assert [r["extra"]["backlog"] for r in rows] == [10**3, 10**4]
    for row in rows:
        extra = row["extra"]
        assert extra["rss_before_mb"] > 0 and extra["rss_after_mb"] > 0, row
        assert extra["partitions"] > 0 and extra["records"] > 0 and extra["live_keys"] >= 0, row
        # The gateway's CPU is read from /proc in ticks of 10 ms; the 1,000-message pull takes
        # ~10 ms of wall time and ~15 ms of CPU, so it may read 0 ticks. 10,000 cannot.
        cpu = extra["gw_cpu_us_per_msg"]
        assert cpu > 0 if extra["backlog"] >= 10**4 else cpu >= 0, row
