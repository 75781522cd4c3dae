"""benchmarks/schema_validation.py in its quick mode: it runs, validates what it measures, and
writes its figures (the full run is by hand; its results are in benchmarks/results)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import schema_validation


def test_the_quick_run_writes_a_figure_per_case(tmp_path: Path) -> None:
    out = tmp_path / "schema-validation.json"
    schema_validation.main(["--quick", "--out", str(out)])
    result = json.loads(out.read_text())
    assert [case["case"] for case in result["cases"]] == [
        "avro binary",
        "avro json",
        "protobuf binary",
        "protobuf json",
        "avro binary, the publish scenario's record",
        "avro json, the publish scenario's record",
        "protobuf binary, the publish scenario's record",
        "protobuf json, the publish scenario's record",
    ]
    assert all(
        case["validate_msgs_per_s"] > 0 and case["mean_message_bytes"] > 500 for case in result["cases"]
    )
    assert result["messages_per_run"] == 500
    assert set(result["compile_ms"]) == {"avro", "protobuf (protoc subprocess)", "cache hit"}
