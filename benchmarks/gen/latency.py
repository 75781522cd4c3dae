"""Latency generators: a sender at a fixed rate stamping each message with its scheduled send
time, and a receiver measuring receive time minus that stamp (so a late sender is charged, not
hidden). Raw Kafka: producer -> assigned consumer. Gateway: Publish -> several Pull loops, or
Publish -> one StreamingPull stream (as the official subscriber receives)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import confluent_kafka
import grpc

from benchmarks.gen.common import add_shared, payload, percentiles, result, sent_at, wait_until, watermarks
from benchmarks.gen.publish import make_producer, produce_one
from benchmarks.gen.subscribe import pull_unless_done, requests_from, subscriber_stubs

TICK = 0.005  # the gateway sender batches what is due every 5 ms (librdkafka lingers 5 ms)


def _due(start: float, rate: float, sent: int, total: int) -> int:
    """How many of the scheduled messages should have been sent by now."""
    return min(total, int((time.time() - start) * rate) + 1) - sent


def raw_sender(args: dict[str, Any]) -> dict[str, Any]:
    producer = make_producer(args["bootstrap"])
    producer.list_topics(args["topic"], timeout=30)
    rate, total = args["rate"], int(args["rate"] * args["seconds"])
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    sent = 0
    while sent < total:
        for _ in range(_due(t0, rate, sent, total)):
            produce_one(producer, args["topic"], payload(t0 + sent / rate))
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    producer.flush(60)
    return result(sent, t0, time.time(), cpu0)


def raw_receiver(args: dict[str, Any]) -> dict[str, Any]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": args["bootstrap"], "group.id": args["group"], "enable.auto.commit": False}
    )
    meta = consumer.list_topics(args["topic"], timeout=30).topics[args["topic"]]
    tps = [confluent_kafka.TopicPartition(args["topic"], p) for p in meta.partitions]
    for tp in tps:
        tp.offset = watermarks(consumer, tp)[1]
    consumer.assign(tps)
    consumer.poll(0.2)
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    end = t0 + args["seconds"] + args.get("drain_s", 10.0)
    lat: list[float] = []
    last = t0
    while len(lat) < args["expected"] and time.time() < end:
        first = consumer.poll(0.05)
        if first is None:
            continue
        msgs = [first, *consumer.consume(1000, timeout=0)]
        now = last = time.time()
        lat.extend(now - sent_at(m.value() or b"") for m in msgs if m.error() is None)
    consumer.close()
    return result(len(lat), t0, last, cpu0, **percentiles(lat))


def gw_sender(args: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.api import GRPC_OPTIONS
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
    from gateway._pb.google.pubsub.v1 import pubsub_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(args["address"], options=GRPC_OPTIONS)
    stub = pb_grpc.PublisherStub(channel)
    stub.GetTopic(pb.GetTopicRequest(topic=args["topic"]), timeout=30)
    rate, total = args["rate"], int(args["rate"] * args["seconds"])
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    sent, futures = 0, []
    while sent < total:
        n = _due(t0, rate, sent, total)
        if n > 0:
            msgs = [pb.PubsubMessage(data=payload(t0 + (sent + i) / rate)) for i in range(n)]
            futures.append(
                stub.Publish.future(pb.PublishRequest(topic=args["topic"], messages=msgs), timeout=60)
            )
            sent += n
        time.sleep(max(0.0, t0 + sent / rate + TICK - time.time()))
    published = sum(len(f.result().message_ids) for f in futures)
    channel.close()
    return result(published, t0, time.time(), cpu0)


def gw_receiver(args: dict[str, Any]) -> dict[str, Any]:
    """`threads` Pull loops (max 1000 each), acking every response asynchronously."""
    channel, pb, stub = subscriber_stubs(args["address"])
    lat: list[float] = []
    acks: list[Any] = []
    last = [0.0]
    lock = threading.Lock()
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    end = t0 + args["seconds"] + args.get("drain_s", 10.0)

    def loop() -> None:
        request = pb.PullRequest(subscription=args["subscription"], max_messages=1000)
        while add_shared(0) < args["expected"] and time.time() < end:
            resp = pull_unless_done(stub, request, 2.0, args["expected"])
            now = time.time()
            if resp is None or not resp.received_messages:
                continue
            ids = [m.ack_id for m in resp.received_messages]
            ack = stub.Acknowledge.future(
                pb.AcknowledgeRequest(subscription=args["subscription"], ack_ids=ids), timeout=60
            )
            with lock:
                lat.extend(now - sent_at(m.message.data) for m in resp.received_messages)
                acks.append(ack)
                last[0] = max(last[0], now)
            add_shared(len(ids))

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(args.get("threads", 4))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for ack in acks:
        ack.exception()  # wait for it; a failed ack only means a later redelivery
    channel.close()
    return result(len(lat), t0, last[0] or t0, cpu0, **percentiles(lat))


def gw_stream_receiver(args: dict[str, Any]) -> dict[str, Any]:
    """One StreamingPull stream (max 1000 outstanding), acking each response on the stream."""
    channel, pb, stub = subscriber_stubs(args["address"])
    later: queue.SimpleQueue[Any] = queue.SimpleQueue()
    first = pb.StreamingPullRequest(
        subscription=args["subscription"], stream_ack_deadline_seconds=60, max_outstanding_messages=1000
    )
    stream = stub.StreamingPull(requests_from(first, later))
    lat: list[float] = []
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    end = t0 + args["seconds"] + args.get("drain_s", 10.0)
    timer = threading.Timer(end - time.time(), stream.cancel)
    timer.start()
    last = t0
    try:
        for resp in stream:
            now = time.time()
            if not resp.received_messages:
                continue
            later.put(pb.StreamingPullRequest(ack_ids=[m.ack_id for m in resp.received_messages]))
            lat.extend(now - sent_at(m.message.data) for m in resp.received_messages)
            last = now
            if len(lat) >= args["expected"]:
                time.sleep(0.2)  # let the last acks go out before the stream closes
                break
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.CANCELLED:
            raise
    finally:
        timer.cancel()
        later.put(None)
        stream.cancel()
    channel.close()
    return result(len(lat), t0, last, cpu0, **percentiles(lat))
