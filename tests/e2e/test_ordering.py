"""Ordering keys: per-key publish order, one outstanding batch per key, ordered redelivery."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import pytest
from google.cloud import pubsub_v1

from tests.e2e.clients import clients, pull_nothing, pull_until
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


def _runs_restart_only_where_nacked(order: list[int], nacks: set[int], per_key: int) -> str | None:
    """Why `order` breaks the ordering rule, or None: a key's messages come in order, and after
    a nack of message i the key starts over at i and goes on through every later message,
    acknowledged before or not."""
    if not order or order[0] != 0:
        return f"does not start at 0: {order[:5]}"
    for prev, cur in itertools.pairwise(order):
        if cur != prev + 1 and not (cur in nacks and cur <= prev):
            return f"{prev} -> {cur}"
    if order[-1] != per_key - 1:
        return f"ends at {order[-1]}"
    return None


def test_a_nack_redelivers_every_later_message_of_its_key_over_streaming_pull(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """The official client's pattern: it hands a key's next message to the callback as soon as
    the previous one is acked or nacked, so acks of later messages reach the gateway before or
    after the nack. Every later message must come again after the nacked one, acked or not."""
    pub, sub, topic, subscription = _ordered(shared_gateway, names)
    keys, per_key, nack_at = 5, 200, {25, 75, 125, 175}
    _publish_keys(pub, topic, keys, per_key)
    seen: dict[str, list[int]] = {f"k{k}": [] for k in range(keys)}
    nacked: dict[tuple[str, int], int] = {}  # (key, index) -> where in seen[key] it was nacked
    lock = threading.Lock()

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        key, index = message.ordering_key, int(message.data.decode().split(":")[1])
        with lock:
            seen[key].append(index)
            if index in nack_at and (key, index) not in nacked:
                nacked[(key, index)] = len(seen[key]) - 1
                message.nack()
                return
        message.ack()

    future = sub.subscribe(subscription, callback)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            with lock:
                if len(nacked) == keys * len(nack_at) and all(
                    s and s[-1] == per_key - 1 for s in seen.values()
                ):
                    break
            time.sleep(0.2)
        time.sleep(2)  # anything more that comes would be a duplicate past the end: see below
    finally:
        future.cancel()
    for key, order in seen.items():
        broken = _runs_restart_only_where_nacked(order, nack_at, per_key)
        assert broken is None, f"{key}: {broken}; delivered {order}"
        for index in nack_at:
            # (A nack inside messages that an earlier nack's restart already sends again is
            # covered by that restart: the client receives ahead of its callbacks.)
            assert index in order[nacked[(key, index)] + 1 :], f"{key}: {index} nacked, never again"


def test_a_nack_over_pull_redelivers_later_messages_acked_before_it(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """Unary Pull, the ack of the later messages sent before the nack of an earlier one."""
    pub, sub, topic, subscription = _ordered(shared_gateway, names)
    _publish_keys(pub, topic, 1, 10)
    first = pull_until(sub, subscription, 10)
    assert [m.message.data for m in first] == [f"k0:{i}".encode() for i in range(10)]
    ids = [m.ack_id for m in first]
    sub.acknowledge(subscription=subscription, ack_ids=ids[:4] + ids[5:])  # all but k0:4
    sub.modify_ack_deadline(subscription=subscription, ack_ids=[ids[4]], ack_deadline_seconds=0)
    again = pull_until(sub, subscription, 6)
    assert [m.message.data for m in again] == [f"k0:{i}".encode() for i in range(4, 10)], (
        "k0:4 and every later message, acked or not, in order"
    )
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in again])
    assert pull_nothing(sub, subscription, 3) == []
