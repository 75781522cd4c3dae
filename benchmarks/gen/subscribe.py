"""Receiving generators: a raw confluent-kafka group consumer, and the gateway's Pull+Acknowledge,
StreamingPull (acks on the same stream) and the official Python subscriber."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import grpc

from benchmarks.gen.common import add_shared, percentiles, result, wait_until, watermarks

ACK_GRACE_S = 0.2  # a closing stream's last acks
STOP_CHECK_S = 0.02  # how often a waiting Pull checks whether the run has all it wanted


def raw_consume(args: dict[str, Any]) -> dict[str, Any]:
    """Read this process's share of the topic's partitions (`index` of `procs`, as a group would
    split them) from the beginning, committing to `group` after every batch, until the records
    there when it started (at most `max_count`) are read. The window starts at start_at, when the
    partitions are assigned; connecting and looking up the partitions happen before."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": args["bootstrap"],
            "group.id": args["group"],
            "enable.auto.commit": False,
        }
    )
    topic = args["topic"]
    parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    mine = parts[args.get("index", 0) :: args.get("procs", 1)]
    tps = [confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in mine]
    marks = [watermarks(consumer, tp) for tp in tps]
    target = min(args.get("max_count", 1 << 62), sum(high - low for low, high in marks))
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    consumer.assign(tps)
    count, t1 = 0, t0
    while count < target and time.time() < t0 + args.get("deadline_s", 300.0):
        first = consumer.poll(0.5)  # then what is already there: consume(n) would wait for n
        batch = [first, *consumer.consume(499, timeout=0)] if first is not None else []
        real = [m for m in batch if m.error() is None]
        if real:
            count += len(real)
            consumer.commit(asynchronous=True)
            t1 = time.time()
    consumer.close()
    return result(count, t0, t1, cpu0)


def subscriber_stubs(address: str) -> tuple[grpc.Channel, Any, Any]:
    from benchmarks.api import GRPC_OPTIONS
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
    from gateway._pb.google.pubsub.v1 import pubsub_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(address, options=GRPC_OPTIONS)
    grpc.channel_ready_future(channel).result(timeout=30)
    return channel, pb, pb_grpc.SubscriberStub(channel)


def gw_pull_ack(args: dict[str, Any]) -> dict[str, Any]:
    """Pull(max_messages) and Acknowledge each response's ids in one call (sent while the next
    Pull runs), until all generators together received `expected` or `idle_pulls` pulls in a
    row came back empty. With `cancel` (the default) a Pull still waiting then is cancelled;
    without, it is waited for and what it brings is acked too (nothing stays leased)."""
    channel, pb, stub = subscriber_stubs(args["address"])
    sub, expected = args["subscription"], args.get("expected", 1 << 62)
    request = pb.PullRequest(subscription=sub, max_messages=args.get("max_messages", 1000))
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    end = t0 + args["deadline_s"]
    count = empty = 0
    t1, ack = t0, None
    pull_s: list[float] = []
    while empty < args.get("idle_pulls", 2) and add_shared(0) < expected and time.time() < end:
        started = time.time()
        resp = pull_unless_done(
            stub, request, args.get("pull_timeout", 2.0), expected if args.get("cancel", True) else 1 << 62
        )
        if ack is not None:
            ack.result()
            ack = None
        if resp is None or not resp.received_messages:
            empty += 1
            continue
        empty = 0
        pull_s.append(time.time() - started)
        count += len(resp.received_messages)
        add_shared(len(resp.received_messages))
        ids = [m.ack_id for m in resp.received_messages]
        ack = stub.Acknowledge.future(pb.AcknowledgeRequest(subscription=sub, ack_ids=ids), timeout=60)
        t1 = time.time()
    if ack is not None:
        ack.result()
        t1 = time.time()
    channel.close()
    return result(
        count,
        t0,
        t1,
        cpu0,
        pulls=len(pull_s),
        pull_p50_ms=percentiles(pull_s)["p50_ms"],
        pull_p99_ms=percentiles(pull_s)["p99_ms"],
    )


def pull_unless_done(stub: Any, request: Any, timeout: float, expected: int) -> Any | None:
    """One Pull; None if it ended without messages, or was cancelled because the generators of
    this run together received `expected` meanwhile (no waiting out an idle Pull at the end)."""
    call = stub.Pull.future(request, timeout=timeout)
    while True:
        try:
            return call.result(timeout=STOP_CHECK_S)
        except grpc.FutureTimeoutError:
            if add_shared(0) >= expected:
                call.cancel()
                return None
        except grpc.RpcError as err:
            if err.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
                return None
            raise


def requests_from(first: Any, later: queue.SimpleQueue[Any]) -> Iterator[Any]:
    yield first
    while (item := later.get()) is not None:
        yield item


def gw_streaming(args: dict[str, Any]) -> dict[str, Any]:
    """One StreamingPull stream; every response's ids are acked in the next request on it. Ends
    after `idle_s` without a message."""
    channel, pb, stub = subscriber_stubs(args["address"])
    later: queue.SimpleQueue[Any] = queue.SimpleQueue()
    first = pb.StreamingPullRequest(
        subscription=args["subscription"],
        stream_ack_deadline_seconds=60,
        max_outstanding_messages=args.get("max_outstanding", 1000),
    )
    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    stream = stub.StreamingPull(requests_from(first, later), timeout=args["deadline_s"])
    last = [t0 + args.get("grace_s", 5.0)]  # the first message may take a moment
    stop = threading.Event()
    watch = (stream, last, args.get("idle_s", 3.0), args.get("expected", 1 << 62), stop)
    threading.Thread(target=_watchdog, args=watch, daemon=True).start()
    count = 0
    try:
        for resp in stream:
            if resp.received_messages:
                count += len(resp.received_messages)
                later.put(pb.StreamingPullRequest(ack_ids=[m.ack_id for m in resp.received_messages]))
                last[0] = time.time()
                if add_shared(len(resp.received_messages)) >= args.get("expected", 1 << 62):
                    time.sleep(ACK_GRACE_S)  # let the last acks go out before the stream closes
                    break
    except grpc.RpcError as err:
        if err.code() not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise
    finally:
        stop.set()
        later.put(None)
    channel.close()
    return result(count, t0, last[0] if count else t0, cpu0)


def _watchdog(stream: Any, last: list[float], idle_s: float, expected: int, stop: threading.Event) -> None:
    """End the stream after idle_s without messages, or once all streams together have all."""
    while not stop.wait(0.1):
        if time.time() - last[0] > idle_s or add_shared(0) >= expected:
            stream.cancel()
            return


def gw_official(args: dict[str, Any]) -> dict[str, Any]:
    """The official subscriber, in a fresh process: this one has imported the gateway's own
    generated protos, which clash with the client's in protobuf's default descriptor pool."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gen.official", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=args["deadline_s"] + 60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the official subscriber failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out
