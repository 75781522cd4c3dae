"""gRPC and REST on one port (the default), and on two when --rest-port names one (issue 17).

The official client and real HTTP requests on the same address; StreamingPull through the pump;
hostile connections (silent, garbage, half a preface, a flood of idle ones) closed within their
bounds while others are served; the connection caps counted on the shared port; a clean stop.
The suite's gateways serve both on one port, so every e2e test uses it; the connection-limit
suite runs with ports of their own, and tests/e2e/test_other_layout_reruns.py runs each suite
again in the other layout.
"""

from __future__ import annotations

import concurrent.futures
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable

import grpc
import pytest
from google.api_core.exceptions import NotFound

from tests.e2e.clients import clients
from tests.e2e.test_connection_limits import _closing_times, _connect, _get_topic
from tests.gateways import GatewayProcess, serve_command

pytestmark = pytest.mark.integration

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FIRST_BYTES = 2.0
HEADER_TIMEOUT = 1.0
MAX_PENDING = 40
GRPC_MAX = 20
SLACK = 2.0
Start = Callable[..., GatewayProcess]


def _shared(start_gateway: Start, *extra: str) -> GatewayProcess:
    gw: GatewayProcess = start_gateway(
        "--rest-port",
        "shared",
        "--first-bytes-timeout-seconds",
        str(FIRST_BYTES),
        "--http-header-timeout-seconds",
        str(HEADER_TIMEOUT),
        "--max-pending-connections",
        str(MAX_PENDING),
        "--grpc-max-connections",
        str(GRPC_MAX),
        *extra,
    )
    return gw


def _http(address: str, method: str, path: str, body: object = None) -> tuple[int, dict[str, object]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=15) as resp:
            return int(resp.status), json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def test_the_official_client_and_rest_share_one_port(
    start_gateway: Start, names: Callable[[str], str]
) -> None:
    gw = _shared(start_gateway)
    assert gw.address == gw.rest_address  # the READY line names one address twice
    topic, subscription = names("topics"), names("subscriptions")
    status, _ = _http(gw.address, "PUT", f"/v1/{topic}")
    assert status == 200
    pub, sub = clients(gw)
    sub.create_subscription(name=subscription, topic=topic)  # gRPC sees what REST made
    pub.publish(topic, b"over grpc").result(timeout=30)
    status, out = _http(gw.address, "POST", f"/v1/{topic}:publish", {"messages": [{"data": "b3ZlciByZXN0"}]})
    assert status == 200 and len(out["messageIds"]) == 1  # type: ignore[arg-type]

    received: list[bytes] = []
    future = sub.subscribe(subscription, lambda m: (received.append(m.data), m.ack()))  # StreamingPull
    deadline = time.monotonic() + 60
    while len(received) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    future.cancel()
    future.result(timeout=30)
    assert sorted(received) == [b"over grpc", b"over rest"]
    status, out = _http(gw.address, "GET", f"/v1/{subscription}")
    assert status == 200 and out["topic"] == topic
    assert _http(gw.address, "GET", "/v1/openapi.json")[0] == 200
    assert _http(gw.address, "GET", "/oauth2/v3/certs")[0] == 200  # the push key set, here too


def test_hostile_connections_are_closed_in_time_and_block_no_one(start_gateway: Start) -> None:
    gw = _shared(start_gateway)
    silent = [_connect(gw.address) for _ in range(10)]
    half_preface = [_connect(gw.address) for _ in range(10)]
    for s in half_preface:
        s.sendall(PREFACE[:12])
    garbage = [_connect(gw.address) for _ in range(10)]
    for s in garbage:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not a request")  # a TLS hello, say
    opened = time.monotonic()
    with _channel(gw.address) as channel:  # served meanwhile, both ways
        assert _get_topic(channel) == grpc.StatusCode.NOT_FOUND
    assert _http(gw.address, "GET", "/v1/projects/p/topics")[0] == 200
    assert time.monotonic() - opened < FIRST_BYTES
    closed, received = _closing_times(silent + half_preface + garbage, FIRST_BYTES + 10)
    assert len(closed) == 30, f"{30 - len(closed)} still open"
    late = {i: t - opened for i, t in closed.items() if t - opened > FIRST_BYTES + SLACK}
    assert not late, late
    # Silent ones and half prefaces wait out --first-bytes-timeout-seconds; garbage is REST's,
    # which answers 400 or closes it by its header timeout.
    assert all(closed[i] - opened >= FIRST_BYTES - 0.3 for i in range(20)), closed
    assert not any(i in received for i in range(20))
    answers = {received.get(i, b"")[:12] for i in range(20, 30)}
    assert answers <= {b"", b"HTTP/1.0 400", b"HTTP/1.1 400"}, answers
    for s in silent + half_preface + garbage:
        s.close()


def test_a_flood_of_idle_connections_evicts_the_oldest(start_gateway: Start) -> None:
    gw = _shared(start_gateway)
    idle = [_connect(gw.address) for _ in range(MAX_PENDING + 10)]
    started = time.monotonic()
    closed, _ = _closing_times(idle, 1.0)
    assert sorted(closed) == list(range(10)), sorted(closed)  # the oldest ten, at once
    assert all(t - started < 1.0 for t in closed.values())
    with _channel(gw.address) as channel:  # a client arriving during the flood gets in
        assert _get_topic(channel) == grpc.StatusCode.NOT_FOUND
    assert _http(gw.address, "GET", "/v1/projects/p/topics")[0] == 200
    for s in idle:
        s.close()


def test_grpc_connections_past_the_maximum_are_closed_at_once(start_gateway: Start) -> None:
    gw = _shared(start_gateway)
    socks = [_connect(gw.address) for _ in range(GRPC_MAX + 5)]
    for s in socks:
        s.sendall(PREFACE)
    started = time.monotonic()
    closed, _ = _closing_times(socks, 1.0)  # well within the handshake timeout (10 s)
    assert sorted(closed) == list(range(GRPC_MAX, GRPC_MAX + 5)), sorted(closed)
    assert all(t - started < 1.0 for t in closed.values())
    assert _http(gw.address, "GET", "/v1/projects/p/topics")[0] == 200  # REST is counted apart
    for s in socks:
        s.close()
    deadline = time.monotonic() + 10
    while True:  # the pumps see the closes and free their slots
        with _channel(gw.address) as channel:
            if _get_topic(channel) == grpc.StatusCode.NOT_FOUND:
                break
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_rest_connections_past_the_maximum_get_503(start_gateway: Start) -> None:
    gw = _shared(start_gateway, "--http-max-connections", "5", "--http-header-timeout-seconds", "10")
    held = [_connect(gw.address) for _ in range(5)]
    for s in held:
        s.sendall(b"GET /v1/projects/p/topics HTTP/1.1\r\nHost: gateway\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 200")  # open, kept alive
    extra = _connect(gw.address)
    extra.sendall(b"GET /v1/projects/p/topics HTTP/1.1\r\nHost: gateway\r\n\r\n")
    closed, received = _closing_times([extra], 5)
    assert 0 in closed
    head, _, body = received[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), head
    assert json.loads(body)["error"]["status"] == "UNAVAILABLE"
    with _channel(gw.address) as channel:  # gRPC is counted apart
        assert _get_topic(channel) == grpc.StatusCode.NOT_FOUND
    for s in [*held, extra]:
        s.close()


def test_a_client_that_dies_mid_stream_frees_its_connection(
    start_gateway: Start, names: Callable[[str], str]
) -> None:
    """A client process killed mid-StreamingPull: the pump passes the end of its connection on,
    the server drops it, and its slot (--grpc-max-connections 1 here) is free again."""
    gw = _shared(start_gateway, "--grpc-max-connections", "1")
    topic, subscription = names("topics"), names("subscriptions")
    assert _http(gw.address, "PUT", f"/v1/{topic}")[0] == 200
    assert _http(gw.address, "PUT", f"/v1/{subscription}", {"topic": topic})[0] == 200
    assert _http(gw.address, "POST", f"/v1/{topic}:publish", {"messages": [{"data": "aGk="}]})[0] == 200
    code = f"""
import grpc, time
from google.pubsub_v1 import types
ch = grpc.insecure_channel("{gw.address}")
call = ch.stream_stream("/google.pubsub.v1.Subscriber/StreamingPull",
    request_serializer=types.StreamingPullRequest.serialize,
    response_deserializer=types.StreamingPullResponse.deserialize)
def reqs():
    yield types.StreamingPullRequest(subscription="{subscription}", stream_ack_deadline_seconds=60)
    time.sleep(3600)
for r in call(reqs()):
    if r.received_messages:
        print("GOT", flush=True)
"""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == b"GOT"
    with _channel(gw.address) as channel:  # the one slot is the child's
        assert _get_topic(channel) == grpc.StatusCode.UNAVAILABLE
    child.kill()  # no goodbye from gRPC: the kernel closes the socket
    child.wait(10)
    child.stdout.close()
    deadline = time.monotonic() + 10
    while True:
        with _channel(gw.address) as channel:
            if _get_topic(channel) == grpc.StatusCode.NOT_FOUND:
                break
        assert time.monotonic() < deadline, "the dead client's connection still holds its slot"
        time.sleep(0.2)


def test_stop_ends_streams_and_exits_cleanly(start_gateway: Start, names: Callable[[str], str]) -> None:
    gw = _shared(start_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    pub, sub = clients(gw)
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    future = sub.subscribe(subscription, lambda m: m.ack())
    time.sleep(2)  # the stream is open through the pump
    idle = _connect(gw.address)  # and a connection that never speaks
    started = time.monotonic()
    assert gw.terminate(30) == 0
    assert time.monotonic() - started < 15
    log = gw.log_paths[-1].read_text()
    assert "did not end" not in log and "Traceback" not in log, log[-3000:]
    future.cancel()
    idle.close()


def test_two_ports_when_rest_port_names_one(start_gateway: Start, names: Callable[[str], str]) -> None:
    gw = start_gateway("--rest-port", "0")  # REST on a port of its own
    assert gw.address != gw.rest_address
    topic = names("topics")
    assert _http(gw.rest_address, "PUT", f"/v1/{topic}")[0] == 200
    pub, _ = clients(gw)
    assert pub.get_topic(topic=topic).name == topic
    with pytest.raises(NotFound):
        pub.get_topic(topic=names("topics", "-none"))
    # --port is gRPC alone: an HTTP/1.1 request there gets no REST answer.
    s = _connect(gw.address)
    s.sendall(b"GET /v1/projects/p/topics HTTP/1.1\r\nHost: gateway\r\n\r\n")
    _, received = _closing_times([s], 15)
    assert not received.get(0, b"").startswith(b"HTTP/1.1 200")
    s.close()


def test_shared_port_settings_are_refused_with_a_rest_port(kafka_bootstrap: str) -> None:
    command = serve_command(
        "--kafka-bootstrap", kafka_bootstrap, "--rest-port", "0", "--max-pending-connections", "5"
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--max-pending-connections applies to a port shared by gRPC and REST" in done.stderr


def test_one_explicit_port_for_both(start_gateway: Start) -> None:
    with socket.socket() as probe:  # a free port, named twice
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gw = start_gateway("--port", str(port), "--rest-port", str(port))
    assert gw.address == gw.rest_address == f"127.0.0.1:{port}"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        rest = pool.submit(_http, gw.address, "GET", "/v1/projects/p/topics")
        with _channel(gw.address) as channel:
            assert _get_topic(channel) == grpc.StatusCode.NOT_FOUND
        assert rest.result()[0] == 200
