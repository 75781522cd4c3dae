"""Ordering keys: per-key publish order, one outstanding batch per key, ordered redelivery."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import pytest
from google.cloud import pubsub_v1

from tests.e2e.clients import clients, pull_until
from tests.gateways import GatewayProcess, emulator_env

pytestmark = pytest.mark.integration


def _ordered(
    gw: GatewayProcess, names: Callable[[str], str]
) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient, str, str]:
    with emulator_env(gw.address):
        pub = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
        )
    _, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "enable_message_ordering": True,
            "ack_deadline_seconds": 30,
        }
    )
    return pub, sub, topic, subscription


def _publish_keys(pub: pubsub_v1.PublisherClient, topic: str, keys: int, per_key: int) -> None:
    futures = [
        pub.publish(topic, f"k{k}:{i}".encode(), ordering_key=f"k{k}")
        for i in range(per_key)
        for k in range(keys)
    ]
    for f in futures:
        f.result(timeout=60)


def test_pull_holds_a_key_while_its_batch_is_out(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub, topic, subscription = _ordered(shared_gateway, names)
    _publish_keys(pub, topic, 1, 3)
    pub.publish(topic, b"free").result(timeout=30)
    first = pull_until(sub, subscription, 4)
    assert [m.message.data for m in first if m.message.ordering_key] == [b"k0:0", b"k0:1", b"k0:2"]
    assert {m.message.ordering_key for m in first if m.message.data.startswith(b"k0")} == {"k0"}
    _publish_keys(pub, topic, 1, 1)  # k0:0 again, later in the log
    pub.publish(topic, b"free2").result(timeout=30)
    second = pull_until(sub, subscription, 1, timeout=5)
    assert [m.message.data for m in second] == [b"free2"], "k0 waits for its outstanding batch"
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in first + second])
    third = pull_until(sub, subscription, 1)
    assert [m.message.data for m in third] == [b"k0:0"]


def test_subscriber_sees_each_key_in_order_even_after_nacks(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub, topic, subscription = _ordered(shared_gateway, names)
    keys, per_key = 4, 25
    _publish_keys(pub, topic, keys, per_key)
    seen: dict[str, list[int]] = {}
    nacked: set[str] = set()
    lock = threading.Lock()

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        key, index = message.ordering_key, int(message.data.decode().split(":")[1])
        with lock:
            if key == "k1" and index == 5 and key not in nacked:
                nacked.add(key)
                seen.setdefault(key, []).append(index)
                message.nack()
                return
            seen.setdefault(key, []).append(index)
        message.ack()

    future = sub.subscribe(subscription, callback)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if all(set(seen.get(f"k{k}", [])) == set(range(per_key)) for k in range(keys)):
                break
        time.sleep(0.1)
    future.cancel()
    for k in range(keys):
        order = seen[f"k{k}"]
        assert set(order) == set(range(per_key)), f"k{k} lost messages"
        # In order, except that a nack restarts the key from the nacked message.
        for prev, cur in itertools.pairwise(order):
            assert cur == prev + 1 or (k == 1 and cur == 5), f"k{k} out of order: {order}"
