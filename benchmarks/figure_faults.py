"""docs/faults.md: each fault case's verdict, from the files `make test-faults` writes to
benchmarks/results/faults (one per test, tests/faults/conftest.py `Rig.result`)."""

from __future__ import annotations

from typing import Any

from benchmarks.figure_data import RESULTS, Source, load, table

CASES = {  # test -> what the table calls it, in the order docs/faults.md lists them
    "test_a_gateway_cut_off_from_the_broker_loses_nothing": "a gateway cut off from the broker",
    "test_gateways_cut_off_from_each_other_lose_no_ack": "gateways cut off from each other",
    "test_a_client_cut_off_from_its_gateway_mid_stream_loses_nothing": "a client cut off from its gateway",
    "test_sigterm_rolled_through_three_gateways_loses_nothing": "SIGTERM rolled through three gateways",
    "test_kill_9_during_a_seek_loses_nothing": "kill -9 during a Seek",
    "test_kill_9_during_subscription_create_and_delete_leaves_no_half_state": "kill -9 mid-create or delete",
    "test_a_full_disk_refuses_publishes_retriably_and_loses_nothing": "the broker's disk full",
    "test_a_broker_cut_off_from_the_other_two_loses_nothing": "one broker of three cut off from the others",
}
SUBS = ("eo", "ordered", "plain")  # the subscriptions' short names (tests/faults/resources.py)


def _sources() -> list[Source]:
    found = {p.stem: p for p in (RESULTS / "faults").glob("*.json")}
    order = [t for t in CASES if t in found] + sorted(t for t in found if t not in CASES)
    return [load(f"faults/{t}.json") for t in order]


def _total(counts: dict[str, Any]) -> int:
    return sum(v["count"] if isinstance(v, dict) else int(v) for v in counts.values())


def _per_sub(values: dict[str, Any]) -> str:
    return " / ".join(str(values.get(s, "-")) for s in SUBS)


def _verdict_row(name: str, src: Source) -> list[str]:
    v = src.data["verdict"]
    moves = v["key_moves"].get("ordered", {"moves": 0, "within_1s": 0})
    nexts = [r["next_delivery_s"] for r in v["recovery"] if r["next_delivery_s"] is not None]
    return [
        name,
        f"{src.data['cut_seconds']:g} s" if "cut off" in name else "",
        str(v["confirmed"]),
        str(_total(v["lost"])),
        str(_total(v["after_success"])),
        str(v["ack_results"].get("eo", {}).get("SUCCESS_ASSUMED", 0)),
        str(_total(v["out_of_order"])),
        _per_sub(v["duplicates"]),
        f"{moves['moves']} ({moves['within_1s']})",
        f"{max(nexts):.2f} s" if nexts else "",
        f"{max(v['longest_gap_s'].values()):.1f} s",
    ]


def faults() -> str:
    rows, notes, cites = [], [], []
    for src in _sources():
        name = CASES.get(str(src.data["test"]), str(src.data["test"]))
        cites.append(src.cite())
        if "verdict" in src.data:
            rows.append(_verdict_row(name, src))
        if "outcomes" in src.data:
            seen = "; ".join(f"{k}: {n}" for k, n in sorted(src.data["outcomes"].items()))
            notes.append(f"- {name}: {seen}.")
        if "broker_restarted" in src.data:
            d = src.data
            back = "never" if d["writes_back_s"] is None else f"{d['writes_back_s']:g} s"
            died = (d["gateway_died"] or "").split(";", 1)[0]
            notes.append(
                f"- {name}: the broker {'kept running' if d['broker_kept_running'] else 'stopped itself'}"
                f"{' and was restarted' if d['broker_restarted'] else ''}; while full the gateway answered "
                f"{', '.join(d['refused_with']) or 'only OK'}; writes were taken again {back} after the "
                f"space came back; {died or 'the gateway outlived it all'}."
            )
        if "isolated_node" in src.data:
            d = src.data
            role = "the active controller" if d["isolated_was_controller"] else "not the controller"
            fenced = "never" if d["fenced_after_cut_s"] is None else f"{d['fenced_after_cut_s']:g} s"
            notes.append(
                f"- {name}: node {d['isolated_node']} ({role}, leading "
                f"{d['partitions_led_by_isolated']} of the partitions), fenced {fenced} after the cut; "
                f"the longest wait between confirmed publishes "
                f"{d['longest_publish_stall_s']:g} s, from {d['longest_publish_stall_from_cut_s']:g} s after "
                f"the cut ({d['cut_seconds']:g} s long)."
            )
        if "seek_calls" in src.data:
            seen = ", ".join(f"{k.rsplit('-', 1)[-1]}: {v}" for k, v in src.data["seek_calls"].items())
            notes.append(f"- {name}, what the cut-short Seek calls answered: {seen}.")
    if not cites:
        return "No results yet: `make test-faults` writes them."
    head = [
        "case",
        "cut",
        "publishes confirmed",
        "lost",
        "delivered after a confirmed ack",
        "acks only the client library confirmed",
        "keys skipping ahead",
        "duplicates (eo / ordered / plain)",
        "ordered keys moving (within 1 s)",
        "next delivery after the fault",
        "longest gap",
    ]
    out = "`make test-faults`, from " + ", ".join(cites) + ":\n\n"
    out += table(head, rows, right=range(1, 11))
    return out + ("\n\n" + "\n".join(notes) if notes else "")
