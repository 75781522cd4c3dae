"""Official client helpers for end-to-end tests."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import grpc
from google.api_core.exceptions import NotFound
from google.cloud import pubsub_v1
from google.pubsub_v1 import types
from google.pubsub_v1.services.publisher import PublisherClient as PublisherGapic
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

from tests.gateways import GatewayProcess, emulator_env


def clients(gw: GatewayProcess) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]:
    with emulator_env(gw.address):
        return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()


def topic_and_subscription(
    gw: GatewayProcess, names: Callable[[str], str], **fields: object
) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient, str, str]:
    """Clients, and a new topic with a subscription to it (`fields`: more of the subscription)."""
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(request={"name": subscription, "topic": topic, **fields})
    return pub, sub, topic, subscription


def dead_lettering(
    sub: pubsub_v1.SubscriberClient, subscription: str, topic: str, dead: str, attempts: int = 5
) -> None:
    """Create `subscription` to `topic`, sending messages to `dead` after `attempts` deliveries."""
    policy = {"dead_letter_topic": dead, "max_delivery_attempts": attempts}
    sub.create_subscription(request={"name": subscription, "topic": topic, "dead_letter_policy": policy})


def exactly_once_backlog(
    pub: pubsub_v1.PublisherClient, sub: pubsub_v1.SubscriberClient, names: Callable[[str], str], count: int
) -> tuple[str, str]:
    """A new topic, an exactly-once subscription to it (10 s deadline), and `count` messages
    m0, m1, ... published to it."""
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "ack_deadline_seconds": 10,
            "enable_exactly_once_delivery": True,
        }
    )
    for future in [pub.publish(topic, f"m{i}".encode()) for i in range(count)]:
        future.result(timeout=30)
    return topic, subscription


def gapic_publisher(gw: GatewayProcess) -> PublisherGapic:
    """The official low-level publisher (one Publish RPC per call), on an insecure channel."""
    channel = grpc.insecure_channel(gw.address)
    return PublisherGapic(transport=PublisherGrpcTransport(channel=channel))


def pull_until(
    sub: pubsub_v1.SubscriberClient,
    subscription: str,
    count: int,
    timeout: float = 30.0,
    keep: Callable[[types.ReceivedMessage], bool] = lambda _: True,
    max_messages: int = 100,
) -> list[types.ReceivedMessage]:
    """Pull (without acking) until `count` messages arrived or `timeout` passed."""
    got: list[types.ReceivedMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        resp = sub.pull(subscription=subscription, max_messages=max_messages, timeout=10)
        got.extend(m for m in resp.received_messages if keep(m))
    return got


def pull_nothing(sub: pubsub_v1.SubscriberClient, subscription: str, seconds: float) -> list[str]:
    """Pull for `seconds`; returns the data of anything that arrived (expected: nothing)."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        resp = sub.pull(subscription=subscription, max_messages=100, timeout=10)
        seen.extend(m.message.data.decode() for m in resp.received_messages)
    return seen


def await_subscription(sub: pubsub_v1.SubscriberClient, subscription: str, seconds: float = 5.0) -> None:
    """Wait until a gateway process sees a subscription another one created (resources reach
    every process within about a second)."""
    await_found(lambda: sub.get_subscription(subscription=subscription), seconds)


def await_found(get: Callable[[], object], seconds: float = 5.0) -> None:
    """Call `get` (a Get of a resource another process created) until it stops answering NOT_FOUND."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            get()
            return
        except NotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def assert_never_out_twice(spans: list[tuple[bytes, float, float]]) -> None:
    """(data, received, acked) per delivery: any repeat of a message began after the earlier
    delivery was acked, so no message was leased to two clients at once."""
    by_data: dict[bytes, list[tuple[float, float]]] = {}
    for data, start, end in spans:
        by_data.setdefault(data, []).append((start, end))
    for data, times in by_data.items():
        times.sort()
        for (_, end), (start, _) in itertools.pairwise(times):
            assert start >= end, f"{data!r} was out to two clients at once"
