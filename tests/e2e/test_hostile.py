"""Calls a careless or hostile client can make: refused with INVALID_ARGUMENT, or ignored, and
never changing what other clients receive.

Each test checks the status the official client sees and that no state changed: no topic is
stored, no message is acknowledged by an ack id nobody was given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.protobuf import timestamp_pb2

from gateway.translate import names as gw_names
from tests.e2e.clients import clients, pull_until
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration


def test_kafka_and_gateway_topics_cannot_be_adopted_or_derived(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, _ = clients(shared_gateway)
    prefix = shared_gateway.prefix
    reserved = [
        "__consumer_offsets",
        "__transaction_state",
        gw_names.internal_topic(prefix, "pushkeys"),
        gw_names.internal_topic(prefix, "resources"),
        gw_names.internal_topic(prefix, "acks", "projects/p/subscriptions/s", "0123abcd"),
    ]
    for kafka in reserved:
        topic = names("topics")
        with pytest.raises(exceptions.InvalidArgument, match="belong to Kafka or to the gateway"):
            pub.create_topic(request={"name": topic, "labels": {"kafka-topic": kafka}})
        with pytest.raises(exceptions.NotFound):  # nothing was stored
            pub.get_topic(topic=topic)


def _one_partition_subscription(gw: GatewayProcess, names: Callable[[str], str]) -> tuple[str, str]:
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "1"}})
    sub.create_subscription(request={"name": subscription, "topic": topic, "ack_deadline_seconds": 60})
    return topic, subscription


@pytest.mark.parametrize("exactly_once", [False, True])
def test_made_up_ack_ids_acknowledge_nothing(
    shared_gateway: GatewayProcess, names: Callable[[str], str], exactly_once: bool
) -> None:
    pub, sub = clients(shared_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "1"}})
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "ack_deadline_seconds": 60,
            "enable_exactly_once_delivery": exactly_once,
        }
    )
    pub.publish(topic, b"first").result(timeout=30)
    (got,) = pull_until(sub, subscription, 1)
    tag, partition, offset, generation = got.ack_id.split("-")
    at = int(offset, 16)
    forged = [f"{tag}-{partition}-{o:x}-{generation}" for o in range(at + 1, at + 2000)]  # the future
    forged.append(f"{tag}-{partition}-{at:x}-{int(generation, 16) + 1:x}")  # another delivery's
    outcomes = [_acknowledge(sub, subscription, forged[i : i + 500]) for i in range(0, len(forged), 500)]
    if exactly_once:  # reported per id, as many as fit in the trailer; retried for the rest
        assert {type(e) for e in outcomes} <= {exceptions.InvalidArgument, exceptions.Aborted}, outcomes
        assert all("ack IDs failed" in str(e) for e in outcomes), outcomes
    else:  # ignored
        assert outcomes == [None] * len(outcomes)
    later = [f"later-{i}" for i in range(5)]
    for data in later:
        pub.publish(topic, data.encode()).result(timeout=30)
    received = pull_until(sub, subscription, 5)
    assert sorted(m.message.data.decode() for m in received) == later
    # The message really delivered is still leased to its puller: a nack brings it back.
    sub.modify_ack_deadline(subscription=subscription, ack_ids=[got.ack_id], ack_deadline_seconds=0)
    again = pull_until(sub, subscription, 1, keep=lambda m: m.message.data == b"first")
    assert [m.message.data for m in again] == [b"first"]


def _acknowledge(
    sub: pubsub_v1.SubscriberClient, subscription: str, ack_ids: list[str]
) -> exceptions.GoogleAPICallError | None:
    try:
        sub.acknowledge(subscription=subscription, ack_ids=ack_ids, timeout=30)
    except exceptions.GoogleAPICallError as exc:
        return exc
    return None


def test_an_ack_id_naming_no_partition_is_invalid_at_once(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub = clients(shared_gateway)
    topic, subscription = _one_partition_subscription(shared_gateway, names)
    pub.publish(topic, b"x").result(timeout=30)
    (got,) = pull_until(sub, subscription, 1)
    tag, _, offset, generation = got.ack_id.split("-")
    started = time.monotonic()
    with pytest.raises(exceptions.InvalidArgument, match="names no partition"):
        sub.acknowledge(
            subscription=subscription, ack_ids=[f"{tag}-7fffffff-{offset}-{generation}"], timeout=30
        )
    assert time.monotonic() - started < 10


def test_seek_before_1970_keeps_the_backlog_and_bad_times_are_invalid(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub = clients(shared_gateway)
    topic, subscription = _one_partition_subscription(shared_gateway, names)
    for i in range(3):
        pub.publish(topic, f"m{i}".encode()).result(timeout=30)
    for seconds, nanos in ((-1, 999_000_000), (-1, 997_000_000), (-1, 0), (-62_135_596_800, 0)):
        sub.seek(
            request={
                "subscription": subscription,
                "time": timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos),
            }
        )
    got = pull_until(sub, subscription, 3)
    assert sorted(m.message.data for m in got) == [b"m0", b"m1", b"m2"]
    for seconds, nanos in ((2**62, 0), (0, -1), (0, 1_000_000_000), (-62_135_596_801, 0)):
        with pytest.raises(exceptions.InvalidArgument, match="Timestamp"):
            sub.seek(
                request={
                    "subscription": subscription,
                    "time": timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos),
                },
                timeout=30,
            )


def _big_messages(
    gw: GatewayProcess,
    names: Callable[[str], str],
    count: int,
    size: int,
) -> tuple[pubsub_v1.SubscriberClient, str]:
    """A subscription (dead-letter policy of 5) holding `count` messages of `size` bytes, and
    a runner that has fetched them."""
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    dead = topic + "-dead"
    pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "1"}})
    pub.create_topic(name=dead)
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "ack_deadline_seconds": 60,
            "dead_letter_policy": {"dead_letter_topic": dead, "max_delivery_attempts": 5},
        }
    )
    assert sub.pull(subscription=subscription, max_messages=10, timeout=10).received_messages == []
    for i in range(count):
        pub.publish(topic, bytes([i]) * size).result(timeout=60)
    time.sleep(2)  # the runner (started by the pull above) fetches them all
    return sub, subscription


def test_pull_replies_are_cut_to_what_the_client_takes_without_spending_attempts(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """The official clients keep gRPC's 4 MiB receive limit against an emulator host: three
    1.5 MB messages do not fit one response. A pull of 10 gets two, the next the third, each as
    its first delivery (a dead-letter policy counts them)."""
    size = 1_500_000
    sub, subscription = _big_messages(shared_gateway, names, 3, size)
    sizes: list[int] = []
    got: list[pubsub_v1.types.ReceivedMessage] = []
    deadline = time.monotonic() + 60
    while len(got) < 3 and time.monotonic() < deadline:  # nothing acked: each pull gets the rest
        resp = sub.pull(subscription=subscription, max_messages=10, timeout=20)
        sizes.append(len(resp.received_messages))
        got.extend(resp.received_messages)
    assert sizes[0] == 2 and max(sizes) <= 2, f"two fit a response, three do not: {sizes}"
    assert sorted((m.message.data[:1], len(m.message.data)) for m in got) == [
        (bytes([i]), size) for i in range(3)
    ]
    assert [m.delivery_attempt for m in got] == [1, 1, 1], "none spent an attempt on a reply too large"
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])


def test_streaming_pull_responses_fit_the_client_too(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """Eight 1.5 MB messages through the official streaming subscriber: all arrive, once each,
    on the first attempt (a response over 4 MiB would break the client's stream)."""
    size = 1_500_000
    sub, subscription = _big_messages(shared_gateway, names, 8, size)
    got: dict[bytes, int] = {}
    done = threading.Event()

    def receive(message: pubsub_v1.subscriber.message.Message) -> None:
        got[message.data[:1]] = message.delivery_attempt or 0
        message.ack()
        if len(got) == 8:
            done.set()

    future = sub.subscribe(subscription, receive)
    try:
        assert done.wait(60), f"received {len(got)} of 8"
    finally:
        future.cancel()
        future.result(timeout=30)
    assert got == {bytes([i]): 1 for i in range(8)}
