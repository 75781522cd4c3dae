"""The fault suite's history checker (tests/faults/history.py) on histories made by hand: each
defect it exists to find is found, and what the API allows is not called one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.faults import history

SUBS = ["eo", "ordered", "plain"]


class Build:
    def __init__(self) -> None:
        self.t = 0.0
        self.events: list[history.Event] = []

    def add(self, ev: str, **fields: Any) -> Build:
        self.t += 0.1
        self.events.append({"t": self.t, "ev": ev, **fields})
        return self

    def publish(self, key: str, seq: int, ok: bool = True) -> Build:
        if ok:
            return self.add("publish", key=key, seq=seq, ok=f"id-{key}-{seq}")
        return self.add("publish", key=key, seq=seq, error="DeadlineExceeded")

    def deliver(self, sub: str, key: str, seq: int, via: str = "a") -> Build:
        return self.add("deliver", sub=sub, key=key, seq=seq, via=via, attempt=None)

    def ack(self, sub: str, key: str, seq: int, result: str = "sent") -> Build:
        return self.add("ack", sub=sub, key=key, seq=seq, result=result)

    def check(self) -> history.Verdict:
        return history.check(self.events, SUBS, exactly_once=["eo"], ordered=["ordered"])


def _everywhere(b: Build, key: str, seq: int) -> Build:
    for sub in SUBS:
        b.deliver(sub, key, seq).ack(sub, key, seq, "SUCCESS" if sub == "eo" else "sent")
    return b


def test_a_clean_history_passes_and_counts() -> None:
    b = Build()
    for seq in range(3):
        _everywhere(b.publish("k", seq), "k", seq)
    verdict = b.check()
    assert verdict.ok
    assert verdict.confirmed == 3
    assert verdict.delivered == {"eo": 3, "ordered": 3, "plain": 3}
    assert verdict.duplicates == {"eo": 0, "ordered": 0, "plain": 0}


def test_a_confirmed_publish_never_delivered_is_lost() -> None:
    b = _everywhere(Build().publish("k", 0), "k", 0).publish("k", 1)
    b.deliver("eo", "k", 1).ack("eo", "k", 1, "SUCCESS")
    verdict = b.check()
    assert not verdict.ok
    assert verdict.lost == {"eo": [], "ordered": ["k/1"], "plain": ["k/1"]}


def test_a_failed_publish_need_not_arrive() -> None:
    b = _everywhere(Build().publish("", 0), "", 0).publish("", 1, ok=False)
    verdict = b.check()
    assert verdict.ok
    assert verdict.failed_publishes == {"DeadlineExceeded": 1}


def test_a_delivery_after_a_confirmed_exactly_once_ack_is_a_defect() -> None:
    b = _everywhere(Build().publish("", 0), "", 0)
    b.deliver("eo", "", 0)
    verdict = b.check()
    assert not verdict.ok
    assert verdict.after_success["eo"] == ["/0"]


def test_redelivery_after_an_unconfirmed_ack_is_a_duplicate_only() -> None:
    b = _everywhere(Build().publish("", 0), "", 0)
    b.deliver("plain", "", 0)
    b2 = Build().publish("", 0)
    b2.deliver("eo", "", 0).ack("eo", "", 0, "FailedPrecondition").deliver("eo", "", 0)
    b2.ack("eo", "", 0, "SUCCESS")
    for sub in ("ordered", "plain"):
        b2.deliver(sub, "", 0)
    assert b.check().ok
    assert b.check().duplicates["plain"] == 1
    assert b2.check().ok
    assert b2.check().duplicates["eo"] == 1


def test_a_success_only_the_client_library_assumed_does_not_count_as_confirmed() -> None:
    """python-pubsub calls an exactly-once ack a success when its RPC was CANCELLED without
    status details (tests/faults/load.py): a redelivery after it breaks no promise of the
    server's; one after a SUCCESS the server confirmed does."""
    assumed = Build().publish("", 0)
    assumed.deliver("eo", "", 0).ack("eo", "", 0, "SUCCESS_ASSUMED").deliver("eo", "", 0)
    assumed.ack("eo", "", 0, "SUCCESS")
    for sub in ("ordered", "plain"):
        assumed.deliver(sub, "", 0)
    verdict = assumed.check()
    assert verdict.ok, verdict.after_success
    assert verdict.ack_results["eo"] == {"SUCCESS_ASSUMED": 1, "SUCCESS": 1}
    confirmed = Build().publish("", 0)
    confirmed.deliver("eo", "", 0).ack("eo", "", 0, "SUCCESS").deliver("eo", "", 0)
    assert confirmed.check().after_success["eo"] == ["/0"]


def test_skipping_an_unacked_message_of_a_key_is_out_of_order() -> None:
    b = Build()
    for seq in range(3):
        b.publish("k", seq)
    b.deliver("ordered", "k", 0).ack("ordered", "k", 0).deliver("ordered", "k", 2)
    verdict = b.check()
    assert verdict.out_of_order["ordered"] == ["k/2 after k/0 (skipped k/1)"]


def test_going_back_is_allowed_and_so_is_skipping_what_was_acked() -> None:
    b = Build()
    for seq in range(4):
        b.publish("k", seq)
    b.deliver("ordered", "k", 0).ack("ordered", "k", 0)
    b.deliver("ordered", "k", 1).add("nack", sub="ordered", key="k", seq=1)
    b.deliver("ordered", "k", 2).ack("ordered", "k", 2)
    b.deliver("ordered", "k", 1).ack("ordered", "k", 1)  # the nacked one again: back is fine
    b.deliver("ordered", "k", 3)  # 2 was acked: skipping it is fine
    assert b.check().out_of_order["ordered"] == []


def test_order_is_judged_per_stream_and_moves_are_counted() -> None:
    b = Build()
    for seq in range(3):
        b.publish("k", seq)
    b.deliver("ordered", "k", 0, via="a").deliver("ordered", "k", 0, via="b")
    b.deliver("ordered", "k", 1, via="a").deliver("ordered", "k", 1, via="b")
    b.deliver("ordered", "k", 2, via="b")
    verdict = b.check()
    assert verdict.out_of_order["ordered"] == []
    assert verdict.key_moves["ordered"] == {"moves": 3, "within_1s": 3}


def test_unordered_subscriptions_are_not_judged_for_order() -> None:
    b = Build()
    for seq in range(3):
        b.publish("k", seq)
    b.deliver("plain", "k", 2).deliver("plain", "k", 0)
    assert b.check().out_of_order["plain"] == []


def test_recovery_is_the_time_to_the_next_delivery_after_a_fault() -> None:
    b = Build().publish("", 0).add("fault", what="cut", phase="start").add("fault", what="cut", phase="end")
    b.deliver("plain", "", 0)
    verdict = history.check(b.events, ["plain"])
    assert [(r.fault, r.sub, r.next_delivery_s) for r in verdict.recovery] == [("cut", "plain", 0.1)]


def test_the_recorder_writes_lines_that_read_back_in_time_order(tmp_path: Path) -> None:
    first, second = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    r1, r2 = history.Recorder(first), history.Recorder(second)
    r1("publish", key="", seq=0, ok="1")
    r2("deliver", sub="plain", key="", seq=0, via="a")
    r1("fault", what="cut", phase="end")
    r1.close()
    r2.close()
    with first.open("a") as f:
        f.write('{"t": 1, "ev": "publ')  # a line cut short by a kill
    events = history.read(first, second)
    assert [e["ev"] for e in events] == ["publish", "deliver", "fault"]
