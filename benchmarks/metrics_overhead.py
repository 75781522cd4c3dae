"""python -m benchmarks.metrics_overhead: what the metrics add to the hot paths (no broker).

- per message: what gateway/core/tally.py adds where messages are delivered (`on_delivered`),
  acknowledged (`on_acked`, timing included) and published (`TopicTally.on_published`);
- per RPC: the RPC interceptor (gateway/observe/rpc.py), as the difference between unary calls
  to a local grpc.aio server with and without it (same process, same loop, alternating rounds);
- per scrape: collecting /metrics over many partition states (gateway/observe/backlog.py).

Prints one line per figure: the best of several rounds (on a shared machine the others measure
its neighbours).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from gateway.core.tally import Tally, TopicTally
from gateway.leases.state import PartitionState
from gateway.observe import backlog, rpc
from gateway.translate.limits import OutgoingMessage
from gateway.translate.records import Record, record

BATCH = 1000
ROUNDS = 9


def _per_message(fn: Any, n: int) -> float:
    """ns per message of `fn()` handling `n` messages: the best of ROUNDS (timeit's advice: the
    others measure what else the machine was doing)."""
    runs = []
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        fn()
        runs.append((time.perf_counter_ns() - start) / n)
    return min(runs)


def tallies() -> None:
    t = Tally()
    batches = [
        [(p, o, 1, None) for o in range(i * BATCH, (i + 1) * BATCH) for p in (0,)] for i in range(ROUNDS * 2)
    ]
    it = iter(batches)
    delivered = _per_message(lambda: t.on_delivered(next(it), 1_000), BATCH)
    acks = iter([[(p, o) for p, o, _, _ in b] for b in batches])
    acked = _per_message(lambda: t.on_acked(next(acks), 1_050), BATCH)
    plain = [OutgoingMessage(b"x" * 1024, {}, "") for _ in range(100)]
    with_attrs = [OutgoingMessage(b"x" * 1024, {"a": "1", "bb": "22"}, "k") for _ in range(100)]
    topic = TopicTally()
    published = _per_message(lambda: [topic.on_published(plain) for _ in range(10)], 1000)
    published_attrs = _per_message(lambda: [topic.on_published(with_attrs) for _ in range(10)], 1000)
    print(f"on_delivered: {delivered:.0f} ns/message (count + delivery time kept for ack latency)")
    print(f"on_acked: {acked:.0f} ns/message (count + latency bucket)")
    print(
        f"on_published: {published:.0f} ns/message (1 KiB, no attributes), "
        f"{published_attrs:.0f} with 2 attributes"
    )


async def interceptor() -> None:
    async def echo(request: bytes, context: Any) -> bytes:
        return request

    handlers = {"Echo": grpc.unary_unary_rpc_method_handler(echo)}

    class Nothing(grpc.aio.ServerInterceptor):
        async def intercept_service(self, continuation: Any, details: Any) -> Any:
            return await continuation(details)

    servers = []
    variants: list[list[Any]] = [[], [Nothing()], [rpc.Interceptor(rpc.RpcMetrics(CollectorRegistry()))]]
    for interceptors in variants:
        server = grpc.aio.server(interceptors=interceptors)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("b.S", handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append((server, port))
    calls = 2000
    times: dict[int, list[float]] = {0: [], 1: [], 2: []}
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _, port in servers]
    try:
        for _ in range(ROUNDS):
            for i, channel in enumerate(channels):
                call = channel.unary_unary("/b.S/Echo")
                await call(b"w")
                start = time.process_time()  # this process's CPU: client and server
                for _ in range(calls):
                    await call(b"x")
                times[i].append((time.process_time() - start) / calls * 1e6)
    finally:
        for channel in channels:
            await channel.close()
        for server, _ in servers:
            await server.stop(None)
    bare, empty, timed = (min(times[i]) for i in range(3))
    print(
        f"unary RPC, CPU of client and server: {bare:.1f} us bare, {empty:.1f} us with an interceptor "
        f"that does nothing, {timed:.1f} us with the metrics' (+{timed - bare:.1f} us)"
    )


def scrape() -> None:
    states = []
    for p in range(64):
        state: PartitionState[Record] = PartitionState(p, 0)
        state.add_records((o, record(p, o, o, None, b"x" * 1024, None)) for o in range(125))  # 8000 held
        state.take(50, now_ms=0, deadline_ms=10_000)
        states.append(state)
    per = _per_message(lambda: [backlog.of(s, 10_000) for s in states], len(states))
    print(f"backlog of one partition at scrape time: {per / 1000:.1f} us (125 messages held, 50 leased)")


def main() -> None:
    tallies()
    asyncio.run(interceptor())
    scrape()


if __name__ == "__main__":
    main()
