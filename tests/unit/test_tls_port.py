"""The shared port under TLS, without a gateway: the ClientHello is peeked at, never read, so
a gRPC client's bytes reach the server behind the pump as they were sent (an echo server
stands in for it, as in test_shared_port.py), REST connections get their handshake done by
the event loop, and what is not TLS is closed. tests/e2e/test_tls.py drives a whole gateway."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gateway.security.tls import GatewayTls
from gateway.wire import client_hello, shared_port
from gateway.wire.pump import Pumps
from gateway.wire.shared_port import PREFACE, PortLimits, SharedPort
from tests.unit.test_client_hello import HELLOS
from tests.unit.test_shared_port import Echo, Recorder, _serve_recording, _until
from tests.unit.test_tls import Pki, install

in_fixture_loop = pytest.mark.asyncio(loop_scope="session")


class TlsPort:
    def __init__(self, shared: SharedPort, pumps: Pumps, echo: Echo, rest: list[Recorder], pki: Pki) -> None:
        self.shared, self.pumps, self.echo, self.rest, self.pki = shared, pumps, echo, rest, pki

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.shared.port)


Start = Callable[..., Awaitable[TlsPort]]


async def closed(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the connection is closed within `within` s without a byte for the client: an end
    of stream, or a reset (what closing a socket with unread bytes in it sends)."""
    try:
        return await asyncio.wait_for(reader.read(), within) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
async def tls_port(tmp_path: Path) -> AsyncIterator[Start]:
    """Start a shared port under TLS with a first-bytes timeout of the caller's choosing."""
    started: list[TlsPort] = []
    pki = Pki(tmp_path)
    install(pki.files(), pki.server())
    tls = GatewayTls(pki.files())
    echo = Echo()
    target = str(tmp_path / "grpc.sock")
    echo.server = await asyncio.start_unix_server(echo.handle, target)

    async def start(first_bytes_timeout: float = 0.5) -> TlsPort:
        pumps = Pumps(target)
        shared = SharedPort(
            "127.0.0.1", 0, PortLimits(first_bytes_timeout, 5, 3, 2.0), pumps, tls.rest_context
        )
        await shared.bind()
        port = TlsPort(shared, pumps, echo, _serve_recording(shared), pki)
        started.append(port)
        return port

    yield start
    for port in started:
        await port.shared.close()
        await port.pumps.close()
        for r in port.rest:
            if r.transport is not None:
                r.transport.close()
    echo.server.close()


@in_fixture_loop
async def test_a_grpc_hello_reaches_the_server_as_sent_even_in_pieces(tls_port: Start) -> None:
    port = await tls_port()
    hello = HELLOS["h2"]
    reader, writer = await port.connect()
    for piece in (hello[:3], hello[3:9], hello[9:200], hello[200:]):
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.05)
    assert await asyncio.wait_for(reader.readexactly(len(hello)), 5) == hello  # nothing was eaten
    writer.write(b"more")
    assert await asyncio.wait_for(reader.readexactly(4), 5) == b"more"
    assert port.pumps.started == 1 and not port.rest
    writer.close()


@in_fixture_loop
@pytest.mark.parametrize("alpn", [["http/1.1"], ["h2", "http/1.1"], None])
async def test_https_clients_get_rest_over_tls(tls_port: Start, alpn: list[str] | None) -> None:
    port = await tls_port()
    context = port.pki.client_context()
    context.set_alpn_protocols(alpn or [])
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port.shared.port, ssl=context, server_hostname="localhost"
    )
    writer.write(b"GET / HTTP/1.1\r\n")
    await _until(lambda: len(port.rest) == 1 and port.rest[0].data == b"GET / HTTP/1.1\r\n")
    transport = port.rest[0].transport
    assert transport is not None and transport.get_extra_info("ssl_object") is not None
    assert port.pumps.started == 0
    writer.close()


@in_fixture_loop
@pytest.mark.parametrize("first", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", PREFACE, b"\x16\x03\x01\xff\xff"])
async def test_what_is_not_tls_is_closed(tls_port: Start, first: bytes) -> None:
    port = await tls_port(5.0)
    reader, writer = await port.connect()
    writer.write(first)
    started = time.monotonic()
    assert await closed(reader, 3)  # no answer, in the clear or otherwise
    assert time.monotonic() - started < 2
    assert port.shared.refused_not_tls == 1
    assert port.pumps.started == 0 and not port.rest
    writer.close()


@in_fixture_loop
async def test_a_hello_that_never_ends_times_out_without_spinning(
    tls_port: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = await tls_port(1.0)
    looks: list[int] = []
    parse = client_hello.parse

    def counting(data: bytes, limit: int = client_hello.MAX_HELLO_BYTES) -> object:
        looks.append(len(data))
        return parse(data, limit)

    monkeypatch.setattr(shared_port.client_hello, "parse", counting)
    reader, writer = await port.connect()
    writer.write(HELLOS["h2"][:100])
    opened = time.monotonic()
    assert await closed(reader, 4)
    assert 0.9 <= time.monotonic() - opened <= 3
    assert port.shared.timed_out == 1
    assert len(looks) <= 3, looks  # woken for new bytes only, not for the bytes left unread
    writer.close()


@in_fixture_loop
async def test_a_client_that_leaves_mid_hello_is_dropped_at_once(tls_port: Start) -> None:
    port = await tls_port(10.0)
    _, writer = await port.connect()
    writer.write(HELLOS["h2"][:100])
    await _until(lambda: port.shared.pending_connections == 1)
    await asyncio.sleep(0.1)
    writer.close()
    started = time.monotonic()
    await _until(lambda: port.shared.pending_connections == 0)
    assert time.monotonic() - started < 2  # not the 10 s of the timeout
    assert port.shared.timed_out == 0


@in_fixture_loop
async def test_a_failed_rest_handshake_closes_the_connection(tls_port: Start) -> None:
    port = await tls_port()
    context = ssl.create_default_context()  # the system's roots: the gateway's CA is not among them
    context.set_alpn_protocols(["http/1.1"])
    with pytest.raises(ssl.SSLError):
        await asyncio.open_connection("127.0.0.1", port.shared.port, ssl=context, server_hostname="localhost")
    await _until(lambda: not port.shared._handoffs)
    assert all(r.transport is None for r in port.rest)  # REST's protocol never got a connection
