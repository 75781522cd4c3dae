"""The goclient scenario's pure parts: the median of rounds, the verdicts on issue 22's targets
(raw-stub publish too), and the profile summary of py-spy's collapsed stacks (the runs themselves need Go and a broker)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import goprofile, report
from benchmarks.results import Row
from benchmarks.scenarios import goclient


def _row(case: str, rate: float, cpu: float, **extra: object) -> Row:
    return Row(
        scenario=goclient.NAME,
        case=case,
        kind="gateway",
        msgs_per_s=rate,
        extra={"gw_cpu_us_per_msg": cpu, "load1": 1.0, **extra},
    )


def test_the_median_round_is_kept_with_every_round_beside_it() -> None:
    rows = [
        _row(goclient.GO_RAISED, r, c, duplicates=0) for r, c in ((50e3, 20.0), (70e3, 12.0), (40e3, 30.0))
    ]
    median = goclient._median(rows)
    assert median.msgs_per_s == 50e3
    assert median.extra["rounds_msgs_per_s"] == [50000, 70000, 40000]
    assert median.extra["median_gw_cpu_us_per_msg"] == 20.0
    assert median.extra["rounds_duplicates"] == [0, 0, 0]


def test_latency_rounds_take_the_median_p99() -> None:
    rows = [_row(goclient.GO_LATENCY, 1000, 0, p99_ms=p, p50_ms=10.0) for p in (30.0, 20.0, 40.0)]
    assert goclient._median(rows).extra["median_p99_ms"] == 30.0


def test_verdicts_need_the_rate_and_no_duplicate() -> None:
    raised = goclient._median([_row(goclient.GO_RAISED, 61e3, 14.0, duplicates=0)])
    default = goclient._median([_row(goclient.GO_DEFAULT, 26e3, 16.0, duplicates=1)])
    found = report._go_targets([raised, default])
    # raised met; default has a duplicate; CPU 16 us > 15; no publish or latency row
    assert [t["met"] for t in found] == [True, False, False, False, False]
    assert found[2]["value"] == {goclient.GO_RAISED: 14.0, goclient.GO_DEFAULT: 16.0}


def test_without_the_scenario_every_go_target_says_so() -> None:
    targets = report._go_targets(None)
    assert len(targets) == 5
    assert all(not t["met"] and "not in this run" in t["note"] for t in targets)


def test_profile_shares_count_self_and_total_per_function(tmp_path: Path) -> None:
    stacks = tmp_path / "raised.txt"
    stacks.write_text(
        "process 1:main;run (a/loop.py:10);settle (core/acks.py:5);decode (translate/ackids.py:9) 3\n"
        "process 1:main;run (a/loop.py:11);settle (core/acks.py:7) 1\n"
    )
    own, total, samples = goprofile._shares(stacks)
    assert samples == 4
    assert own == {"decode (translate/ackids.py)": 75.0, "settle (core/acks.py)": 25.0}
    assert total["settle (core/acks.py)"] == 100.0


def test_the_publish_verdict_reads_the_batch_of_1000_ratio() -> None:
    def publish(case: str, ratio: float, status: str = "ok") -> Row:
        return Row(scenario="publish", case=case, kind="gateway", status=status, ratio=ratio)

    raw = Row(scenario="publish", case="raw producer, 1 process", kind="raw", msgs_per_s=400e3)
    short = [
        raw,
        publish("Publish batch=100, 3 proc x 2 in flight", 0.6),
        publish("Publish batch=1000, 1 proc x 2 in flight", 0.38),
    ]
    verdict = report._publish_target(short)
    assert (verdict["met"], verdict["value"]) == (False, 0.38)  # batch=100's 0.6 does not count
    assert report._publish_target([raw, publish("Publish batch=1000, 2 proc x 2 in flight", 0.5)])["met"]
    failed = report._publish_target(
        [raw, publish("Publish batch=1000, 1 proc x 2 in flight", 0.9, "failed: x")]
    )
    assert failed["value"] is None and not failed["met"]
    missing = report._publish_target(None)
    assert not missing["met"] and "not in this run" in missing["note"]
    assert report.targets({})[0] is not None and report.targets({})[0]["target"].startswith(
        "raw-stub Publish"
    )


def test_message_targets_take_the_attribute_cost_from_the_rows_of_0_and_5() -> None:
    rows = [
        goclient._median([_row(goclient.GO_RAISED, 30e3, 11.0, duplicates=0)]),
        goclient._median([_row(goclient.other_raised(0), 40e3, 9.0, duplicates=0)]),
        goclient._median([_row(goclient.other_raised(5), 20e3, 16.0, duplicates=0)]),
        goclient._median([_row(goclient.other_publish(0), 50e3, 10.0)]),
        goclient._median([_row(goclient.other_publish(5), 40e3, 14.0)]),
        goclient._median([_row(goclient.GO_LATENCY, 1000, 0, p99_ms=19.0, p50_ms=5.0)]),
    ]
    found = report._message_targets(rows)
    assert [t["value"] for t in found[:4]] == [11.0, 1.4, 0.8, 19.0]
    assert [t["met"] for t in found] == [True, False, True, True, False, False]
    assert all("emulator is not run" in t["note"] for t in found[4:])


def test_the_first_message_is_the_median_of_its_rounds() -> None:
    rows = [_row(goclient.GO_FIRST, 1000, 0, first_message_ms=m) for m in (900.0, 3000.0, 1200.0)]
    assert goclient._median(rows).extra["median_first_message_ms"] == 1200.0


def test_other_cases_do_not_share_the_headline_cases_prefix() -> None:
    """The docs' figures find the headline rows by the start of their case name."""
    others = [goclient.other_raised(0), goclient.other_raised(goclient.RAW_FILLED), goclient.other_publish(5)]
    assert not any(o.startswith(("Go Receive, NumGoroutines=4", goclient.GO_PUBLISH)) for o in others)
