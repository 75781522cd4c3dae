"""StreamingPull as the official high-level subscriber and the raw stream use it."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import grpc
import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.pubsub_v1 import types
from google.pubsub_v1.services.subscriber import SubscriberClient as SubscriberGapic
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from tests.conftest import GatewayFactory
from tests.e2e.clients import assert_never_out_twice, await_subscription, clients, topic_and_subscription
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration


def _gapic(gw: GatewayProcess) -> SubscriberGapic:
    return SubscriberGapic(transport=SubscriberGrpcTransport(channel=grpc.insecure_channel(gw.address)))


def _collect(
    sub: pubsub_v1.SubscriberClient,
    subscription: str,
    n: int,
    timeout: float,
    flow: pubsub_v1.types.FlowControl | None = None,
    delay: float = 0.0,
) -> tuple[list[bytes], int]:
    got: list[bytes] = []
    lock = threading.Lock()
    done = threading.Event()
    active = [0, 0]  # now, max

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        with lock:
            active[0] += 1
            active[1] = max(active[1], active[0])
        time.sleep(delay)
        with lock:
            got.append(message.data)
            active[0] -= 1
            if len(got) >= n:
                done.set()
        message.ack()

    future = sub.subscribe(subscription, callback, flow_control=flow or pubsub_v1.types.FlowControl())
    try:
        done.wait(timeout)
    finally:
        future.cancel()
    return got, active[1]


def test_subscriber_receives_every_message(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub, topic, subscription = topic_and_subscription(shared_gateway, names)
    n = 2000
    for f in [pub.publish(topic, f"m{i}".encode()) for i in range(n)]:
        f.result(timeout=60)
    got, _ = _collect(sub, subscription, n, timeout=60)
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(n))


def test_subscriber_with_tight_flow_control(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub, topic, subscription = topic_and_subscription(shared_gateway, names)
    for f in [pub.publish(topic, f"m{i}".encode()) for i in range(60)]:
        f.result(timeout=60)
    got, most = _collect(
        sub, subscription, 60, timeout=60, flow=pubsub_v1.types.FlowControl(max_messages=3), delay=0.02
    )
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(60))
    assert most <= 3


def _requests(
    first: types.StreamingPullRequest, later: queue.Queue[types.StreamingPullRequest | None]
) -> Iterator[types.StreamingPullRequest]:
    yield first
    while (item := later.get()) is not None:
        yield item


def test_server_side_flow_control_and_heartbeats(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, _, topic, subscription = topic_and_subscription(shared_gateway, names, enable_message_ordering=True)
    for f in [pub.publish(topic, f"m{i}".encode()) for i in range(10)]:
        f.result(timeout=60)
    later: queue.Queue[types.StreamingPullRequest | None] = queue.Queue()
    first = types.StreamingPullRequest(
        subscription=subscription,
        stream_ack_deadline_seconds=60,
        max_outstanding_messages=3,
        protocol_version=1,
    )
    stream = _gapic(shared_gateway).streaming_pull(requests=_requests(first, later), timeout=60)
    received: list[types.ReceivedMessage] = []
    resp = next(stream)
    assert resp.subscription_properties.message_ordering_enabled
    received += resp.received_messages
    while len(received) < 3:
        received += next(stream).received_messages
    assert len(received) == 3, "never more outstanding than max_outstanding_messages"
    # A heartbeat is answered promptly, with properties and no messages (no room).
    t0 = time.monotonic()
    later.put(types.StreamingPullRequest())
    pong = next(stream)
    assert time.monotonic() - t0 < 5
    assert list(pong.received_messages) == []
    assert pong.subscription_properties.message_ordering_enabled
    # An ack frees room: more messages flow.
    later.put(types.StreamingPullRequest(ack_ids=[received[0].ack_id]))
    more: list[types.ReceivedMessage] = []
    while not more:
        more = list(next(stream).received_messages)
    assert len(more) == 1
    later.put(None)


def test_run_ahead_lets_a_stream_hold_that_many_times_what_its_client_asked(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    """--stream-run-ahead 2.5 and max_outstanding_messages=4: 10 out and no more until acks."""
    gw = start_gateway("--stream-run-ahead", "2.5")
    pub, _, topic, subscription = topic_and_subscription(gw, names)
    for f in [pub.publish(topic, f"m{i}".encode()) for i in range(30)]:
        f.result(timeout=60)
    later: queue.Queue[types.StreamingPullRequest | None] = queue.Queue()
    first = types.StreamingPullRequest(
        subscription=subscription, stream_ack_deadline_seconds=60, max_outstanding_messages=4
    )
    stream = _gapic(gw).streaming_pull(requests=_requests(first, later), timeout=60)
    try:
        received: list[types.ReceivedMessage] = []
        while len(received) < 10:
            received += next(stream).received_messages
        time.sleep(1.0)  # time to send more, if it would
        later.put(types.StreamingPullRequest())  # a ping: answered with what is ready, if anything
        received += next(stream).received_messages
        assert len(received) == 10, "2.5 x 4 outstanding, no more"
        later.put(types.StreamingPullRequest(ack_ids=[m.ack_id for m in received[:3]]))
        more: list[types.ReceivedMessage] = []
        while len(more) < 3:
            more += next(stream).received_messages
        assert len(more) == 3
    finally:
        later.put(None)
        stream.cancel()


def test_the_python_subscriber_under_run_ahead_keeps_its_flow_control_and_gets_each_once(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    """The stream holds 3 x 10 while the client's handlers work on at most 10: the surplus waits
    in the client under leases it keeps, and every message arrives once."""
    gw = start_gateway("--stream-run-ahead", "3")
    pub, sub, topic, subscription = topic_and_subscription(gw, names)
    n = 300
    for f in [pub.publish(topic, f"m{i}".encode()) for i in range(n)]:
        f.result(timeout=60)
    got, most = _collect(
        sub, subscription, n, timeout=90, flow=pubsub_v1.types.FlowControl(max_messages=10), delay=0.01
    )
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(n))
    assert most <= 10


def test_stream_validation(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    _, _, _, subscription = topic_and_subscription(shared_gateway, names)
    gapic = _gapic(shared_gateway)
    bad_first = types.StreamingPullRequest(subscription=subscription)  # no deadline
    with pytest.raises(exceptions.InvalidArgument, match="stream_ack_deadline_seconds"):
        next(gapic.streaming_pull(requests=iter([bad_first]), timeout=30))
    later: queue.Queue[types.StreamingPullRequest | None] = queue.Queue()
    first = types.StreamingPullRequest(subscription=subscription, stream_ack_deadline_seconds=30)
    later.put(types.StreamingPullRequest(modify_deadline_ack_ids=["a", "b"], modify_deadline_seconds=[10]))
    with pytest.raises(exceptions.InvalidArgument, match="same length"):
        for _ in gapic.streaming_pull(requests=_requests(first, later), timeout=30):
            pass


def test_subscriber_survives_a_gateway_restart(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway()
    pub, sub, topic, subscription = topic_and_subscription(gw, names)
    got: list[bytes] = []
    lock = threading.Lock()

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        with lock:
            got.append(message.data)
        message.ack()

    future = sub.subscribe(subscription, callback)
    try:
        pub.publish(topic, b"before").result(timeout=30)
        deadline = time.monotonic() + 30
        while b"before" not in got and time.monotonic() < deadline:
            time.sleep(0.1)
        gw.terminate()  # graceful: streams end with UNAVAILABLE, the client reconnects
        port = gw.address.rsplit(":", 1)[1]
        gw.extra += ["--port", port]
        gw.start()
        pub2, _ = clients(gw)
        pub2.publish(topic, b"after").result(timeout=30)
        deadline = time.monotonic() + 60
        while b"after" not in got and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not future.done(), "the subscriber keeps running across the restart"
    finally:
        future.cancel()
    assert b"before" in got and b"after" in got


def test_two_gateways_share_one_subscription_through_streams(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    """A high-level subscriber on each of two gateway processes: every message arrives, both
    processes serve a share, and no message is out to both streams at once."""
    prefix = f"two{uuid.uuid4().hex[:6]}"
    a, b = start_gateway(prefix=prefix), start_gateway(prefix=prefix)
    pub, sub_a, topic, subscription = topic_and_subscription(a, names, ack_deadline_seconds=60)
    _, sub_b = clients(b)
    await_subscription(sub_b, subscription)
    n = 600
    spans: dict[str, list[tuple[bytes, float, float]]] = {"a": [], "b": []}
    lock = threading.Lock()

    def on_message(label: str) -> Callable[[pubsub_v1.subscriber.message.Message], None]:
        def callback(message: pubsub_v1.subscriber.message.Message) -> None:
            t0 = time.monotonic()
            time.sleep(0.01)
            message.ack()
            with lock:
                spans[label].append((message.data, t0, time.monotonic()))

        return callback

    futures = [sub_a.subscribe(subscription, on_message("a")), sub_b.subscribe(subscription, on_message("b"))]
    try:
        for batch in range(12):  # a trickle, so the group's rebalance happens while messages flow
            for f in [pub.publish(topic, f"m{i}".encode()) for i in range(batch * 50, batch * 50 + 50)]:
                f.result(timeout=60)
            time.sleep(0.5)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len({d for v in spans.values() for d, _, _ in v}) >= n:
                    break
            time.sleep(0.1)
        time.sleep(1.0)  # anything delivered twice would show up now
    finally:
        for f in futures:
            f.cancel()
    everything = spans["a"] + spans["b"]
    assert {d for d, _, _ in everything} == {f"m{i}".encode() for i in range(n)}, "none lost"
    assert spans["a"] and spans["b"], "both processes served the subscription"
    assert_never_out_twice(everything)
