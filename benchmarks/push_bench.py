"""python -m benchmarks.push_bench [--quick] [--out FILE] [--kafka-bootstrap HOST:PORT]

Push delivery throughput: N messages are written into a topic while its subscriptions are in
pull mode; then each subscription is switched to push (ModifyPushConfig) towards a local aiohttp
endpoint, and the time until every message was acknowledged by the endpoint is measured.

- "acks at once": the endpoint answers 200 to everything.
- "fails 20%": the endpoint answers 500 to a random fifth of the requests; the ratio of requests
  to messages shows what the retries cost (1.25 would be the ideal).
- "bare push client": no gateway, no Kafka: one process POSTs push-shaped bodies of the same
  size to the same endpoint with the gateway's own HTTP client (gateway.push.sender) and as many
  requests in flight as its default connection pool (50), on uvloop as the gateway. It is the
  ceiling of the HTTP stack on this machine; `x_bare` = a case's rate / this one.
- "bare aiohttp ClientSession": the same through `aiohttp.ClientSession.post`, for reference
  (what the gateway's sender used before it wrote requests on aiohttp's connections itself).

The endpoint runs in this process (a thread with its own event loop), the gateway in a
subprocess, on the embedded broker unless one is named.

The machine is shared and noisy, and a fresh broker's JVM is still compiling during its first
minutes of load (the first case used to run at 5-8k msg/s, the same case minutes later at
10-13k). So before the cases, at least 6 batches of N/2 messages are pushed on subscriptions of
their own, and more until the rate stops rising (less than 10% above the batch before; at most
10; reported as `warm_up_msgs_per_s`, not counted), and "acks at once" is measured 3 times, each on its own
subscription: the row is the median round, `rounds_msgs_per_s` has all three. Each row also
has the gateway process's CPU per message (all its threads), which noise on the machine
disturbs less than the rate.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import uvloop
from aiohttp import web

from benchmarks import procstats
from benchmarks.processes import GatewayProc, delete_topics, kafka_broker
from gateway.settings import Settings
from gateway.translate import names

PROJECT = "projects/bench"
MESSAGE_ID_KEY = b'"messageId":"'
BARE_IN_FLIGHT = Settings().push_max_connections
ROUNDS = 3  # of "acks at once"; the median counts
WARM_UP_MIN, WARM_UP_MAX = 6, 10  # warm-up batches


class Endpoint:
    """Counts requests and distinct acknowledged messages; fails `fail_ratio` of requests."""

    def __init__(self) -> None:
        self.fail_ratio = 0.0
        self.requests = 0
        self.acked: set[bytes] = set()
        self.done = threading.Event()
        self.expected = 0
        self.first_at = self.done_at = 0.0
        self._loop = uvloop.new_event_loop()  # lean, like the load generators: it shares the 2 cores
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    async def _listen(self) -> None:
        app = web.Application()
        app.router.add_post("/push", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/push"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests += 1
        if self.first_at == 0.0:
            self.first_at = time.monotonic()
        if random.random() < self.fail_ratio:
            return web.Response(status=500)
        self.acked.add(_message_id(body))
        if len(self.acked) >= self.expected and not self.done.is_set():
            self.done_at = time.monotonic()
            self.done.set()
        return web.Response(status=204)

    def reset(self, expected: int, fail_ratio: float) -> None:
        self.requests, self.acked, self.expected, self.fail_ratio = 0, set(), expected, fail_ratio
        self.first_at = self.done_at = 0.0
        self.done.clear()

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def _message_id(body: bytes) -> bytes:
    """The wrapped body's messageId, found without parsing the whole JSON (the endpoint is test
    apparatus on the gateway's machine: the less CPU it takes, the less it disturbs the figure)."""
    start = body.index(MESSAGE_ID_KEY) + len(MESSAGE_ID_KEY)
    return body[start : body.index(b'"', start)]


def fill(bootstrap: str, topic: str, count: int) -> None:
    """Write `count` 256-byte records straight into the Kafka topic of `topic`."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    kafka_topic = names.kafka_topic_for(names.TopicName(topic))
    payload = os.urandom(256)
    for _ in range(count):
        while True:
            try:
                producer.produce(kafka_topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def _bare_client(url: str, count: int, client: str) -> None:
    """POST `count` push-shaped bodies (unique message ids) with BARE_IN_FLIGHT in flight, by
    `client` ("push" or "session"); a spawned process."""
    import aiohttp

    from gateway.push.body import PushRequest
    from gateway.push.sender import PushClient

    data = base64.b64encode(os.urandom(256)).decode()
    headers = {"content-type": "application/json"}

    def body(i: int) -> bytes:
        message = {"data": data, "messageId": f"bare-{i}", "attributes": {}}
        return json.dumps(
            {"message": message, "subscription": f"{PROJECT}/subscriptions/bare"}, separators=(",", ":")
        ).encode()

    async def run() -> None:
        ids = iter(range(count))
        http = PushClient(BARE_IN_FLIGHT)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=BARE_IN_FLIGHT))

        async def send(i: int) -> None:
            if client == "push":
                await http.post(url, PushRequest(body(i), headers), 60, None)
                return
            async with session.post(url, data=body(i), headers=headers) as r:
                await r.read()

        async def worker() -> None:
            for i in ids:
                await send(i)

        try:
            await asyncio.gather(*(worker() for _ in range(BARE_IN_FLIGHT)))
        finally:
            await http.close()
            await session.close()

    uvloop.run(run())


BARE_CLIENTS = {"push": "bare push client", "session": "bare aiohttp ClientSession"}


def run_bare(endpoint: Endpoint, count: int, timeout: float, client: str) -> dict[str, Any]:
    endpoint.reset(count, 0.0)
    spawn = multiprocessing.get_context("spawn")
    proc = spawn.Process(target=_bare_client, args=(endpoint.url, count, client))
    proc.start()
    finished = endpoint.done.wait(timeout)
    proc.join(30)
    seconds = (endpoint.done_at if finished else time.monotonic()) - endpoint.first_at
    acked = len(endpoint.acked)
    return {
        "case": BARE_CLIENTS[client],
        "messages": count,
        "acknowledged": acked,
        "finished": finished,
        "push_seconds": round(seconds, 2),
        "msgs_per_s": round(acked / max(seconds, 1e-6)),
        "requests": endpoint.requests,
        "requests_per_message": round(endpoint.requests / max(acked, 1), 3),
    }


def run_case(
    sub: Any,
    endpoint: Endpoint,
    subscription: str,
    count: int,
    fail_ratio: float,
    timeout: float,
    gateway_pid: int,
) -> dict[str, Any]:
    endpoint.reset(count, fail_ratio)
    cpu0 = procstats.proc_sample(gateway_pid)
    t0 = time.monotonic()
    push = {"push_endpoint": endpoint.url}
    sub.modify_push_config(request={"subscription": subscription, "push_config": push})
    finished = endpoint.done.wait(timeout)
    end = endpoint.done_at if finished else time.monotonic()
    seconds = end - (endpoint.first_at or t0)
    sub.modify_push_config(request={"subscription": subscription, "push_config": {}})
    cpu1 = procstats.proc_sample(gateway_pid)
    acked = len(endpoint.acked)
    cpu_us = (cpu1.cpu_s - cpu0.cpu_s) * 1e6 / max(acked, 1) if cpu0 and cpu1 else None
    return {
        "case": "acks at once" if fail_ratio == 0 else f"fails {fail_ratio:.0%}",
        "messages": count,
        "acknowledged": acked,
        "finished": finished,
        "push_seconds": round(seconds, 2),
        "first_push_after_s": round((endpoint.first_at or t0) - t0, 2),
        "msgs_per_s": round(acked / max(seconds, 1e-6)),
        "requests": endpoint.requests,
        "requests_per_message": round(endpoint.requests / max(acked, 1), 3),
        "gateway_cpu_us_per_msg": round(cpu_us, 1) if cpu_us is not None else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.push_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="2,000 messages instead of 50,000")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "push.json")
    parser.add_argument("--kafka-bootstrap")
    args = parser.parse_args(argv)
    count = 2_000 if args.quick else 50_000
    prefix = f"pushbench{uuid.uuid4().hex[:6]}"
    with (
        kafka_broker(args.kafka_bootstrap) as (bootstrap, _, _),
        tempfile.TemporaryDirectory(prefix="push-bench-") as logs,
    ):
        gw = GatewayProc(bootstrap, prefix, Path(logs) / "gateway.log", "--rest-port", "0")
        endpoint = Endpoint()
        try:
            endpoint.start()
            rows = bench(gw.address, gw.pid, bootstrap, endpoint, count, prefix)
        finally:
            endpoint.stop()
            gw.stop()
            delete_topics(bootstrap, prefix)
            # and the Kafka topics of the Pub/Sub topics, whose ids start with the prefix too
            delete_topics(bootstrap, names.kafka_topic_for(names.TopicName(f"{PROJECT}/topics/{prefix}")))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks.push_bench " + " ".join(sys.argv[1:] if argv is None else argv)
    python = {"version": sys.version.split()[0], "executable": os.path.realpath(sys.executable)}
    args.out.write_text(json.dumps({"command": command, "python": python, "rows": rows}, indent=1) + "\n")
    for row in rows:
        print(json.dumps(row))
    print(f"wrote {args.out}")
    return 0 if all(r["finished"] for r in rows) else 1


def bench(
    address: str, gateway_pid: int, bootstrap: str, endpoint: Endpoint, count: int, prefix: str
) -> list[dict[str, Any]]:
    os.environ["PUBSUB_EMULATOR_HOST"] = address
    from google.cloud import pubsub_v1

    pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    timeout = max(120.0, count / 50)

    def case(name: str, n: int, fail_ratio: float) -> dict[str, Any]:
        """`n` messages in a topic of their own, pushed through a subscription of their own."""
        topic = f"{PROJECT}/topics/{prefix}-{name}-{uuid.uuid4().hex[:6]}"
        subscription = f"{PROJECT}/subscriptions/push-{name}-{uuid.uuid4().hex[:6]}"
        pub.create_topic(name=topic)
        sub.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=60)
        fill(bootstrap, topic, n)
        return run_case(sub, endpoint, subscription, n, fail_ratio, timeout, gateway_pid)

    warm_up: list[int] = []
    while len(warm_up) < WARM_UP_MAX and (len(warm_up) < WARM_UP_MIN or warm_up[-1] >= warm_up[-2] * 1.1):
        warm_up.append(case("warm", max(count // 2, 1), 0.0)["msgs_per_s"])
    rounds = [case("ok", count, 0.0) for _ in range(ROUNDS)]
    ok = sorted(rounds, key=lambda r: r["msgs_per_s"])[ROUNDS // 2]
    ok["finished"] = all(r["finished"] for r in rounds)
    ok["rounds_msgs_per_s"] = [r["msgs_per_s"] for r in rounds]
    ok["warm_up_msgs_per_s"] = warm_up
    bare = run_bare(endpoint, count, timeout, "push")
    rows = [ok, case("fail", count, 0.2), bare, run_bare(endpoint, count, timeout, "session")]
    for row in rows:
        if row is not bare:
            row["x_bare"] = round(row["msgs_per_s"] / max(bare["msgs_per_s"], 1), 2)
    return rows


if __name__ == "__main__":
    sys.exit(main())
