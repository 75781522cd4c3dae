"""goclient: the official Go client (`cloud.google.com/go/pubsub/v2`, benchmarks/gen/go) against
the gateway, beside raw Kafka and the raw-stub StreamingPull in the same run, in alternating
rounds (issue 22):

Messages are as applications publish them: 1 KiB, with ATTRIBUTES (2) attributes, published
through the Go client's Publish. Rows of their own have 0 and 5 attributes, and a receive row
reads records written by raw Kafka producers (no headers): a lower bound, labelled so.

- publish: `Publisher.Publish` with the default batching (10 ms / 100 messages) vs the raw
  producer, for `publish_seconds` each; with 2 attributes, and 0 and 5 in rows of their own;
- receive: a backlog of 100,000 messages per round published by the Go client, read by a raw
  consumer, by `Subscriber.Receive` with the default settings (1 stream, 1,000 outstanding) and
  with raised ones (NumGoroutines=4, MaxOutstandingMessages=5000), and by 4 raw StreamingPull
  streams; the gateway cases in a rotated order each round; duplicates counted; the raised case
  also on backlogs of 0 and 5 attributes and on a raw-filled one;
- first message: a subscription nobody has pulled from (its runner not started), Receive with
  the default settings: seconds from the Receive call to the first message;
- latency: publish-to-receive through one Go client at 1,000 msg/s vs raw producer -> consumer
  (each message carries one attribute, its send time).

Each case yields the round with the median rate (median p99 for latency), with every round's
figures and the 1-minute load average at each measurement beside it."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from typing import Any

from benchmarks.config import Mode
from benchmarks.gen import goclient, latency, publish, subscribe
from benchmarks.harness import Bench, GenResult, Task
from benchmarks.results import Row, build, ratio
from benchmarks.sampling import Samples
from benchmarks.scenarios.common import api_for, fill, kafka_topic
from benchmarks.scenarios.latency import pair_row

NAME = "goclient"
ATTRIBUTES = 2  # the headline's messages; OTHER_ATTRIBUTES in rows of their own
OTHER_ATTRIBUTES = (0, 5)
RAISED = {"goroutines": 4, "max_outstanding": 5000}
STREAMS = 4
LATENCY_RATE = 1000
PUBLISH_OUTSTANDING = 5000
GO_LEAD_S = 1.5  # the Go program connects before the start instant
RAW_CASE = "raw consumer (commit per batch), 1 proc"
GO_PUBLISH = "Go Publish, default batching"
GO_DEFAULT = "Go Receive, default settings"
GO_RAISED = "Go Receive, NumGoroutines=4, MaxOutstanding=5000"
STREAM_CASE = f"raw-stub StreamingPull+ack on stream, {STREAMS} streams"
GO_LATENCY = f"Go Publish -> Receive @ {LATENCY_RATE}/s"
GO_FIRST = "Go Receive, first message on a subscription not started (default settings)"
RAW_FILLED = "raw-filled records, a lower bound"


def other_publish(attributes: int) -> str:
    return f"Go Publish ({attributes} attributes), default batching"


def other_raised(backlog: int | str) -> str:
    """The raised receive case on another backlog: `backlog` attributes, or RAW_FILLED."""
    what = f"{backlog} attributes" if isinstance(backlog, int) else backlog
    return f"Go Receive ({what}), NumGoroutines=4, MaxOutstanding=5000"


def _sizes(mode: Mode) -> tuple[int, int]:
    """(rounds, backlog per round)."""
    return (1, 20_000) if mode.quick else (3, 100_000)


def run(bench: Bench, mode: Mode) -> list[Row]:
    binary = str(goclient.build())
    rounds, _ = _sizes(mode)
    by_case: dict[str, list[Row]] = {}
    for n in range(rounds):
        for row in [
            *_publish(bench, mode, binary, n),
            *_receive(bench, mode, binary, n),
            *_latency(bench, mode, binary, n),
        ]:
            by_case.setdefault(row.case, []).append(row)
    return [_median(rows) for rows in by_case.values()]


def _timed(
    bench: Bench, tasks: list[Task], lead: float = GO_LEAD_S
) -> tuple[list[GenResult], Samples, float]:
    load = os.getloadavg()[0]
    results, win = bench.run(tasks, lead=lead)
    return results, win, load


def _publish(bench: Bench, mode: Mode, binary: str, n: int) -> list[Row]:
    topic = bench.name("topics", f"go-publish-{n}")
    with api_for(bench.gateway) as api:
        api.create_topic(topic)
        try:
            raw_args = {
                "bootstrap": bench.bootstrap,
                "topic": kafka_topic(topic),
                "seconds": mode.publish_seconds,
            }
            results, win, load = _timed(bench, [(publish.raw_produce, raw_args)], lead=0.6)
            raw = _tag(build(NAME, "raw producer, 1 process", "raw", results, win), n, load)
            rows = [raw]
            for attributes in (ATTRIBUTES, *OTHER_ATTRIBUTES):
                args = {
                    "binary": binary,
                    "address": bench.gateway.address,
                    "topic": topic,
                    "seconds": mode.publish_seconds,
                    "outstanding": PUBLISH_OUTSTANDING,
                    "attributes": attributes,
                }
                results, win, load = _timed(bench, [(goclient.go_publish, args)])
                case = GO_PUBLISH if attributes == ATTRIBUTES else other_publish(attributes)
                row = _tag(build(NAME, case, "gateway", results, win), n, load)
                row.extra["attributes"] = attributes
                row.ratio = ratio(row.msgs_per_s, raw.msgs_per_s)
                _add_rpcs(row, results)
                if results[0].get("errors"):
                    row.extra["errors"] = results[0]["errors"]
                rows.append(row)
            return rows
        finally:
            api.delete(topic, [])


def _fill_by_go(bench: Bench, binary: str, topic: str, count: int, attributes: int) -> None:
    """`count` messages with `attributes` attributes published through the Go client."""
    args = {
        "binary": binary,
        "address": bench.gateway.address,
        "topic": topic,
        "count": count,
        "outstanding": PUBLISH_OUTSTANDING,
        "attributes": attributes,
    }
    results, _ = bench.run([(goclient.go_publish, args)], lead=GO_LEAD_S)
    done = int(results[0]["count"])
    if done != count:
        raise RuntimeError(f"filling {topic} through the Go client: {done} of {count} published")


def _receive(bench: Bench, mode: Mode, binary: str, n: int) -> list[Row]:
    _, backlog = _sizes(mode)
    topic = bench.name("topics", f"go-receive-{n}")
    cases = [GO_DEFAULT, GO_RAISED, STREAM_CASE]
    subs = {case: bench.name("subscriptions", f"go-receive-{n}-{i}") for i, case in enumerate(cases)}
    subs[GO_FIRST] = bench.name("subscriptions", f"go-receive-{n}-first")
    with api_for(bench.gateway) as api:
        api.create_topic(topic)
        for sub in subs.values():
            api.create_subscription(sub, topic)
        try:
            _fill_by_go(bench, binary, topic, backlog, ATTRIBUTES)
            raw_args = {
                "bootstrap": bench.bootstrap,
                "topic": kafka_topic(topic),
                "group": f"{bench.prefix}-go-{n}",
            }
            results, win, load = _timed(bench, [(subscribe.raw_consume, raw_args)], lead=0.6)
            raw = _tag(build(NAME, RAW_CASE, "raw", results, win), n, load)
            rows = [raw]
            rows.append(_first_message(bench, binary, subs[GO_FIRST], n))
            api.delete_subscription(subs.pop(GO_FIRST))  # its runner must not fetch meanwhile
            for case in cases[n % len(cases) :] + cases[: n % len(cases)]:  # rotated each round
                api.take_one(subs[case])  # the runner started, as in `deliver`
                rows.append(_receive_one(bench, binary, case, subs[case], backlog - 1, raw, n))
            rows.extend(
                _receive_other(bench, binary, other, backlog, raw, n)
                for other in (*OTHER_ATTRIBUTES, RAW_FILLED)
            )
            return rows
        finally:
            api.delete(topic, list(subs.values()))


def _first_message(bench: Bench, binary: str, sub: str, n: int) -> Row:
    """Receive on a subscription whose runner has not started: the time to its first message
    (the group joined, the partitions' logs folded, the first fetch), and the first 1,000."""
    args = {"address": bench.gateway.address, "subscription": sub, "expected": 1000}
    results, win, load = _timed(bench, [(goclient.go_receive, {**args, "binary": binary, "deadline": 120})])
    row = _tag(build(NAME, GO_FIRST, "gateway", results, win), n, load)
    row.extra["first_message_ms"] = round(float(results[0]["first_message_s"]) * 1000, 1)
    row.extra["duplicates"] = int(results[0]["duplicates"])
    return row


def _receive_other(bench: Bench, binary: str, other: int | str, backlog: int, raw: Row, n: int) -> Row:
    """The raised case on a backlog of its own: `other` attributes, or raw-filled records."""
    slug = f"go-other-{n}-{other if isinstance(other, int) else 'raw'}"
    topic, sub = bench.name("topics", slug), bench.name("subscriptions", slug)
    with api_for(bench.gateway) as api:
        api.create_topic(topic)
        api.create_subscription(sub, topic)
        try:
            if isinstance(other, int):
                _fill_by_go(bench, binary, topic, backlog, other)
            else:
                fill(bench, topic, backlog)
            api.take_one(sub)
            row = _receive_one(bench, binary, GO_RAISED, sub, backlog - 1, raw, n)
            row.case = other_raised(other)
            row.extra["attributes"] = other if isinstance(other, int) else 0
            if not isinstance(other, int):
                row.extra["filled_by"] = "raw Kafka producers (records without headers)"
            return row
        finally:
            api.delete(topic, [sub])


def _receive_one(bench: Bench, binary: str, case: str, sub: str, expected: int, raw: Row, n: int) -> Row:
    common = {"address": bench.gateway.address, "subscription": sub, "expected": expected}
    if case == STREAM_CASE:
        tasks: list[Task] = [(subscribe.gw_streaming, {**common, "deadline_s": 600.0})] * STREAMS
        results, win, load = _timed(bench, tasks, lead=0.6)
    else:
        args = {**common, "binary": binary, "deadline": 600, **(RAISED if case == GO_RAISED else {})}
        results, win, load = _timed(bench, [(goclient.go_receive, args)])
    row = _tag(build(NAME, case, "gateway", results, win), n, load)
    row.ratio = ratio(row.msgs_per_s, raw.msgs_per_s)
    row.extra["attributes"] = ATTRIBUTES
    row.extra["filled_by"] = "Go Publish"
    if case != STREAM_CASE:
        row.extra["duplicates"] = int(results[0]["duplicates"])
        _add_rpcs(row, results)
    if row.messages != expected:
        row.extra["received_of"] = f"{row.messages}/{expected}"
    return row


def _latency(bench: Bench, mode: Mode, binary: str, n: int) -> list[Row]:
    raw_topic, topic = bench.name("topics", f"go-lat-raw-{n}"), bench.name("topics", f"go-lat-{n}")
    sub = bench.name("subscriptions", f"go-lat-{n}")
    with api_for(bench.gateway) as api:
        api.create_topic(raw_topic)
        api.create_topic(topic)
        api.create_subscription(sub, topic)
        try:
            api.publish_one(topic)
            api.take_one(sub)
            seconds = mode.latency_seconds
            common = {"bootstrap": bench.bootstrap, "topic": kafka_topic(raw_topic), "rate": LATENCY_RATE}
            receiver = {
                **common,
                "seconds": seconds,
                "group": f"{bench.prefix}-go-lat-{n}",
                "expected": int(LATENCY_RATE * seconds),
            }
            results, win, load = _timed(
                bench,
                [(latency.raw_sender, {**common, "seconds": seconds}), (latency.raw_receiver, receiver)],
                0.6,
            )
            raw = _tag(pair_row(f"raw producer -> consumer @ {LATENCY_RATE}/s", "raw", results, win), n, load)
            args = {
                "binary": binary,
                "address": bench.gateway.address,
                "topic": topic,
                "subscription": sub,
                "rate": LATENCY_RATE,
                "seconds": seconds,
            }
            results, win, load = _timed(bench, [(goclient.go_latency, args)])
            row = _tag(build(NAME, GO_LATENCY, "gateway", results, win), n, load)
            got = results[0]
            row.extra.update({k: round(float(got[k]), 2) for k in ("p50_ms", "p99_ms", "max_ms")})
            row.extra.update({"sent": got["sent"], "duplicates": got["duplicates"]})
            row.ratio = ratio(row.extra["p99_ms"], raw.extra["p99_ms"])
            _add_rpcs(row, results)
            return [raw, row]
        finally:
            api.delete(raw_topic, [])
            api.delete(topic, [sub])


def _tag(row: Row, n: int, load: float) -> Row:
    row.extra["round"] = n + 1
    row.extra["load1"] = round(load, 2)
    return row


def _add_rpcs(row: Row, results: list[GenResult]) -> None:
    """The client's RPCs and stream requests per 1,000 messages (and in total)."""
    rpcs: dict[str, Any] = results[0].get("rpcs", {})
    per = 1000.0 / max(row.messages, 1)
    row.extra["rpcs"] = {k: int(v) for k, v in sorted(rpcs.items())}
    row.extra["rpcs_per_1000_msgs"] = {k: round(v * per, 2) for k, v in sorted(rpcs.items())}


def _median(rows: list[Row]) -> Row:
    """The round with the median figure (p99 for latency rows, else the rate), with every
    round's figures and the median of gateway CPU per message beside it."""
    key: Callable[[Row], float] = (
        (lambda r: float(r.extra["p99_ms"])) if "p99_ms" in rows[0].extra else (lambda r: r.msgs_per_s)
    )
    ordered = sorted(rows, key=key)
    row = ordered[(len(ordered) - 1) // 2] if len(ordered) % 2 else ordered[len(ordered) // 2 - 1]
    row.extra["rounds"] = len(rows)
    row.extra["rounds_msgs_per_s"] = [round(r.msgs_per_s) for r in rows]
    row.extra["rounds_load1"] = [r.extra["load1"] for r in rows]
    if "p99_ms" in row.extra:
        row.extra["rounds_p99_ms"] = [r.extra["p99_ms"] for r in rows]
        row.extra["median_p99_ms"] = statistics.median(float(r.extra["p99_ms"]) for r in rows)
        row.extra["median_p50_ms"] = statistics.median(float(r.extra["p50_ms"]) for r in rows)
    row.extra["median_msgs_per_s"] = round(statistics.median(r.msgs_per_s for r in rows))
    cpu = [float(r.extra["gw_cpu_us_per_msg"]) for r in rows if "gw_cpu_us_per_msg" in r.extra]
    if cpu:
        row.extra["rounds_gw_cpu_us_per_msg"] = cpu
        row.extra["median_gw_cpu_us_per_msg"] = round(statistics.median(cpu), 1)
    if "duplicates" in row.extra:
        row.extra["rounds_duplicates"] = [int(r.extra["duplicates"]) for r in rows]
    if "first_message_ms" in row.extra:
        row.extra["rounds_first_message_ms"] = [r.extra["first_message_ms"] for r in rows]
        row.extra["median_first_message_ms"] = statistics.median(
            float(r.extra["first_message_ms"]) for r in rows
        )
    return row
