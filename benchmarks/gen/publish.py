"""Publishing generators: the raw confluent-kafka producer and the gateway's Publish RPC."""

from __future__ import annotations

import collections
import random
import time
from typing import Any

import confluent_kafka
import grpc

from benchmarks.gen.common import PRODUCER_CONFIG, payload, result, wait_until


def make_producer(bootstrap: str, **extra: Any) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG, **extra})


def produce_one(producer: confluent_kafka.Producer, topic: str, value: bytes, partition: int = -1) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=partition)
            return
        except BufferError:
            producer.poll(0.005)


def raw_produce(args: dict[str, Any]) -> dict[str, Any]:
    """Produce 1 KiB records for `seconds`, then wait for every delivery; count the delivered."""
    delivered = [0, 0]  # ok, failed

    def on_delivery(err: Any, _msg: Any) -> None:
        delivered[1 if err else 0] += 1

    producer = make_producer(args["bootstrap"], on_delivery=on_delivery)
    value = payload(0.0)
    producer.list_topics(args["topic"], timeout=30)
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    end = t0 + args["seconds"]
    while time.time() < end:
        for _ in range(1000):
            produce_one(producer, args["topic"], value)
        producer.poll(0)
    producer.flush(60)
    return result(delivered[0], t0, time.time(), cpu0, errors=delivered[1])


def raw_fill(args: dict[str, Any]) -> dict[str, Any]:
    """Produce exactly `count` records as fast as possible (a backlog, or a pre-publish), spread
    evenly over the partitions."""
    producer = make_producer(args["bootstrap"], **{"linger.ms": 20, "batch.size": 1_000_000})
    value = payload(0.0)
    parts = len(producer.list_topics(args["topic"], timeout=30).topics[args["topic"]].partitions)
    cpu0, t0 = time.process_time(), time.time()
    for i in range(args["count"]):
        produce_one(producer, args["topic"], value, i % parts)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    return result(args["count"] - left, t0, time.time(), cpu0)


def raw_runs(args: dict[str, Any]) -> dict[str, Any]:
    """The gateway's Publish pattern straight to Kafka, to tell its own cost from the pattern's:
    runs of `batch` records, each to one partition picked at random (as the gateway puts a
    Publish without ordering keys), its producer's linger and batch limits, `window` runs in
    flight, the next queued once the oldest is confirmed whole."""
    from gateway.kafka.producer import BATCH_BYTES, BATCH_RECORDS, LINGER_MS

    # message.max.bytes caps librdkafka's batches too: the gateway raises it, so its batch.size
    # is the cap
    same = {
        "linger.ms": LINGER_MS,
        "batch.size": BATCH_BYTES,
        "batch.num.messages": BATCH_RECORDS,
        "message.max.bytes": 12_000_000,
    }
    producer = make_producer(args["bootstrap"], **same)
    topic, batch = args["topic"], args["batch"]
    value = args.get("data") or payload(0.0)
    parts = len(producer.list_topics(topic, timeout=30).topics[topic].partitions)
    pick = random.Random(0).randrange
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    end = t0 + args["seconds"]
    inflight: collections.deque[list[int]] = collections.deque()  # [records unconfirmed, failed]
    count = errors = 0
    while time.time() < end or inflight:
        if time.time() < end and len(inflight) < args["window"]:
            run = [batch, 0]

            def on_delivery(err: Any, _msg: Any, run: list[int] = run) -> None:
                run[0] -= 1
                run[1] += err is not None

            records = [{"value": value, "callback": on_delivery} for _ in range(batch)]
            if producer.produce_batch(topic, records, partition=pick(parts)) != batch:
                raise RuntimeError("the local queue refused records: the window should not fill it")
            inflight.append(run)
            continue
        producer.poll(0.001)
        while inflight and inflight[0][0] == 0:
            failed = inflight.popleft()[1]
            count, errors = count + batch - failed, errors + failed
    return result(count, t0, time.time(), cpu0, errors=errors)


def gw_publish(args: dict[str, Any]) -> dict[str, Any]:
    """Publish batches of `batch` messages (of `data`, 1 KiB by default) for `seconds`, `window`
    RPCs in flight."""
    from benchmarks.api import GRPC_OPTIONS
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
    from gateway._pb.google.pubsub.v1 import pubsub_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(args["address"], options=GRPC_OPTIONS)
    stub = pb_grpc.PublisherStub(channel)
    msg = pb.PubsubMessage(data=args.get("data") or payload(0.0))
    request = pb.PublishRequest(topic=args["topic"], messages=[msg] * args["batch"])
    stub.GetTopic(pb.GetTopicRequest(topic=args["topic"]), timeout=30)  # connect before the start
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    end = t0 + args["seconds"]
    inflight: collections.deque[Any] = collections.deque()
    count = errors = 0
    while time.time() < end or inflight:
        if time.time() < end and len(inflight) < args["window"]:
            inflight.append(stub.Publish.future(request, timeout=60))
            continue
        try:
            count += len(inflight.popleft().result().message_ids)
        except grpc.RpcError:
            errors += 1
    t1 = time.time()
    channel.close()
    return result(count, t0, t1, cpu0, errors=errors)


def rest_publish(args: dict[str, Any]) -> dict[str, Any]:
    """The same as gw_publish, over REST: POST .../topics/T:publish with JSON bodies."""
    import asyncio
    import base64
    import json

    import aiohttp

    data = base64.b64encode(payload(0.0)).decode()
    body = json.dumps({"messages": [{"data": data}] * args["batch"]}).encode()
    url = f"http://{args['rest_address']}/v1/{args['topic']}:publish"

    async def run() -> dict[str, Any]:
        count = errors = 0
        async with aiohttp.ClientSession(headers={"content-type": "application/json"}) as http:
            async with http.get(f"http://{args['rest_address']}/v1/{args['topic']}") as resp:
                await resp.read()  # connect before the start
            wait_until(args["start_at"])
            cpu0, t0 = time.process_time(), time.time()
            end = t0 + args["seconds"]

            async def worker() -> None:
                nonlocal count, errors
                while time.time() < end:
                    async with http.post(url, data=body) as resp:
                        reply = await resp.json()
                    if resp.status == 200:
                        count += len(reply["messageIds"])
                    else:
                        errors += 1

            await asyncio.gather(*(worker() for _ in range(args["window"])))
            return result(count, t0, time.time(), cpu0, errors=errors)

    return asyncio.run(run())
