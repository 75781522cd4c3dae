"""SetIamPolicy is a compare-and-set on the resource's record, across processes: two gateways
that change one policy at once never both succeed, and the policy that stays is the one whose
writer was told it succeeded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from google.iam.v1 import iam_policy_pb2, policy_pb2

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.errors import Aborted
from tests.inprocess.conftest import InProcessGateway, settings_for


def _request(topic: str, member: str, etag: bytes) -> iam_policy_pb2.SetIamPolicyRequest:
    policy = policy_pb2.Policy(etag=etag)
    policy.bindings.add(role="roles/pubsub.publisher", members=[member])
    return iam_policy_pb2.SetIamPolicyRequest(resource=topic, policy=policy)


def test_concurrent_policy_changes_in_two_processes(gw: InProcessGateway, names: Callable[..., str]) -> None:
    other = InProcessGateway(
        settings_for(gw.settings.kafka_bootstrap or "", gw.settings.internal_prefix)
    ).start()
    try:
        for round_ in range(10):
            topic = names("topics", f"-{round_}")
            gw.run(gw.gateway.topics.create(pb.Topic(name=topic)))
            deadline = time.monotonic() + 10
            while other.gateway.store.get("topic", topic) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            get = iam_policy_pb2.GetIamPolicyRequest(resource=topic)
            etag = gw.gateway.access.get_policy(get).etag
            assert other.gateway.access.get_policy(get).etag == etag

            # Both read the same version; both write at once, each from its own process.
            calls = {
                "user:a@example.com": asyncio.run_coroutine_threadsafe(
                    gw.gateway.access.set_policy(_request(topic, "user:a@example.com", etag)), gw.loop
                ),
                "user:b@example.com": asyncio.run_coroutine_threadsafe(
                    other.gateway.access.set_policy(_request(topic, "user:b@example.com", etag)), other.loop
                ),
            }
            won = []
            for member, future in calls.items():
                try:
                    future.result(30)
                    won.append(member)
                except Aborted:
                    pass
            assert len(won) == 1, f"round {round_}: {won} both succeeded or both failed"
            # Once both processes have read everything, both hold the winner's policy.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                held = [
                    [m for b in g.gateway.access.get_policy(get).bindings for m in b.members]
                    for g in (gw, other)
                ]
                if held == [won, won]:
                    break
                time.sleep(0.1)
            assert held == [won, won], f"round {round_}: {held}, but {won} was told it succeeded"
    finally:
        other.stop()
