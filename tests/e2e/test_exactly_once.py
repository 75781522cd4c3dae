"""Exactly-once delivery as the official client sees it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber._protocol.streaming_pull_manager import _get_ack_errors
from google.cloud.pubsub_v1.subscriber.exceptions import AcknowledgeStatus

from tests.conftest import GatewayFactory
from tests.e2e.clients import clients, pull_nothing, pull_until
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration
INVALID = "PERMANENT_FAILURE_INVALID_ACK_ID"


def _eod(
    gw: GatewayProcess, names: Callable[[str], str], n: int, deadline: int = 10
) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient, str, str]:
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "ack_deadline_seconds": deadline,
            "enable_exactly_once_delivery": True,
        }
    )
    for f in [pub.publish(topic, f"m{i}".encode()) for i in range(n)]:
        f.result(timeout=30)
    return pub, sub, topic, subscription


def test_ack_with_response_succeeds_for_every_message(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    _, sub, _, subscription = _eod(shared_gateway, names, 200, deadline=30)
    results: list[tuple[bytes, AcknowledgeStatus]] = []
    lock = threading.Lock()

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        status = message.ack_with_response().result(timeout=30)
        with lock:
            results.append((message.data, status))

    future = sub.subscribe(subscription, callback)
    deadline = time.monotonic() + 60
    while len(results) < 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    future.cancel()
    assert sorted(d for d, _ in results) == sorted(f"m{i}".encode() for i in range(200))
    assert {s for _, s in results} == {AcknowledgeStatus.SUCCESS}
    assert pull_nothing(sub, subscription, 3.0) == []


def test_expired_ack_ids_are_reported_per_id_as_the_client_expects(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    _, sub, _, subscription = _eod(shared_gateway, names, 2)
    first = pull_until(sub, subscription, 2)
    time.sleep(11)  # both leases expire
    again = pull_until(sub, subscription, 2)
    stale, fresh = first[0], next(m for m in again if m.message.data == first[0].message.data)
    with pytest.raises(exceptions.InvalidArgument) as info:
        sub.acknowledge(subscription=subscription, ack_ids=[stale.ack_id, fresh.ack_id])
    assert info.value.reason == "EXACTLY_ONCE_ACKID_FAILURE"
    assert info.value.domain == "pubsub.googleapis.com"
    errors = _get_ack_errors(info.value)  # the client's own parser
    assert errors is not None and errors[stale.ack_id] == INVALID
    assert errors[fresh.ack_id].startswith("TRANSIENT_"), "the valid id is retried alone by the client"
    sub.acknowledge(subscription=subscription, ack_ids=[fresh.ack_id])  # the retry succeeds
    with pytest.raises(exceptions.InvalidArgument):
        sub.modify_ack_deadline(subscription=subscription, ack_ids=[stale.ack_id], ack_deadline_seconds=30)
    other = next(m for m in again if m.message.data != first[0].message.data)
    sub.acknowledge(subscription=subscription, ack_ids=[other.ack_id])
    assert pull_nothing(sub, subscription, 12.0) == [], "confirmed acks are never delivered again"


def test_confirmed_acks_hold_across_kill_9_and_a_second_process(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    a = start_gateway()
    b = start_gateway(prefix=a.prefix)
    _, sub_a, _, subscription = _eod(a, names, 100, deadline=10)
    _, sub_b = clients(b)
    got = pull_until(sub_a, subscription, 100)
    assert len(got) == 100
    # Acks sent to the other process are judged by the owner (forwarded) and confirmed.
    half = got[:50]
    sub_b.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in half])
    a.kill()
    a.start()
    _, sub_a = clients(a)
    acked = {m.message.data for m in half}
    back: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(back) < 50 and time.monotonic() < deadline:
        for client in (sub_a, sub_b):
            resp = client.pull(subscription=subscription, max_messages=100, timeout=10)
            back += [m.message.data for m in resp.received_messages]
            if resp.received_messages:
                client.acknowledge(
                    subscription=subscription, ack_ids=[m.ack_id for m in resp.received_messages]
                )
    assert not acked & set(back), "a confirmed ack is never delivered again"
    assert set(back) == {m.message.data for m in got} - acked
