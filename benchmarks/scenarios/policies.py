"""policies: the cost of filters and dead-letter policies, as a ratio against the same
Pull+Acknowledge run on a plain subscription of the same topic in the same run.

Every subscription reads the same pre-published messages. The filter (`NOT attributes:drop`)
is evaluated on every message and matches all of them, so each case delivers the same count;
the dead-letter policy is active on every delivery (counted attempts, the forwarding loop).
"""

from __future__ import annotations

import time

import grpc

from benchmarks.api import CREATE_RETRIES, Api
from benchmarks.config import Mode
from benchmarks.gen import subscribe
from benchmarks.harness import Bench
from benchmarks.results import Row, build, ratio
from benchmarks.scenarios.common import api_for, fill
from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

NAME = "policies"
FILTER = "NOT attributes:drop"


def _create(api: Api, name: str, topic: str, dead_letter: str | None, filtered: bool) -> None:
    request = pb.Subscription(
        name=name, topic=topic, ack_deadline_seconds=60, filter=FILTER if filtered else ""
    )
    if dead_letter:
        request.dead_letter_policy.dead_letter_topic = dead_letter
        request.dead_letter_policy.max_delivery_attempts = 5
    for attempt in range(CREATE_RETRIES):
        try:
            api.sub.CreateSubscription(request, timeout=60)
            return
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE or attempt == CREATE_RETRIES - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def run(bench: Bench, mode: Mode) -> list[Row]:
    topic, dead = bench.name("topics", "policies"), bench.name("topics", "policies-dead")
    cases = {  # label -> (subscription, dead-letter topic, filtered)
        "plain": (bench.name("subscriptions", "pol-plain"), None, False),
        "filter": (bench.name("subscriptions", "pol-filter"), None, True),
        "dead-letter policy": (bench.name("subscriptions", "pol-dlq"), dead, False),
        "filter + dead-letter policy": (bench.name("subscriptions", "pol-both"), dead, True),
    }
    procs = max(mode.deliver_procs)
    with api_for(bench.gateway) as api:
        api.create_topic(topic)
        api.create_topic(dead)
        for sub, dlq, filtered in cases.values():
            _create(api, sub, topic, dlq, filtered)
        try:
            fill(bench, topic, mode.deliver_messages)
            rows: list[Row] = []
            base: Row | None = None
            for label, (sub, _, _) in cases.items():
                api.take_one(sub)
                args = {
                    "address": bench.gateway.address,
                    "subscription": sub,
                    "deadline_s": 600.0,
                    "expected": mode.deliver_messages - 1,
                }
                results, win = bench.run([(subscribe.gw_pull_ack, args)] * procs)
                row = build(NAME, f"Pull+Ack, {label}, {procs} procs", "gateway", results, win)
                if base is None:
                    base = row
                row.ratio = ratio(row.msgs_per_s, base.msgs_per_s)
                row.extra["cost_vs_plain"] = (
                    round(base.msgs_per_s / row.msgs_per_s, 3) if row.msgs_per_s else None
                )
                rows.append(row)
            return rows
        finally:
            api.delete(topic, [sub for sub, _, _ in cases.values()])
            api.delete(dead, [])
