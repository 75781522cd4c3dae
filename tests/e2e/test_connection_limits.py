"""Connection limits and timeouts on both ports, observed from outside: raw sockets that stall
or never finish a request are closed within the configured time, connections past the maximum
are refused at once, and healthy calls (a StreamingPull included) go on meanwhile.

One gateway for the module, with limits small enough to watch in seconds.
"""

from __future__ import annotations

import json
import queue
import selectors
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.pubsub_v1 import types

from tests.e2e.clients import clients
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration

HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
HTTP_IDLE = 6.0
HTTP_MAX = 350
GRPC_MAX = 40
GRPC_RPCS = 10
GRPC_HANDSHAKE = 2.0
GRPC_IDLE = 2.0
GRPC_AGE = 3.0
STREAM_MAX = 10.0
LINGER = 2.0  # rest.LINGER_SECONDS
SLACK = 2.0  # scheduling on two shared cores


@pytest.fixture(scope="module")
def gw(kafka_bootstrap: str, log_dir: Path) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(
        kafka_bootstrap,
        f"lim{uuid.uuid4().hex[:6]}",
        log_dir,
        # Ports of their own: the silent connections below would otherwise wait to say which
        # protocol they speak (test_other_layout_reruns.py runs the others on the shared port).
        "--rest-port",
        "0",
        "--http-max-connections",
        str(HTTP_MAX),
        "--http-header-timeout-seconds",
        str(HEADER_TIMEOUT),
        "--http-body-timeout-seconds",
        str(BODY_TIMEOUT),
        "--http-idle-timeout-seconds",
        str(HTTP_IDLE),
        "--grpc-max-connections",
        str(GRPC_MAX),
        "--grpc-max-concurrent-rpcs",
        str(GRPC_RPCS),
        "--grpc-handshake-timeout-seconds",
        str(GRPC_HANDSHAKE),
        "--grpc-idle-timeout-seconds",
        str(GRPC_IDLE),
        "--grpc-max-connection-age-seconds",
        str(GRPC_AGE),
        "--stream-max-seconds",
        str(STREAM_MAX),
        "--pull-max-wait-seconds",
        "10",
    ).start()
    yield gateway
    gateway.terminate()


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _closing_times(socks: list[socket.socket], within: float) -> tuple[dict[int, float], dict[int, bytes]]:
    """When (time.monotonic()) each socket was closed by the gateway, and what it sent first."""
    sel = selectors.DefaultSelector()
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    closed: dict[int, float] = {}
    received: dict[int, bytes] = {}
    deadline = time.monotonic() + within
    while len(closed) < len(socks) and time.monotonic() < deadline:
        for key, _ in sel.select(0.2):
            i = key.data
            try:
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
            except (ConnectionResetError, BlockingIOError):
                data = b""
            if data:
                received[i] = received.get(i, b"") + data
            else:
                closed[i] = time.monotonic()
                sel.unregister(key.fileobj)
    sel.close()
    return closed, received


def _get(gw: GatewayProcess, path: str = "/v1/projects/p/topics") -> int:
    with urllib.request.urlopen(f"http://{gw.rest_address}{path}", timeout=10) as resp:
        return int(resp.status)


# -- REST -----------------------------------------------------------------------------------------


def test_half_finished_requests_are_closed_within_the_header_timeout(gw: GatewayProcess) -> None:
    socks, sent = [], []
    for _ in range(300):
        s = _connect(gw.rest_address)
        s.sendall(b"POST /v1/projects/p/topics/t:publish HTTP/1.1\r\nHost: gateway\r\nContent-Len")
        socks.append(s)
        sent.append(time.monotonic())
    started = time.monotonic()
    assert _get(gw) == 200  # served while 300 connections hang
    assert time.monotonic() - started < 2
    closed, received = _closing_times(socks, HEADER_TIMEOUT + 10)
    assert len(closed) == 300, f"{300 - len(closed)} still open"
    held = [closed[i] - sent[i] for i in range(300)]
    assert min(held) >= HEADER_TIMEOUT - 0.3, min(held)
    assert max(held) <= HEADER_TIMEOUT + SLACK, max(held)
    assert not received  # closed without an answer
    for s in socks:
        s.close()


def test_a_trickled_head_does_not_extend_its_deadline(gw: GatewayProcess) -> None:
    s = _connect(gw.rest_address)
    head = b"GET /v1/projects/p/topics HTTP/1.1\r\nHost: gateway\r\nX-Slow: " + b"a" * 100
    first = time.monotonic()
    s.settimeout(0.3)
    closed_after = None
    for byte in head:
        try:
            s.sendall(bytes([byte]))
            if s.recv(1) == b"":
                closed_after = time.monotonic() - first
                break
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            closed_after = time.monotonic() - first
            break
    s.close()
    assert closed_after is not None
    assert HEADER_TIMEOUT - 0.3 <= closed_after <= HEADER_TIMEOUT + SLACK, closed_after


def test_a_slow_body_gets_408_and_the_connection_is_closed(gw: GatewayProcess) -> None:
    s = _connect(gw.rest_address)
    s.sendall(
        b"POST /v1/projects/p/topics/t:publish HTTP/1.1\r\nHost: gateway\r\n"
        b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"messages"'
    )
    sent = time.monotonic()
    closed, received = _closing_times([s], BODY_TIMEOUT + LINGER + 10)
    s.close()
    head, _, body = received[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), head
    assert json.loads(body)["error"] == {
        "code": 408,
        "status": "DEADLINE_EXCEEDED",
        "message": f"The request body did not arrive within {BODY_TIMEOUT:g} s.",
    }
    assert BODY_TIMEOUT - 0.3 <= closed[0] - sent <= BODY_TIMEOUT + LINGER + SLACK


def test_idle_connections_are_closed_after_the_idle_timeout(gw: GatewayProcess) -> None:
    silent = _connect(gw.rest_address)  # never sends: no head deadline, the idle timeout
    kept = _connect(gw.rest_address)  # one request, then keep-alive
    opened = time.monotonic()
    kept.sendall(b"GET /v1/projects/p/topics HTTP/1.1\r\nHost: gateway\r\n\r\n")
    answer = kept.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
    answered = time.monotonic()
    closed, _ = _closing_times([silent, kept], HTTP_IDLE + 10)
    assert HTTP_IDLE - 0.3 <= closed[0] - opened <= HTTP_IDLE + SLACK
    assert HTTP_IDLE - 0.3 <= closed[1] - answered <= HTTP_IDLE + SLACK
    silent.close()
    kept.close()


def test_connections_past_the_maximum_are_refused_at_once(gw: GatewayProcess) -> None:
    held = [_connect(gw.rest_address) for _ in range(HTTP_MAX)]
    extra = _connect(gw.rest_address)
    started = time.monotonic()
    closed, received = _closing_times([extra], 5)
    assert closed[0] - started < 1.0
    head, _, body = received[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), head
    assert json.loads(body)["error"]["status"] == "UNAVAILABLE"
    for s in held[:10]:
        s.close()
    deadline = time.monotonic() + 5
    while True:  # the gateway sees the closes at once; a new request gets a slot
        try:
            assert _get(gw) == 200
            break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    for s in [*held[10:], extra]:
        s.close()


# -- gRPC -----------------------------------------------------------------------------------------


def _get_topic(channel: grpc.Channel) -> grpc.StatusCode:
    call = channel.unary_unary(
        "/google.pubsub.v1.Publisher/GetTopic",
        request_serializer=types.GetTopicRequest.serialize,
        response_deserializer=types.Topic.deserialize,
    )
    try:
        call(types.GetTopicRequest(topic="projects/p/topics/none"), timeout=10)
    except grpc.RpcError as err:
        return err.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_an_idle_grpc_connection_is_closed(gw: GatewayProcess) -> None:
    channel = grpc.insecure_channel(gw.address, options=[("grpc.use_local_subchannel_pool", 1)])
    states: list[tuple[float, grpc.ChannelConnectivity]] = []
    channel.subscribe(lambda state: states.append((time.monotonic(), state)))
    assert _get_topic(channel) == grpc.StatusCode.NOT_FOUND
    done = time.monotonic()
    deadline = done + GRPC_IDLE + 10
    while not any(s == grpc.ChannelConnectivity.IDLE and t > done for t, s in states):
        assert time.monotonic() < deadline, states
        time.sleep(0.1)
    went_idle = next(t for t, s in states if s == grpc.ChannelConnectivity.IDLE and t > done)
    assert GRPC_IDLE - 0.3 <= went_idle - done <= GRPC_IDLE + SLACK + 1.0  # gRPC checks idleness coarsely
    assert _get_topic(channel) == grpc.StatusCode.NOT_FOUND  # the client reconnects
    channel.close()


def test_a_connection_that_never_speaks_http2_is_closed(gw: GatewayProcess) -> None:
    silent = _connect(gw.address)
    partial = _connect(gw.address)
    partial.sendall(b"PRI * HTTP/2.0\r\n")
    opened = time.monotonic()
    closed, _ = _closing_times([silent, partial], GRPC_HANDSHAKE + 10)
    for i in (0, 1):
        assert closed[i] - opened <= GRPC_HANDSHAKE + SLACK, closed[i] - opened
    silent.close()
    partial.close()


def test_grpc_connections_past_the_maximum_are_closed_at_once(gw: GatewayProcess) -> None:
    socks = [_connect(gw.address) for _ in range(GRPC_MAX + 10)]
    started = time.monotonic()
    closed, _ = _closing_times(socks, 1.0)  # well within the handshake timeout
    prompt = [i for i, t in closed.items() if t - started < 1.0]
    assert 10 <= len(prompt) <= 20, len(prompt)  # a few slots may hold the suite's own channels
    for s in socks:
        s.close()
    # The closes reach the gateway asynchronously: a call made in the same instant may still find
    # every slot taken (UNAVAILABLE, which the official clients retry). Room must come back soon.
    deadline = time.monotonic() + 5
    while True:
        channel = grpc.insecure_channel(gw.address, options=[("grpc.use_local_subchannel_pool", 1)])
        code = _get_topic(channel)
        channel.close()
        if code == grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
            break
        assert code == grpc.StatusCode.UNAVAILABLE, code
        time.sleep(0.2)
    assert code == grpc.StatusCode.NOT_FOUND, code


def test_calls_past_the_maximum_fail_with_resource_exhausted(gw: GatewayProcess) -> None:
    pub, sub = clients(gw)
    topic, subscription = (
        f"projects/p/topics/t-{uuid.uuid4().hex[:8]}",
        f"projects/p/subscriptions/s-{uuid.uuid4().hex[:8]}",
    )
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    channel = grpc.insecure_channel(gw.address, options=[("grpc.use_local_subchannel_pool", 1)])
    pull = channel.unary_unary(
        "/google.pubsub.v1.Subscriber/Pull",
        request_serializer=types.PullRequest.serialize,
        response_deserializer=types.PullResponse.deserialize,
    )
    request = types.PullRequest(subscription=subscription, max_messages=1)
    waiting = [pull.future(request, timeout=30) for _ in range(GRPC_RPCS)]  # each waits ~10 s
    time.sleep(1.0)
    with pytest.raises(grpc.RpcError) as caught:
        pull(request, timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for f in waiting:
        assert list(f.result().received_messages) == []
    assert _get_topic(channel) == grpc.StatusCode.NOT_FOUND  # room again
    channel.close()


def test_connection_age_and_idleness_never_cut_a_streaming_pull(gw: GatewayProcess) -> None:
    """The connection passes its maximum age (GOAWAY) while the stream runs; the stream keeps
    delivering until the gateway itself recycles it at --stream-max-seconds, with UNAVAILABLE."""
    pub, sub = clients(gw)
    topic, subscription = (
        f"projects/p/topics/t-{uuid.uuid4().hex[:8]}",
        f"projects/p/subscriptions/s-{uuid.uuid4().hex[:8]}",
    )
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    channel = grpc.insecure_channel(gw.address, options=[("grpc.use_local_subchannel_pool", 1)])
    requests: queue.Queue[types.StreamingPullRequest | None] = queue.Queue()
    requests.put(types.StreamingPullRequest(subscription=subscription, stream_ack_deadline_seconds=60))

    def gen() -> Iterator[types.StreamingPullRequest]:
        while (item := requests.get()) is not None:
            yield item

    stream = channel.stream_stream(
        "/google.pubsub.v1.Subscriber/StreamingPull",
        request_serializer=types.StreamingPullRequest.serialize,
        response_deserializer=types.StreamingPullResponse.deserialize,
    )
    opened = time.monotonic()
    got: list[tuple[float, bytes]] = []
    ended: list[grpc.RpcError] = []

    def read() -> None:
        try:
            for response in stream(gen(), timeout=60):
                for m in response.received_messages:
                    got.append((time.monotonic() - opened, m.message.data))
                    requests.put(types.StreamingPullRequest(ack_ids=[m.ack_id]))
        except grpc.RpcError as err:
            ended.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    for at, data in ((1.0, b"before"), (GRPC_AGE + 1.5, b"after age"), (STREAM_MAX - 2.0, b"late")):
        time.sleep(max(0.0, opened + at - time.monotonic()))
        pub.publish(topic, data).result(timeout=10)
    assert _get_topic(channel) == grpc.StatusCode.NOT_FOUND  # new calls take a new connection
    reader.join(STREAM_MAX + 20)
    requests.put(None)
    # Each once, on this one stream; "before" may share a response with "after age" when the
    # group's join (3 s on a stock broker) takes long, and partitions keep no order between them.
    assert sorted(d for _, d in got) == sorted([b"before", b"after age", b"late"]), got
    assert all(t > GRPC_AGE for t, d in got if d != b"before"), got  # delivered past the age limit
    (err,) = ended
    lasted = time.monotonic() - opened
    assert err.code() == grpc.StatusCode.UNAVAILABLE and "maximum age" in str(err.details()), err
    assert STREAM_MAX - 0.5 <= lasted <= STREAM_MAX + SLACK + 5, lasted
    channel.close()
