"""What the clients saw during a fault, and a checker over it.

A history is a list of events, each a JSON object on a line of its own (the load driver writes
them as they happen, so a driver that dies still leaves what it saw):

- `publish`: a publish the client finished: `ok` (the server's message id) or `error` (the
  exception's class name). `key` is the ordering key ("" for none) and `seq` the message's
  place among its key's publishes, both also in the message's attributes.
- `deliver`: a message a subscriber's callback got: `sub`, `key`, `seq`, `attempt` (the
  delivery attempt, when the subscription counts them) and `via` (the gateway it came through).
- `ack`: the ack of a delivery: `result` is "SUCCESS" for an exactly-once ack the server
  confirmed, "SUCCESS_ASSUMED" for one the client library called a success although its RPC
  failed (tests/faults/load.py), "sent" for an ack without confirmation, else the error's name.
  `nack` likewise.
- `fault`: what the test did and when (`what`, `phase`: "start" or "end").

Every event has `t`, CLOCK_MONOTONIC seconds: one clock for every process on the machine.

The checker's verdict:
- **lost**: confirmed publishes (ok) that a subscription never delivered.
- **after_success**: on an exactly-once subscription, deliveries of a message after an ack of it
  the server confirmed.
- **out_of_order**: on an ordered subscription, a delivery of a key's message when an earlier
  message of that key, published and confirmed, had been neither delivered since the key's
  last delivery on that stream nor acked. A redelivery that goes back (after a nack, a
  deadline or a lost lease) is allowed; skipping ahead over an unacked message is not. Order
  is judged per stream (a subscriber client through one gateway), as each client sees it.
- **key_moves**: on an ordered subscription, how often a key's next delivery came on another
  stream than its last one (a partition moving between processes), and of those, how often
  the other stream had delivered the key less than a second before: moments when two clients
  may hold messages of one key at once (acks without confirmation cannot rule that out).
- **duplicates**: deliveries of a message after its first, per subscription (at-least-once
  allows them; the figure is reported).
- **recovery**: per fault and subscription, seconds from the fault's end to the next delivery,
  and the longest gap between deliveries while publishing went on.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

Event = dict[str, Any]


class Recorder:
    """Appends events to a JSON-lines file, flushed as they come (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] = path.open("a", buffering=1)
        self._lock = threading.Lock()

    def __call__(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"t": time.monotonic(), "ev": ev, **fields}, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read(*paths: Path) -> list[Event]:
    """The events of several files in time order. A line cut short by a kill is left out."""
    events: list[Event] = []
    for path in paths:
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    events.sort(key=lambda e: float(e["t"]))
    return events


@dataclass
class Recovery:
    fault: str
    sub: str
    next_delivery_s: float | None  # after the fault ended; None: none came


@dataclass
class Verdict:
    confirmed: int
    failed_publishes: dict[str, int]
    delivered: dict[str, int]
    lost: dict[str, list[str]]
    after_success: dict[str, list[str]]
    out_of_order: dict[str, list[str]]
    duplicates: dict[str, int]
    key_moves: dict[str, dict[str, int]]
    ack_results: dict[str, dict[str, int]]
    longest_gap_s: dict[str, float]
    recovery: list[Recovery] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            not any(self.lost.values())
            and not any(self.after_success.values())
            and not any(self.out_of_order.values())
        )

    def summary(self) -> dict[str, Any]:
        """The figures, with at most a few examples of each defect, subscriptions by the last
        part of their names."""
        out = asdict(self)
        for name in ("lost", "after_success", "out_of_order"):
            out[name] = {sub: {"count": len(v), "first": v[:5]} for sub, v in getattr(self, name).items()}
        for name, value in out.items():
            if isinstance(value, dict):
                out[name] = {_short(k): v for k, v in value.items()}
        for r in out["recovery"]:
            r["sub"] = _short(r["sub"])
        return out


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1].rsplit("-", 1)[-1]


def _mid(e: Mapping[str, Any]) -> str:
    return f"{e['key']}/{e['seq']}"


def check(
    events: Iterable[Event],
    subscriptions: Iterable[str],
    exactly_once: Iterable[str] = (),
    ordered: Iterable[str] = (),
) -> Verdict:
    """The verdict over a history (see the module's docstring)."""
    events = sorted(events, key=lambda e: float(e["t"]))
    subs = list(subscriptions)
    eo, ordered_subs = set(exactly_once), set(ordered)
    confirmed: dict[str, float] = {}  # message -> when its publish was confirmed
    failed: dict[str, int] = defaultdict(int)
    for e in events:
        if e["ev"] == "publish":
            if e.get("ok"):
                confirmed[_mid(e)] = float(e["t"])
            else:
                failed[str(e.get("error"))] += 1

    seen: dict[str, set[str]] = {s: set() for s in subs}
    delivered = dict.fromkeys(subs, 0)
    duplicates = dict.fromkeys(subs, 0)
    success: dict[str, set[str]] = {s: set() for s in subs}
    after_success: dict[str, list[str]] = {s: [] for s in subs}
    acked: dict[str, set[str]] = {s: set() for s in subs}
    ack_results: dict[str, dict[str, int]] = {s: defaultdict(int) for s in subs}
    out_of_order: dict[str, list[str]] = {s: [] for s in subs}
    # Per ordered subscription and key: the seqs delivered since the key's last delivery
    # started over, i.e. the run of the key the subscriber is in now.
    last_seq: dict[tuple[str, str, str], int] = {}
    last_stream: dict[tuple[str, str], tuple[str, float]] = {}  # (sub, key) -> (via, when)
    key_moves = {s: {"moves": 0, "within_1s": 0} for s in subs}
    last_delivery: dict[str, float] = {}
    longest_gap = dict.fromkeys(subs, 0.0)
    publishing_until = max((float(e["t"]) for e in events if e["ev"] == "publish"), default=0.0)
    fault_ends = [e for e in events if e["ev"] == "fault" and e.get("phase") == "end"]
    next_after: dict[tuple[int, str], float] = {}

    for e in events:
        sub = e.get("sub")
        if sub not in seen:
            continue
        t = float(e["t"])
        mid = _mid(e)
        if e["ev"] == "deliver":
            delivered[sub] += 1
            if mid in seen[sub]:
                duplicates[sub] += 1
            seen[sub].add(mid)
            if sub in eo and mid in success[sub]:
                after_success[sub].append(mid)
            if sub in ordered_subs and e["key"]:
                _check_order(sub, e, last_seq, confirmed, acked[sub], out_of_order[sub])
                via, before = last_stream.get((sub, e["key"]), (e["via"], t))
                if via != e["via"]:
                    key_moves[sub]["moves"] += 1
                    key_moves[sub]["within_1s"] += t - before < 1.0
                last_stream[(sub, e["key"])] = (e["via"], t)
            previous = last_delivery.get(sub)
            if previous is not None and t <= publishing_until:
                longest_gap[sub] = max(longest_gap[sub], t - previous)
            last_delivery[sub] = t
            for i, fe in enumerate(fault_ends):
                if t >= float(fe["t"]) and (i, sub) not in next_after:
                    next_after[(i, sub)] = t - float(fe["t"])
        elif e["ev"] == "ack":
            result = str(e.get("result"))
            ack_results[sub][result] += 1
            if result in ("SUCCESS", "SUCCESS_ASSUMED", "sent"):
                acked[sub].add(mid)
            if result == "SUCCESS":
                success[sub].add(mid)

    lost = {s: sorted(m for m in confirmed if m not in seen[s]) for s in subs}
    recovery = [
        Recovery(str(fe.get("what")), s, _round(next_after.get((i, s))))
        for i, fe in enumerate(fault_ends)
        for s in subs
    ]
    return Verdict(
        confirmed=len(confirmed),
        failed_publishes=dict(failed),
        delivered=delivered,
        lost=lost,
        after_success=after_success,
        out_of_order=out_of_order,
        duplicates=duplicates,
        key_moves=key_moves,
        ack_results={s: dict(r) for s, r in ack_results.items()},
        longest_gap_s={s: round(g, 2) for s, g in longest_gap.items()},
        recovery=recovery,
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _check_order(
    sub: str,
    e: Mapping[str, Any],
    last_seq: dict[tuple[str, str, str], int],
    confirmed: Mapping[str, float],
    acked: set[str],
    violations: list[str],
) -> None:
    key, seq = str(e["key"]), int(e["seq"])
    stream = (sub, str(e.get("via", "")), key)
    previous = last_seq.get(stream)
    last_seq[stream] = seq
    start = 0 if previous is None else previous + 1
    if seq <= start:  # the next one, or a redelivery going back
        return
    skipped = [
        f"{key}/{s}" for s in range(start, seq) if f"{key}/{s}" in confirmed and f"{key}/{s}" not in acked
    ]
    if skipped:
        violations.append(f"{key}/{seq} after {key}/{previous} (skipped {', '.join(skipped[:3])})")
