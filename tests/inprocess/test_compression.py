"""gzip-compressed requests, as the official clients send them when asked (Java's
`setEnableCompression`, or any client on a channel made with compression): the gateway reads
them like any other, and what it delivers is what was published."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import grpc
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

from tests.inprocess.conftest import InProcessGateway


def test_compressed_publishes_arrive_whole(gw: InProcessGateway, names: Callable[..., str]) -> None:
    _, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    channel = grpc.insecure_channel(gw.address, compression=grpc.Compression.Gzip)
    publisher = pubsub_v1.PublisherClient(transport=PublisherGrpcTransport(channel=channel))
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=sub, topic=topic)
    sent = {os.urandom(8).hex().encode() * 200: str(i) for i in range(20)}  # 3.2 KB, compressible
    futures = [publisher.publish(topic, data, n=n) for data, n in sent.items()]
    ids = [f.result(30) for f in futures]
    assert len(set(ids)) == len(sent)
    got: dict[bytes, str] = {}
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        response = subscriber.pull(subscription=sub, max_messages=50, timeout=10)
        got.update({m.message.data: m.message.attributes["n"] for m in response.received_messages})
        if response.received_messages:
            subscriber.acknowledge(subscription=sub, ack_ids=[m.ack_id for m in response.received_messages])
    assert got == sent
