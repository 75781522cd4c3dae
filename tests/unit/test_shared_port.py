"""The shared port's parts without a gateway: telling protocols apart, handing REST connections
over, and the pump's ends (half-close, reset, close) against an echo server standing in for
the gRPC server on its unix socket. tests/e2e/test_one_port.py drives a whole gateway."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.settings import Settings, SettingsError
from gateway.wire import pump as pump_mod
from gateway.wire.connections import FILES_BESIDES_CLIENTS, files_needed
from gateway.wire.pump import Pumps
from gateway.wire.shared_port import PREFACE, PortLimits, Protocol, SharedPort, identify
from tests.unit.test_settings import parse

in_fixture_loop = pytest.mark.asyncio(loop_scope="session")  # the loop of the async fixtures


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (b"", None),
        (b"P", None),
        (PREFACE[:23], None),
        (PREFACE, Protocol.GRPC),
        (PREFACE + b"\x00\x00\x12\x04", Protocol.GRPC),
        (b"GET / HTTP/1.1\r\n", Protocol.REST),
        (b"PUT /v1/projects/p/topics/t HTTP/1.1", Protocol.REST),
        (b"PRI * HTTP/1.1\r\n", Protocol.REST),  # diverges from the preface: HTTP/1.1's to refuse
        (b"\x16\x03\x01", Protocol.REST),  # TLS: REST answers 400
    ],
)
def test_identify(first: bytes, expected: Protocol | None) -> None:
    assert identify(first) is expected


class Recorder(asyncio.Protocol):
    """REST's stand-in: what it was given, in order."""

    def __init__(self) -> None:
        self.data = b""
        self.peer: object = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")

    def data_received(self, data: bytes) -> None:
        self.data += data


class Echo:
    """The gRPC server's stand-in on a unix socket: echoes, and closes at the client's end."""

    def __init__(self) -> None:
        self.ends = 0
        self.server: asyncio.AbstractServer | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
        except ConnectionError:
            pass
        self.ends += 1
        writer.close()


class Port:
    def __init__(self, shared: SharedPort, pumps: Pumps, echo: Echo, rest: list[Recorder]) -> None:
        self.shared, self.pumps, self.echo, self.rest = shared, pumps, echo, rest

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.shared.port)


def _serve_recording(shared: SharedPort) -> list[Recorder]:
    """Serve `shared` with REST connections going to Recorders; returns them as they come."""
    rest: list[Recorder] = []

    def factory() -> asyncio.Protocol:
        rest.append(Recorder())
        return rest[-1]

    shared.serve(factory)
    return rest


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[Port]:
    echo = Echo()
    target = str(tmp_path / "grpc.sock")
    echo.server = await asyncio.start_unix_server(echo.handle, target)
    pumps = Pumps(target)
    shared = SharedPort("127.0.0.1", 0, PortLimits(0.5, 5, 3), pumps)
    await shared.bind()
    rest = _serve_recording(shared)
    yield Port(shared, pumps, echo, rest)
    await shared.close()
    await pumps.close()
    for r in rest:
        if r.transport is not None:
            r.transport.close()
    echo.server.close()


async def _until(condition: object, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not callable(condition) or not condition():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.02)


@in_fixture_loop
async def test_grpc_bytes_go_both_ways_and_a_half_close_travels(port: Port) -> None:
    reader, writer = await port.connect()
    writer.write(PREFACE[:10])  # the preface in pieces
    await asyncio.sleep(0.05)
    writer.write(PREFACE[10:] + b"frames")
    assert await reader.readexactly(len(PREFACE) + 6) == PREFACE + b"frames"
    writer.write(b"x" * 300_000)  # more than a pipe holds
    assert await reader.readexactly(300_000) == b"x" * 300_000
    assert port.pumps.open_connections == 1
    writer.write_eof()  # the client's FIN reaches the server, whose close comes back
    assert await reader.read() == b""
    await _until(lambda: port.echo.ends == 1 and port.pumps.open_connections == 0)
    writer.close()


@in_fixture_loop
async def test_rest_gets_the_connection_with_what_was_read_first(port: Port) -> None:
    _, writer = await port.connect()
    writer.write(b"P")  # could still be the preface
    await asyncio.sleep(0.05)
    assert not port.rest
    writer.write(b"UT /v1/x HTTP/1.1\r\n")
    await _until(lambda: len(port.rest) == 1 and port.rest[0].data == b"PUT /v1/x HTTP/1.1\r\n")
    writer.write(b"Host: g\r\n\r\n")
    await _until(lambda: port.rest[0].data.endswith(b"Host: g\r\n\r\n"))
    assert port.rest[0].peer == writer.get_extra_info("sockname")  # the client's own address
    assert port.pumps.started == 0
    writer.close()


@in_fixture_loop
async def test_a_reset_from_the_client_ends_the_servers_side(port: Port) -> None:
    _, writer = await port.connect()
    writer.write(PREFACE)
    await _until(lambda: port.pumps.open_connections == 1)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()  # RST
    await _until(lambda: port.echo.ends == 1 and port.pumps.open_connections == 0)


@in_fixture_loop
async def test_silent_and_half_preface_connections_close_after_the_timeout(port: Port) -> None:
    opened = time.monotonic()
    silent_reader, silent = await port.connect()
    half_reader, half = await port.connect()
    half.write(PREFACE[:5])
    assert await asyncio.wait_for(silent_reader.read(), 3) == b""
    assert await asyncio.wait_for(half_reader.read(), 3) == b""
    assert 0.4 <= time.monotonic() - opened <= 2.0
    assert port.shared.timed_out == 2 and port.shared.pending_connections == 0
    silent.close()
    half.close()


@in_fixture_loop
async def test_past_the_pending_maximum_the_oldest_is_closed(port: Port) -> None:
    conns = [await port.connect() for _ in range(6)]  # the limit is 5
    assert await asyncio.wait_for(conns[0][0].read(), 0.4) == b""
    assert port.shared.evicted == 1
    reader, writer = await port.connect()  # a newcomer that speaks is served
    writer.write(PREFACE)
    assert await reader.readexactly(len(PREFACE)) == PREFACE
    for _, w in [*conns, (reader, writer)]:
        w.close()


@in_fixture_loop
async def test_grpc_connections_past_the_maximum_are_closed(port: Port) -> None:
    conns = [await port.connect() for _ in range(4)]  # the gRPC limit is 3
    for _, w in conns:
        w.write(PREFACE)
    for r, _ in conns[:3]:
        assert await r.readexactly(len(PREFACE)) == PREFACE
    assert await asyncio.wait_for(conns[3][0].read(), 2) == b""
    assert port.shared.refused_grpc == 1
    for _, w in conns:
        w.close()


@in_fixture_loop
async def test_close_ends_pumped_connections_and_joins_their_threads(
    port: Port, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pump_mod, "LINGER_SECONDS", 30.0)
    before = threading.active_count()
    conns = [await port.connect() for _ in range(3)]
    for r, w in conns:
        w.write(PREFACE)
        assert await r.readexactly(len(PREFACE)) == PREFACE
    assert threading.active_count() == before + 6  # two per connection
    assert port.echo.server is not None
    port.echo.server.close()  # the server stops; its connections stay until the pumps end
    started = time.monotonic()
    await port.shared.close()
    await port.pumps.close()
    assert time.monotonic() - started < 2
    assert threading.active_count() == before
    for r, w in conns:
        assert await asyncio.wait_for(r.read(), 2) == b""
        w.close()
    assert port.pumps.open_connections == 0


@in_fixture_loop
async def test_a_wildcard_ipv6_host_takes_ipv4_too(tmp_path: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    shared = SharedPort("::", 0, PortLimits(0.5, 5, 3), Pumps(str(tmp_path / "none.sock")))
    await shared.bind()
    rest = _serve_recording(shared)
    for host in ("127.0.0.1", "::1"):
        _, writer = await asyncio.open_connection(host, shared.port)
        writer.write(b"GET / HTTP/1.1\r\n")
        await _until(lambda: bool(rest) and rest[-1].data == b"GET / HTTP/1.1\r\n")
        writer.close()
        rest.clear()
    await shared.close()


# -- settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "rest_port", "shares"),
    [
        ([], {}, None, True),
        (["--rest-port", "shared"], {}, None, True),
        (["--rest-port", " Shared "], {}, None, True),
        ([], {"PUBSUB_GATEWAY_REST_PORT": ""}, None, True),
        ([], {"PUBSUB_GATEWAY_REST_PORT": "8086"}, 8086, False),
        (["--rest-port", "0"], {}, 0, False),
        (["--port", "0", "--rest-port", "0"], {}, 0, False),  # two ports, each picked
        (["--port", "9000", "--rest-port", "9000"], {}, 9000, True),  # one port, named twice
        (["--rest-port", "0", "--rest-port", "shared"], {}, None, True),  # the last flag wins
    ],
)
def test_rest_port_shared_or_a_number(
    argv: list[str], env: dict[str, str], rest_port: int | None, shares: bool
) -> None:
    s = parse(argv, env)
    assert (s.rest_port, s.shares_port) == (rest_port, shares)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rest-port", "eighty"], "--rest-port must be a port number or shared, got 'eighty'"),
        (["--rest-port", "65536"], "--rest-port must be 0..65535 or shared"),
        (["--max-pending-connections", "0"], "--max-pending-connections must be 1..1000000"),
        (["--first-bytes-timeout-seconds", "0"], r"--first-bytes-timeout-seconds must be in \[0.1, 86400\]"),
        (
            ["--rest-port", "8086", "--max-pending-connections", "5"],
            "applies to a port shared by gRPC and REST",
        ),
        (
            ["--rest-port", "0", "--first-bytes-timeout-seconds", "3"],
            "applies to a port shared by gRPC and REST",
        ),
    ],
)
def test_bad_or_meaningless_port_settings_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        parse(argv)


def test_the_open_file_budget_counts_the_pump() -> None:
    shared = Settings(http_max_connections=10, grpc_max_connections=20, max_pending_connections=30)
    assert files_needed(shared) == 10 + 20 * pump_mod.FILES_PER_CONNECTION + 30 + FILES_BESIDES_CLIENTS
    apart = Settings(rest_port=0, http_max_connections=10, grpc_max_connections=20)
    assert files_needed(apart) == 10 + 20 + FILES_BESIDES_CLIENTS


def test_stale_socket_directories_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway import server

    monkeypatch.setattr(server.tempfile, "gettempdir", lambda: str(tmp_path))
    old = time.time() - 3600
    dirs = {}
    listening: socket.socket | None = None
    for name in ("dead", "live", "fresh"):
        directory = tmp_path / f"{server.SOCKET_DIR_PREFIX}{name}"
        directory.mkdir()
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(directory / "grpc.sock"))
        if name == "live":
            sock.listen()
            listening = sock
        else:
            sock.close()  # the path stays, nobody listens: what SIGKILL leaves
        if name != "fresh":
            os.utime(directory / "grpc.sock", (old, old))
        dirs[name] = directory
    other = tmp_path / "something-else"
    other.mkdir()
    server._remove_stale_socket_dirs()
    assert [name for name, d in dirs.items() if d.exists()] == ["live", "fresh"]
    assert other.exists()
    assert listening is not None
    listening.close()


def test_a_servers_last_answers_reach_the_client_when_its_next_bytes_cannot(tmp_path: Path) -> None:
    """The server writes its last answers and closes while the client's next bytes are on
    their way (a WINDOW_UPDATE, say): writing those fails with a broken pipe, and the answers,
    still in the pump, reach the client all the same, followed by the end of the stream."""
    target = str(tmp_path / "grpc.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(target)
    listener.listen(1)
    answers = os.urandom(150_000)  # more than the client's small buffers and a pipe hold
    closed = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        prefix = b""
        while len(prefix) < 5:
            prefix += conn.recv(5 - len(prefix))
        conn.sendall(answers)
        conn.close()
        closed.set()

    threading.Thread(target=serve, daemon=True).start()
    client, public = socket.socketpair()
    for sock in (client, public):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    pumps = Pumps(target)
    pumps.start(public, b"hello")
    try:
        assert closed.wait(10), "the server could not write its answers"
        client.sendall(b"x" * 1000)  # the pump's write of these to the closed server fails
        time.sleep(0.5)  # ... before the client reads anything
        client.settimeout(10)
        got = bytearray()
        while chunk := client.recv(65536):
            got += chunk
        assert len(got) == len(answers)
        assert bytes(got) == answers
    finally:
        client.close()
        listener.close()
        asyncio.run(pumps.close())
    assert pumps.open_connections == 0
