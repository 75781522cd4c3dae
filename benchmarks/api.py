"""Lean gRPC access to the gateway (generated stubs only, never google.cloud.pubsub), for the
benchmark's own set-up calls: topics, subscriptions, warm-up, the StreamingPull probe."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from benchmarks.gen.common import payload
from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway._pb.google.pubsub.v1 import pubsub_pb2_grpc as pb_grpc

GRPC_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
ACK_DEADLINE = 60
CREATE_RETRIES = 8
RETRIED: list[str] = []  # CreateSubscription calls answered UNAVAILABLE (then retried)


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=GRPC_OPTIONS)


class Api:
    def __init__(self, address: str) -> None:
        self.channel = channel(address)
        self.pub = pb_grpc.PublisherStub(self.channel)
        self.sub = pb_grpc.SubscriberStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def create_topic(self, name: str, partitions: int | None = None) -> None:
        labels = {"kafka-partitions": str(partitions)} if partitions else {}
        self.pub.CreateTopic(pb.Topic(name=name, labels=labels), timeout=60)

    def create_subscription(self, name: str, topic: str) -> None:
        """Retries UNAVAILABLE, as the official clients do: right after CreateTopic the gateway
        may find no partition leaders yet when it reads the topic's end offsets."""
        request = pb.Subscription(name=name, topic=topic, ack_deadline_seconds=ACK_DEADLINE)
        for attempt in range(CREATE_RETRIES):
            try:
                self.sub.CreateSubscription(request, timeout=60)
                return
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE or attempt == CREATE_RETRIES - 1:
                    raise
                RETRIED.append(f"{name}: {err.details()}")
                time.sleep(0.2 * (attempt + 1))

    def delete_subscription(self, name: str) -> None:
        self.sub.DeleteSubscription(pb.DeleteSubscriptionRequest(subscription=name), timeout=30)

    def delete(self, topic: str, subscriptions: list[str]) -> None:
        """Best effort: the run's results do not depend on it."""
        for sub in subscriptions:
            try:
                self.sub.DeleteSubscription(pb.DeleteSubscriptionRequest(subscription=sub), timeout=30)
            except grpc.RpcError:
                pass
        try:
            self.pub.DeleteTopic(pb.DeleteTopicRequest(topic=topic), timeout=30)
        except grpc.RpcError:
            pass

    def publish_one(self, topic: str) -> None:
        msg = pb.PubsubMessage(data=payload(time.time()))
        self.pub.Publish(pb.PublishRequest(topic=topic, messages=[msg]), timeout=30)

    def take_one(self, subscription: str, timeout: float = 60.0) -> float:
        """Pull until one message arrives and ack it (starts the subscription's runner and waits
        for its partitions); returns the seconds that took."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            resp = self.sub.Pull(pb.PullRequest(subscription=subscription, max_messages=1), timeout=5)
            if resp.received_messages:
                ids = [m.ack_id for m in resp.received_messages]
                self.sub.Acknowledge(
                    pb.AcknowledgeRequest(subscription=subscription, ack_ids=ids), timeout=30
                )
                return time.monotonic() - started
        raise TimeoutError(f"no message on {subscription} in {timeout:.0f}s")


def _stream_requests(first: Any, later: queue.SimpleQueue[Any]) -> Iterator[Any]:
    yield first
    while (item := later.get()) is not None:
        yield item


def probe_streaming_pull(api: Api, topic: str, subscription: str, timeout: float = 20.0) -> str:
    """'ok' if StreamingPull delivers a published message and takes its ack on the same stream."""
    api.publish_one(topic)
    later: queue.SimpleQueue[Any] = queue.SimpleQueue()
    first = pb.StreamingPullRequest(
        subscription=subscription, stream_ack_deadline_seconds=ACK_DEADLINE, max_outstanding_messages=1000
    )
    stream = api.sub.StreamingPull(_stream_requests(first, later), timeout=timeout)
    timer = threading.Timer(timeout, stream.cancel)
    timer.start()
    try:
        for resp in stream:
            if resp.received_messages:
                later.put(pb.StreamingPullRequest(ack_ids=[m.ack_id for m in resp.received_messages]))
                time.sleep(0.5)  # let the ack reach the gateway before the stream closes
                return "ok"
        return "not implemented (the stream ended without a message)"
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.UNIMPLEMENTED:
            return "not implemented"
        return f"not working ({err.code().name}: {err.details()})"
    finally:
        timer.cancel()
        later.put(None)
        stream.cancel()
