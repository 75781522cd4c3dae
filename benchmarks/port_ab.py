"""What the shared port's pump costs gRPC, in one gateway process: the same calls alternate,
block by block, between the shared port (pumped) and the gRPC server's own unix socket behind
it (direct), so both see the same machine load.

    python -m benchmarks.port_ab --kafka-bootstrap HOST:PORT [--out FILE]

Each round, in alternating order: unary latency (300 sequential GetTopic calls), Publish
throughput (batches of 100 1-KiB messages, 16 calls in flight, 3 s) and StreamingPull
throughput (one stream draining 30,000 messages of a subscription of its own, acking on the
stream), on one connection each way. Gateway CPU per message is read from /proc (the pump's
threads are in the gateway process). Ratios are shared / direct, the median of the rounds'.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import grpc

from benchmarks.processes import GatewayProc
from gateway._pb.google.pubsub.v1 import pubsub_pb2, pubsub_pb2_grpc


def _unix_socket_of(pid: int) -> str:
    """The path of the gRPC server's unix socket, among the sockets the process holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    with open("/proc/net/unix") as table:
        for line in table:
            fields = line.split()
            if len(fields) >= 8 and fields[6] in inodes and fields[7].endswith("/grpc.sock"):
                return fields[7]
    raise RuntimeError("no gRPC unix socket found: is the gateway on a shared port?")


def _latency_block(stub: Any, topic: str, calls: int) -> list[float]:
    out = []
    request = pubsub_pb2.GetTopicRequest(topic=topic)
    for _ in range(calls):
        started = time.perf_counter()
        stub.GetTopic(request, timeout=10)
        out.append((time.perf_counter() - started) * 1000)
    return out


def _publish_block(stub: Any, topic: str, seconds: float, in_flight: int = 16) -> float:
    request = pubsub_pb2.PublishRequest(
        topic=topic, messages=[pubsub_pb2.PubsubMessage(data=os.urandom(1024)) for _ in range(100)]
    )
    room = threading.Semaphore(in_flight)
    done = [0]
    failed: list[BaseException] = []

    def finished(call: Any) -> None:
        if call.exception() is not None:
            failed.append(call.exception())
        else:
            done[0] += 100
        room.release()

    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        room.acquire()
        stub.Publish.future(request, timeout=30).add_done_callback(finished)
    for _ in range(in_flight):  # the last calls in flight
        room.acquire()
    if failed:
        raise RuntimeError(f"publish failed: {failed[0]}")
    return done[0] / (time.perf_counter() - started)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _drain(subscriber: Any, subscription: str, count: int) -> float:
    """Read `count` messages on one StreamingPull, acking on the stream: messages per second."""
    requests: queue.Queue[pubsub_pb2.StreamingPullRequest | None] = queue.Queue()
    requests.put(pubsub_pb2.StreamingPullRequest(subscription=subscription, stream_ack_deadline_seconds=60))

    def feed() -> Any:
        while (item := requests.get()) is not None:
            yield item

    got = 0
    started = time.perf_counter()
    call = subscriber.StreamingPull(feed(), timeout=300)
    for response in call:
        ids = [m.ack_id for m in response.received_messages]
        got += len(ids)
        requests.put(pubsub_pb2.StreamingPullRequest(ack_ids=ids))
        if got >= count:
            break
    elapsed = time.perf_counter() - started
    requests.put(None)
    call.cancel()
    return got / elapsed


def _fill(stub: Any, topic: str, count: int) -> None:
    request = pubsub_pb2.PublishRequest(
        topic=topic, messages=[pubsub_pb2.PubsubMessage(data=os.urandom(1024)) for _ in range(1000)]
    )
    calls = [stub.Publish.future(request, timeout=60) for _ in range(count // 1000)]
    for call in calls:
        call.result()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kafka-bootstrap", required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--drain", type=int, default=30_000, help="messages per StreamingPull drain")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    modes = ("direct", "shared")
    lat: dict[str, list[float]] = {k: [] for k in modes}
    rates: dict[str, list[float]] = {k: [] for k in modes}
    publish_cpu: dict[str, list[float]] = {k: [] for k in modes}
    drains: dict[str, list[float]] = {k: [] for k in modes}
    drain_cpu: dict[str, list[float]] = {k: [] for k in modes}
    with tempfile.TemporaryDirectory() as logs:
        gw = GatewayProc(
            args.kafka_bootstrap, f"ab{uuid.uuid4().hex[:6]}", Path(logs) / "gw.log", "--rest-port", "shared"
        )
        try:
            paths = {"shared": gw.address, "direct": "unix:" + _unix_socket_of(gw.pid)}
            channels = {k: grpc.insecure_channel(v) for k, v in paths.items()}
            publishers = {k: pubsub_pb2_grpc.PublisherStub(c) for k, c in channels.items()}
            subscribers = {k: pubsub_pb2_grpc.SubscriberStub(c) for k, c in channels.items()}
            topic = f"projects/bench/topics/ab-{uuid.uuid4().hex[:8]}"
            backlog = f"projects/bench/topics/abs-{uuid.uuid4().hex[:8]}"
            for name in (topic, backlog):
                publishers["direct"].CreateTopic(pubsub_pb2.Topic(name=name), timeout=30)
            # One subscription per way, kept: its runner is warm after the first drain.
            subs = {k: f"projects/bench/subscriptions/ab-{k}-{uuid.uuid4().hex[:8]}" for k in modes}
            for name in subs.values():
                subscribers["direct"].CreateSubscription(
                    pubsub_pb2.Subscription(name=name, topic=backlog), timeout=30
                )
            _fill(publishers["direct"], backlog, 2000)
            for k in modes:  # warm both connections and runners
                _latency_block(publishers[k], topic, 50)
                _publish_block(publishers[k], topic, 1.0)
                _drain(subscribers[k], subs[k], 2000)
            for i in range(args.rounds):
                order = modes if i % 2 == 0 else modes[::-1]
                for k in order:
                    lat[k] += _latency_block(publishers[k], topic, 300)
                for k in order:
                    cpu = _cpu_seconds(gw.pid)
                    rate = _publish_block(publishers[k], topic, 3.0)
                    rates[k].append(rate)
                    publish_cpu[k].append((_cpu_seconds(gw.pid) - cpu) / (rate * 3.0) * 1e6)
                _fill(publishers["direct"], backlog, args.drain)
                for k in order:
                    cpu = _cpu_seconds(gw.pid)
                    drains[k].append(_drain(subscribers[k], subs[k], args.drain))
                    drain_cpu[k].append((_cpu_seconds(gw.pid) - cpu) / args.drain * 1e6)
                print(
                    f"round {i + 1}: publish "
                    + ", ".join(f"{k} {rates[k][-1]:.0f}" for k in order)
                    + " msg/s; StreamingPull "
                    + ", ".join(f"{k} {drains[k][-1]:.0f}" for k in order)
                    + " msg/s",
                    flush=True,
                )
        finally:
            gw.stop()
    figures = {
        "publish_msgs_per_s": rates,
        "publish_gw_cpu_us_per_msg": publish_cpu,
        "streaming_pull_msgs_per_s": drains,
        "streaming_pull_gw_cpu_us_per_msg": drain_cpu,
    }
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    result: dict[str, Any] = {
        "command": "python -m benchmarks.port_ab " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "commit": commit.stdout.strip(),
        "cores": os.cpu_count(),
        "rounds": args.rounds,
        "drain_messages": args.drain,
        "get_topic_ms": {
            k: {
                "p50": round(statistics.median(lat[k]), 3),
                "p99": round(_pct(lat[k], 0.99), 3),
                "calls": len(lat[k]),
            }
            for k in modes
        },
        "get_topic_shared_over_direct": {
            q: round(_pct(lat["shared"], p) / _pct(lat["direct"], p), 3)
            for q, p in (("p50", 0.5), ("p99", 0.99))
        },
    }
    for name, values in figures.items():
        result[name] = {
            "direct": [round(v, 1) for v in values["direct"]],
            "shared": [round(v, 1) for v in values["shared"]],
            "median_direct": round(statistics.median(values["direct"]), 1),
            "median_shared": round(statistics.median(values["shared"]), 1),
            "shared_over_direct_paired_median": round(
                statistics.median(s / d for s, d in zip(values["shared"], values["direct"], strict=True)), 3
            ),
        }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
