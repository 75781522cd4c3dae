"""gRPC push (gateway.push.grpc_push): answers mapped to outcomes, endpoints parsed, destinations
checked, and calls of a real PushEndpointService on a local port; the dispatcher's handling of
ABORTED and UNAVAILABLE against the fake core of test_push_dispatcher."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from grpc import aio

from gateway._pb.proto2 import empty_pb2
from gateway._pb.tech.pubsub import pubsub_pb2, pubsub_pb2_grpc
from gateway.push import dispatcher as dispatcher_mod
from gateway.push.grpc_push import GrpcPushClient, channel_target, outcome_of
from gateway.push.sender import Outcome
from gateway.push.window import PushRate
from gateway.translate.endpoints import grpc_problem, host_port
from tests.unit.test_push_dispatcher import SUB, FakeCore, _resource, _until

Code = grpc.StatusCode


# -- pure ------------------------------------------------------------------------------------


def test_answers_map_to_outcomes() -> None:
    assert outcome_of(Code.OK, "") == Outcome(True, "OK")
    aborted = outcome_of(Code.ABORTED, "not now")
    assert (aborted.ok, aborted.aborted, aborted.push_back) == (False, True, False)
    assert aborted.detail == "ABORTED: not now"
    pushed = outcome_of(Code.UNAVAILABLE, "busy")
    assert (pushed.ok, pushed.aborted, pushed.push_back) == (False, False, True)
    for code in (Code.INTERNAL, Code.DEADLINE_EXCEEDED, Code.UNKNOWN, Code.NOT_FOUND, Code.PERMISSION_DENIED):
        failed = outcome_of(code, "x")
        assert (failed.ok, failed.aborted, failed.push_back) == (False, False, False), code


@pytest.mark.parametrize(
    "details",
    [
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused",
        "Socket closed",
        "Connection reset by peer",
        "Broken pipe",
    ],
)
def test_grpc_s_own_unavailable_is_a_failure_not_a_push_back(details: str) -> None:
    outcome = outcome_of(Code.UNAVAILABLE, details)
    assert not outcome.ok and not outcome.push_back and not outcome.aborted


@pytest.mark.parametrize(
    ("endpoint", "parsed"),
    [
        ("machinename:8888", ("machinename", 8888)),
        ("10.1.2.3:1", ("10.1.2.3", 1)),
        ("[::1]:65535", ("::1", 65535)),
    ],
)
def test_endpoints_are_host_and_port(endpoint: str, parsed: tuple[str, int]) -> None:
    assert host_port(endpoint) == parsed
    assert grpc_problem(endpoint, "any") is None


@pytest.mark.parametrize(
    "endpoint",
    [
        "",
        "host",
        "host:",
        ":80",
        "host:0",
        "host:65536",
        "host:\uff18\uff10",  # fullwidth digits: isdigit() says yes, a port they are not
        "::1:80",
        "[nope]:80",
        "http://h:80",
        "a b:1",
    ],
)
def test_other_endpoints_are_refused(endpoint: str) -> None:
    with pytest.raises(ValueError, match=r"host:port|port"):
        host_port(endpoint)
    assert grpc_problem(endpoint, "any")


def test_endpoints_on_refused_addresses_are_refused_when_set() -> None:
    assert "link-local" in (grpc_problem("169.254.169.254:80", "any") or "")
    assert "link-local" in (grpc_problem("0xa9fea9fe:80", "any") or ""), "every spelling of an address"
    assert "loopback" in (grpc_problem("127.0.0.1:80", "public") or "")
    assert grpc_problem("127.0.0.1:80", "any") is None
    assert grpc_problem("localhost:80", "public") is None, "names are judged when pushing"


def test_channels_connect_to_the_checked_addresses_only() -> None:
    assert channel_target(["10.0.0.1", "::1", "10.0.0.2"], 80) == "ipv4:10.0.0.1:80,10.0.0.2:80"
    assert channel_target(["::1"], 80) == "ipv6:[::1]:80"


# -- destinations ------------------------------------------------------------------------------


def _resolver(answers: dict[str, list[str]]) -> Callable[[str, int], Any]:
    async def resolve(host: str, port: int) -> list[str]:
        return answers[host]

    return resolve


async def test_destinations_are_checked_before_connecting() -> None:
    event = pubsub_pb2.PubsubEvent(subscription="s", deleted=True)
    public = GrpcPushClient(
        "public", _resolver({"inside.test": ["10.0.0.1"], "meta.test": ["169.254.169.254"]})
    )
    anywhere = GrpcPushClient("any", _resolver({"meta.test": ["169.254.169.254"]}))
    try:
        inside = await public.call("inside.test:80", event, 1)
        assert (
            inside.refused
            and "inside.test resolves to 10.0.0.1" in inside.detail
            and "private" in inside.detail
        )
        loopback = await public.call("127.0.0.1:80", event, 1)
        assert loopback.refused and "loopback" in loopback.detail
        metadata = await anywhere.call("meta.test:80", event, 1)
        assert metadata.refused and "never a push destination" in metadata.detail
        literal = await anywhere.call("[fe80::1]:80", event, 1)
        assert literal.refused and "link-local" in literal.detail
        malformed = await anywhere.call("nope", event, 1)
        assert not malformed.ok and not malformed.refused and "host:port" in malformed.detail
    finally:
        await public.close()
        await anywhere.close()


# -- a real PushEndpointService ----------------------------------------------------------------


class Endpoint(pubsub_pb2_grpc.PushEndpointServiceServicer):
    """Answers each event with the code `answer` gives for it (after `delay` seconds)."""

    def __init__(self, answer: Callable[[pubsub_pb2.PubsubEvent], Code], delay: float = 0.0) -> None:
        self.answer, self.delay = answer, delay
        self.events: list[pubsub_pb2.PubsubEvent] = []

    async def HandlePubsubEvent(
        self, request: pubsub_pb2.PubsubEvent, context: aio.ServicerContext[Any, Any]
    ) -> empty_pb2.Empty:
        self.events.append(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        code = self.answer(request)
        if code != Code.OK:
            await context.abort(code, f"answered {code.name}")
        return empty_pb2.Empty()


@contextlib.asynccontextmanager
async def serving(endpoint: Endpoint) -> AsyncIterator[int]:
    """`endpoint` served on a port of the local host, which it yields."""
    server = aio.server()
    pubsub_pb2_grpc.add_PushEndpointServiceServicer_to_server(endpoint, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(0)


def _event(text: str) -> pubsub_pb2.PubsubEvent:
    return pubsub_pb2.PubsubEvent(subscription="s", message=pubsub_pb2.PubsubMessage(data=text.encode()))


async def test_calls_of_a_real_endpoint() -> None:
    codes = {"ok": Code.OK, "abort": Code.ABORTED, "busy": Code.UNAVAILABLE, "boom": Code.INTERNAL}
    endpoint = Endpoint(lambda e: codes[e.message.data.decode()])
    client = GrpcPushClient("any", _resolver({"localhost": ["127.0.0.1"]}))
    async with serving(endpoint) as port:
        got = {text: await client.call(f"localhost:{port}", _event(text), 5) for text in codes}
        assert got["ok"].ok
        assert got["abort"].aborted and not got["abort"].ok
        assert got["busy"].push_back and not got["busy"].ok
        assert not got["boom"].ok and not got["boom"].push_back and not got["boom"].aborted
        assert [e.message.data for e in endpoint.events] == [b"ok", b"abort", b"busy", b"boom"]
        assert len(client._channels) == 1, "one channel per endpoint"
        await client.close()


async def test_no_answer_within_the_deadline_is_a_failure() -> None:
    client = GrpcPushClient()
    # A deadline long enough to connect on a loaded machine (else: "cannot connect"), short of
    # the endpoint's answer.
    async with serving(Endpoint(lambda _: Code.OK, delay=6)) as port:
        outcome = await client.call(f"127.0.0.1:{port}", _event("slow"), 1.5)
        assert not outcome.ok and not outcome.push_back and "DEADLINE_EXCEEDED" in outcome.detail
        await client.close()


async def test_a_refused_connection_is_a_failure_not_a_push_back() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    client = GrpcPushClient()
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        outcome = await client.call(f"127.0.0.1:{port}", _event("x"), 5)
        assert not outcome.ok and not outcome.push_back and not outcome.aborted
        assert loop.time() - started < 4, "a failed connection is reported without waiting out the deadline"
    finally:
        await client.close()


# -- the dispatcher's reading of the outcomes ----------------------------------------------------


class FakePusher:
    kind = "grpc"

    def __init__(self, core: FakeCore, answer: Callable[[str, int], Outcome]) -> None:
        self.core, self.answer = core, answer
        self.calls: dict[str, int] = {}
        self.times: list[float] = []

    def update(self, res: Any) -> None:
        pass

    def endpoint(self) -> str:
        return "e.test:1"

    async def push(self, d: Any, time_left: float) -> Outcome:
        self.times.append(asyncio.get_running_loop().time())
        self.calls[d.ack_id] = self.calls.get(d.ack_id, 0) + 1
        self.core.changed.set()
        await asyncio.sleep(0.001)
        return self.answer(d.ack_id, self.calls[d.ack_id])


def _dispatcher(core: FakeCore, pusher: FakePusher) -> dispatcher_mod.Dispatcher:
    res = _resource()
    return dispatcher_mod.Dispatcher(res, core, pusher, 100, max_senders=10)  # type: ignore[arg-type]


async def test_aborted_only_nacks() -> None:
    core = FakeCore(20)
    pusher = FakePusher(
        core, lambda _, n: Outcome(True, "OK") if n > 2 else Outcome(False, "ABORTED", aborted=True)
    )
    d = _dispatcher(core, pusher)
    d.start()
    try:
        await _until(core, lambda: len(core.acked) == 20, 10)
    finally:
        await d.stop(grace=1)
    assert sorted(core.acked) == sorted(f"m{i}" for i in range(20))
    assert len(core.nacked) == 40, "two ABORTED answers each, each a nack"
    assert d.backoff.delay == 0.0 and d.rate.limit is None, "no backoff, no push-back"
    assert d.window.limit > 20, "the window only grew"


async def test_unavailable_nacks_and_slows_the_rate_without_a_backoff() -> None:
    core = FakeCore(300)
    busy = {"left": 30}  # the endpoint is overloaded for its first 30 calls

    def answer(ack_id: str, n: int) -> Outcome:
        busy["left"] -= 1
        return Outcome(False, "UNAVAILABLE", push_back=True) if busy["left"] >= 0 else Outcome(True, "OK")

    pusher = FakePusher(core, answer)
    d = _dispatcher(core, pusher)
    d.rate = PushRate(minimum=20.0)  # the floor of 1/s would make this test take half a minute
    d.start()
    try:
        await _until(core, lambda: d.rate.limit is not None, 10)
        await _until(core, lambda: len(core.acked) == 300, 30)
    finally:
        await d.stop(grace=1)
    assert sorted(core.acked) == sorted(f"m{i}" for i in range(300)), "all delivered in the end"
    assert len(core.nacked) == 30 and d.backoff.delay == 0.0, "nacked, without the failure backoff"
    paced = pusher.times[30] - pusher.times[5]
    assert paced > 25 / 20 * 0.8, f"pushed back to the floor of 20/s: 25 pushes took {paced:.2f} s"
    unlimited = pusher.times[-1] - pusher.times[-100]
    assert unlimited < 1.0, "the limit was lifted after enough successes"
    assert d.rate.limit is None


async def test_other_failures_back_off() -> None:
    core = FakeCore(1)
    pusher = FakePusher(core, lambda _, n: Outcome(True, "OK") if n > 3 else Outcome(False, "INTERNAL: x"))
    d = _dispatcher(core, pusher)
    d.start()
    try:
        await _until(core, lambda: core.acked == ["m0"], 10)
    finally:
        await d.stop(grace=1)
    assert core.nacked == ["m0"] * 3
    gaps = [round(b - a, 1) for a, b in zip(pusher.times, pusher.times[1:], strict=False)]
    assert gaps == [0.1, 0.2, 0.4], gaps
    assert d.rate.limit is None
    assert SUB
