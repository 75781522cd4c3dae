"""The gRPC and REST servicers in this process, driven by the official Python client and plain
HTTP: the whole request path (decode, servicer, core, Kafka and back) with no process boundary."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from google.api_core import exceptions

from tests.inprocess.conftest import InProcessGateway

Names = Callable[..., str]


def test_publish_pull_ack_with_the_official_client(gw: InProcessGateway, names: Names) -> None:
    publisher, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=sub, topic=topic, ack_deadline_seconds=30)
    futures = [publisher.publish(topic, f"m{i}".encode(), n=str(i)) for i in range(50)]
    ids = [f.result(30) for f in futures]
    assert len(set(ids)) == 50

    got: dict[str, Any] = {}
    deadline = time.monotonic() + 30
    while len(got) < 50 and time.monotonic() < deadline:
        resp = subscriber.pull(subscription=sub, max_messages=50, timeout=10)
        for m in resp.received_messages:
            got[m.message.message_id] = m
        if resp.received_messages:
            subscriber.acknowledge(subscription=sub, ack_ids=[m.ack_id for m in resp.received_messages])
    assert sorted(got) == sorted(ids)
    assert all(m.message.attributes["n"] == m.message.data.decode()[1:] for m in got.values())
    assert subscriber.pull(subscription=sub, max_messages=10, timeout=10).received_messages == []
    assert list(publisher.list_topic_subscriptions(topic=topic)) == [sub]


def test_errors_carry_the_api_status_codes(gw: InProcessGateway, names: Names) -> None:
    publisher, subscriber = gw.clients()
    topic = names("topics")
    with pytest.raises(exceptions.NotFound):
        publisher.get_topic(topic=topic)
    publisher.create_topic(name=topic)
    with pytest.raises(exceptions.AlreadyExists):
        publisher.create_topic(name=topic)
    with pytest.raises(exceptions.InvalidArgument):
        subscriber.create_subscription(name=names("subscriptions"), topic=topic, ack_deadline_seconds=601)
    with pytest.raises(exceptions.NotFound):
        subscriber.pull(subscription=names("subscriptions", "-missing"), max_messages=1, timeout=10)


def test_streaming_pull_with_the_official_subscriber(gw: InProcessGateway, names: Names) -> None:
    publisher, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=sub, topic=topic)
    for f in [publisher.publish(topic, f"s{i}".encode()) for i in range(200)]:
        f.result(30)

    seen: list[bytes] = []
    done = threading.Event()
    lock = threading.Lock()

    def callback(message: Any) -> None:
        with lock:
            seen.append(message.data)
            if len(seen) >= 200:
                done.set()
        message.ack()

    future = subscriber.subscribe(sub, callback)
    try:
        assert done.wait(60), f"{len(seen)} of 200 received"
        time.sleep(2)  # time for a redelivery, if acks were lost
    finally:
        future.cancel()
        future.result(30)
    assert sorted(seen) == sorted(f"s{i}".encode() for i in range(200))


def test_rest_publish_and_pull(gw: InProcessGateway, names: Names) -> None:
    topic, sub = names("topics"), names("subscriptions")
    assert gw.http("PUT", topic, {})[0] == 200
    assert gw.http("PUT", sub, {"topic": topic})[0] == 200
    data = base64.b64encode(b"over http").decode()
    status, body = gw.http("POST", f"{topic}:publish", {"messages": [{"data": data}]})
    assert status == 200 and len(body["messageIds"]) == 1
    received: list[Any] = []
    deadline = time.monotonic() + 30
    while not received and time.monotonic() < deadline:
        status, body = gw.http("POST", f"{sub}:pull", {"maxMessages": 5})
        assert status == 200
        received = body.get("receivedMessages", [])
    assert [base64.b64decode(m["message"]["data"]) for m in received] == [b"over http"]
    assert gw.http("POST", f"{sub}:acknowledge", {"ackIds": [received[0]["ackId"]]})[0] == 200
    status, body = gw.http("GET", f"{topic}-missing")
    assert status == 404 and body["error"]["status"] == "NOT_FOUND"
