"""Concurrent changes of one subscription's record from two gateway processes on a real broker
(core/resources.py, docs/architecture.md#resources): every change whose writer was told it
succeeded is kept, in both processes and in a third one that reads the log afresh.

The interleavings are the broker's, so this is the end-to-end check; the unit test
tests/unit/test_resource_races.py forces each interleaving by hand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from tests.inprocess.conftest import InProcessGateway, settings_for, wait_for

ROUNDS = 30


def test_updates_in_one_process_keep_counts_raised_in_another(
    gw: InProcessGateway, names: Callable[..., str]
) -> None:
    """Process A raises a count on the record (as truncation and Seek do); process B, at the
    same time, changes the ack deadline with UpdateSubscription. B once wrote back the whole
    record it had read, so counts raised by A meanwhile were lost."""
    other = InProcessGateway(
        settings_for(gw.settings.kafka_bootstrap or "", gw.settings.internal_prefix)
    ).start()
    fresh: InProcessGateway | None = None
    try:
        topic, sub = names("topics"), names("subscriptions")
        gw.run(gw.gateway.topics.create(pb.Topic(name=topic)))
        gw.run(
            gw.gateway.subscriptions.create(pb.Subscription(name=sub, topic=topic, ack_deadline_seconds=10))
        )
        wait_for(
            "subscription in the other process",
            lambda: other.gateway.store.get("subscription", sub) is not None,
        )

        async def raises() -> None:
            for _ in range(ROUNDS):
                await gw.gateway.truncation.raise_event(sub)

        async def updates() -> None:
            for i in range(ROUNDS):
                change = pb.Subscription(name=sub, ack_deadline_seconds=20 + i)
                await other.gateway.subscriptions.update(change, ["ack_deadline_seconds"])

        def start(g: InProcessGateway, coro: Coroutine[Any, Any, None]) -> Any:
            return asyncio.run_coroutine_threadsafe(coro, g.loop)

        a, b = start(gw, raises()), start(other, updates())
        a.result(120)
        b.result(120)

        def held(g: InProcessGateway) -> tuple[int, int]:
            res = g.gateway.store.require("subscription", sub)
            return res.meta.legacy_truncations, res.proto.ack_deadline_seconds

        want = (ROUNDS, 20 + ROUNDS - 1)
        deadline = time.monotonic() + 10  # until the other process has read the last write
        while held(gw) != held(other) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (held(gw), held(other)) == (want, want)
        # A process started now reads the log from the start: the same record.
        fresh = InProcessGateway(
            settings_for(gw.settings.kafka_bootstrap or "", gw.settings.internal_prefix)
        ).start()
        assert held(fresh) == want
    finally:
        other.stop()
        if fresh is not None:
            fresh.stop()
