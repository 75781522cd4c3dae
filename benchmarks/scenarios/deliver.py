"""deliver: N pre-published messages read by a raw group consumer (committing) vs the gateway's
Pull(max 1000)+Acknowledge from several processes, StreamingPull from a lean gRPC generator, and
the official Python subscriber (`SubscriberClient.subscribe`, acking in its callback)."""

from __future__ import annotations

from benchmarks import api as api_mod
from benchmarks.config import Mode
from benchmarks.gen import subscribe
from benchmarks.harness import Bench
from benchmarks.results import Row, build, missing, ratio
from benchmarks.scenarios.common import api_for, fill, kafka_topic

NAME = "deliver"
STREAM_CASE = "StreamingPull+ack on stream"
OFFICIAL_CASE = "official Python subscriber, 1 proc"
OFFICIAL_MAX = 50_000  # it is client-bound and slower: a part of the backlog is enough


def run(bench: Bench, mode: Mode) -> list[Row]:
    topic = bench.name("topics", "deliver")
    subs = [bench.name("subscriptions", f"deliver-pull{n}") for n in mode.deliver_procs]
    stream_sub = bench.name("subscriptions", "deliver-stream")
    official_sub = bench.name("subscriptions", "deliver-official")
    with api_for(bench.gateway) as api:
        api.create_topic(topic)
        for sub in [*subs, stream_sub, official_sub]:
            api.create_subscription(sub, topic)
        try:
            streaming = _probe(bench, api)
            fill_rate = fill(bench, topic, mode.deliver_messages)
            raw = _raw(bench, mode, topic)
            raw.extra["prepublish_msgs_per_s"] = round(fill_rate)
            rows = [raw]
            for procs, sub in zip(mode.deliver_procs, subs, strict=True):
                api.take_one(sub)
                rows.append(_pull(bench, mode, sub, procs, raw))
            if streaming == "ok":
                api.take_one(stream_sub)
                rows.append(_stream(bench, mode, stream_sub, max(mode.deliver_procs), raw))
            else:
                rows.append(missing(NAME, STREAM_CASE, streaming))
            api.take_one(official_sub)
            rows.append(_official(bench, mode, official_sub, raw))
            return rows
        finally:
            api.delete(topic, [*subs, stream_sub, official_sub])


def _probe(bench: Bench, api: api_mod.Api) -> str:
    topic, sub = bench.name("topics", "probe"), bench.name("subscriptions", "probe")
    api.create_topic(topic, partitions=1)
    api.create_subscription(sub, topic)
    try:
        return api_mod.probe_streaming_pull(api, topic, sub)
    finally:
        api.delete(topic, [sub])


def _raw(bench: Bench, mode: Mode, topic: str) -> Row:
    args = {"bootstrap": bench.bootstrap, "topic": kafka_topic(topic), "group": f"{bench.prefix}-raw-deliver"}
    results, win = bench.run([(subscribe.raw_consume, args)])
    return build(NAME, "raw consumer (commit per batch), 1 proc", "raw", results, win)


def _pull(bench: Bench, mode: Mode, sub: str, procs: int, raw: Row) -> Row:
    args = {
        "address": bench.gateway.address,
        "subscription": sub,
        "deadline_s": 600.0,
        "expected": mode.deliver_messages - 1,
    }
    results, win = bench.run([(subscribe.gw_pull_ack, args)] * procs)
    row = build(NAME, f"Pull max 1000 + Acknowledge, {procs} procs", "gateway", results, win)
    return _finish(row, raw, mode)


def _stream(bench: Bench, mode: Mode, sub: str, procs: int, raw: Row) -> Row:
    args = {
        "address": bench.gateway.address,
        "subscription": sub,
        "deadline_s": 600.0,
        "expected": mode.deliver_messages - 1,
    }
    results, win = bench.run([(subscribe.gw_streaming, args)] * procs)
    row = build(NAME, f"{STREAM_CASE}, {procs} streams", "gateway", results, win)
    return _finish(row, raw, mode)


def _official(bench: Bench, mode: Mode, sub: str, raw: Row) -> Row:
    expected = min(mode.deliver_messages - 1, OFFICIAL_MAX)
    args = {"address": bench.gateway.address, "subscription": sub, "deadline_s": 300.0, "expected": expected}
    results, win = bench.run([(subscribe.gw_official, args)], lead=4.0)  # its imports take a while
    row = build(NAME, OFFICIAL_CASE, "gateway", results, win)
    return _finish(row, raw, mode, expected)


def _finish(row: Row, raw: Row, mode: Mode, expected: int | None = None) -> Row:
    row.ratio = ratio(row.msgs_per_s, raw.msgs_per_s)
    if expected is None:
        expected = mode.deliver_messages - 1  # one went to the warm-up pull
    if row.messages != expected:
        row.extra["received_of"] = f"{row.messages}/{expected}"
    return row
