"""Per-message ack semantics on Kafka: deadlines, nacks, modacks, durable delivery attempts."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from google.pubsub_v1 import types

from tests.e2e.clients import clients, pull_nothing, pull_until
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration


def _setup(
    gw: GatewayProcess, names: Callable[[str], str], n: int, **sub_fields: object
) -> tuple[object, object, str, str]:
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(request={"name": subscription, "topic": topic, **sub_fields})
    for f in [pub.publish(topic, f"m{i}".encode()) for i in range(n)]:
        f.result(timeout=30)
    return pub, sub, topic, subscription


def test_expired_deadline_redelivers_with_a_new_ack_id(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    _, sub, _, subscription = _setup(shared_gateway, names, 5, ack_deadline_seconds=10)
    first = pull_until(sub, subscription, 5)
    assert sorted(m.message.data for m in first) == [f"m{i}".encode() for i in range(5)]
    t0 = time.monotonic()
    assert pull_nothing(sub, subscription, 5.0) == [], "nothing is redelivered before the deadline"
    again = pull_until(sub, subscription, 5, timeout=20)
    assert time.monotonic() - t0 >= 8.0
    assert sorted(m.message.data for m in again) == sorted(m.message.data for m in first)
    assert not {m.ack_id for m in again} & {m.ack_id for m in first}, "ack ids are unique per delivery"
    # The first ids name deliveries that are over: acking them is not an error (exactly-once is
    # off) and changes nothing; the messages are still out under their current ids.
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in first])
    sub.modify_ack_deadline(
        subscription=subscription, ack_ids=[m.ack_id for m in again], ack_deadline_seconds=0
    )
    third = pull_until(sub, subscription, 5, timeout=10)
    assert sorted(m.message.data for m in third) == sorted(m.message.data for m in first)
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in third])
    assert pull_nothing(sub, subscription, 12.0) == []


def test_nack_redelivers_at_once_and_modack_extension_holds_the_lease(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    _, sub, _, subscription = _setup(shared_gateway, names, 4, ack_deadline_seconds=10)
    got = pull_until(sub, subscription, 4)
    by_data = {m.message.data: m for m in got}
    sub.modify_ack_deadline(
        subscription=subscription, ack_ids=[by_data[b"m0"].ack_id], ack_deadline_seconds=0
    )
    sub.modify_ack_deadline(
        subscription=subscription,
        ack_ids=[by_data[d].ack_id for d in (b"m1", b"m2", b"m3")],
        ack_deadline_seconds=40,
    )
    t0 = time.monotonic()
    redelivered = pull_until(sub, subscription, 1, timeout=5)
    assert [m.message.data for m in redelivered] == [b"m0"]
    assert time.monotonic() - t0 < 4.0, "a nack redelivers at once"
    sub.acknowledge(subscription=subscription, ack_ids=[redelivered[0].ack_id])
    # Past the original 10 s deadline, the extended leases hold.
    assert pull_nothing(sub, subscription, 14.0) == []
    sub.acknowledge(subscription=subscription, ack_ids=[by_data[d].ack_id for d in (b"m1", b"m2", b"m3")])


def test_delivery_attempt_counts_with_a_dead_letter_policy(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub = clients(shared_gateway)
    dead = names("topics", "-dead")
    pub.create_topic(name=dead)
    _, sub, _, subscription = _setup(
        shared_gateway, names, 1, dead_letter_policy={"dead_letter_topic": dead, "max_delivery_attempts": 10}
    )
    attempts = []
    for _ in range(3):
        (m,) = pull_until(sub, subscription, 1)
        attempts.append(m.delivery_attempt)
        sub.modify_ack_deadline(subscription=subscription, ack_ids=[m.ack_id], ack_deadline_seconds=0)
    assert attempts == [1, 2, 3]


def test_pull_waits_a_bounded_time_and_wakes_on_publish(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub, topic, subscription = _setup(shared_gateway, names, 0)
    t0 = time.monotonic()
    resp = sub.pull(subscription=subscription, max_messages=10, timeout=30)
    waited = time.monotonic() - t0
    assert list(resp.received_messages) == []
    assert 1.0 <= waited < 10.0, f"an empty pull returns after the server's wait (waited {waited:.1f} s)"
    pub.publish(topic, b"late").result(timeout=30)
    got = pull_until(sub, subscription, 1, timeout=10)
    assert [m.message.data for m in got] == [b"late"]


def test_many_messages_each_delivered_once_when_acked(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    n = 3000
    pub, sub, topic, subscription = _setup(shared_gateway, names, 0)
    for start in range(0, n, 1000):
        msgs = [types.PubsubMessage(data=f"x{i}".encode()) for i in range(start, start + 1000)]
        for f in [pub.publish(topic, m.data) for m in msgs]:
            f.result(timeout=60)
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < n and time.monotonic() < deadline:
        resp = sub.pull(subscription=subscription, max_messages=1000, timeout=10)
        if resp.received_messages:
            seen += [m.message.data for m in resp.received_messages]
            sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in resp.received_messages])
    assert len(seen) == n
    assert len(set(seen)) == n
    assert pull_nothing(sub, subscription, 3.0) == []


def test_the_first_pull_of_a_new_subscription_returns_all_that_was_published(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """Google's system tests publish a few messages and expect one Pull to return them all.
    Separate publishes land on different partitions; a cold subscription fetches each on its
    own, and the first Pull waits (a bounded time) until every one has been read."""
    pub, sub = clients(shared_gateway)
    topic = names("topics")
    pub.create_topic(name=topic)
    got = []
    for batched in [True, False] * 2:
        subscription = names("subscriptions")
        sub.create_subscription(name=subscription, topic=topic)
        if batched:  # as Google's tests do: one request, one partition
            for f in [pub.publish(topic, b"m%d" % i) for i in range(3)]:
                f.result(timeout=30)
        else:  # one request each: spread over the topic's 4 partitions
            for i in range(3):
                pub.publish(topic, b"m%d" % i).result(timeout=30)
        resp = sub.pull(subscription=subscription, max_messages=3, timeout=60)
        got.append(sorted(m.message.data for m in resp.received_messages))
        sub.delete_subscription(subscription=subscription)
    assert got == [[b"m0", b"m1", b"m2"]] * 4
