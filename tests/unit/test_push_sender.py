"""The push HTTP client (gateway.push.sender) against real sockets on loopback.

The endpoints are small asyncio servers written here, so that a test controls every byte of the
answer (interim statuses, a close after the response, a body too large to keep) and sees every
byte of the request and every connection. No broker.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.push import sender
from gateway.push.body import PushRequest

pytestmark = pytest.mark.asyncio(loop_scope="session")  # the loop of the async fixtures
JSON = PushRequest(b'{"message":{}}', {"content-type": "application/json"})


@dataclass
class Endpoint:
    """Answers each request with `answer(number)`: raw response bytes, or None for no answer."""

    answer: Callable[[int], bytes | None]
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    connections: int = 0
    port: int = 0
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *fields = head.decode().split("\r\n")[:-2]
                headers = dict(f.split(": ", 1) for f in fields)
                body = await reader.readexactly(int(headers["Content-Length"]))
                self.requests.append((line, headers, body))
                reply = self.answer(len(self.requests))
                if reply is None:
                    await asyncio.sleep(3600)
                    return
                writer.write(reply)
                await writer.drain()
                if b"Connection: close" in reply:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


def reply(status: int, body: bytes = b"", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Endpoint]]]:
    servers: list[asyncio.Server] = []
    endpoints: list[Endpoint] = []

    async def start(answer: Callable[[int], bytes | None], tls: ssl.SSLContext | None = None) -> Endpoint:
        endpoint = Endpoint(answer)
        endpoints.append(endpoint)
        server = await asyncio.start_server(endpoint.handle, "127.0.0.1", 0, ssl=tls)
        servers.append(server)
        endpoint.port = server.sockets[0].getsockname()[1]
        return endpoint

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()
    handlers = [t for e in endpoints for t in e.handlers]
    for task in handlers:
        task.cancel()
    await asyncio.gather(*handlers, return_exceptions=True)


@pytest.fixture
async def client() -> AsyncIterator[sender.PushClient]:
    http = sender.PushClient(max_connections=4)
    yield http
    await http.close()


async def test_the_request_on_the_wire(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda _: reply(200, b"fine"))
    request = PushRequest(
        b"\x00raw", {"content-type": "application/octet-stream", "x-goog-pubsub-message-id": "7"}
    )
    outcome = await client.post(f"http://127.0.0.1:{ep.port}/push/here?token=a%20b", request, 5, "tok.en.sig")
    assert outcome == sender.Outcome(True, "HTTP 200")
    ((line, headers, body),) = ep.requests
    assert line == "POST /push/here?token=a%20b HTTP/1.1"
    assert headers == {
        "Host": f"127.0.0.1:{ep.port}",
        "User-Agent": sender.USER_AGENT,
        "content-type": "application/octet-stream",
        "x-goog-pubsub-message-id": "7",
        "Authorization": "Bearer tok.en.sig",
        "Content-Length": "4",
    }
    assert body == b"\x00raw"


async def test_user_and_password_in_the_url_are_basic_auth(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda _: reply(204))
    assert (await client.post(f"http://user:pw@127.0.0.1:{ep.port}/", JSON, 5, None)).ok
    assert ep.requests[0][1]["Authorization"] == "Basic dXNlcjpwdw=="
    assert ep.requests[0][0] == "POST / HTTP/1.1"


@pytest.mark.parametrize(
    ("status", "ok"),
    [
        (200, True),
        (201, True),
        (202, True),
        (204, True),
        (203, False),
        (301, False),
        (400, False),
        (429, False),
        (500, False),
        (503, False),
    ],
)
async def test_only_the_success_statuses_ack(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient, status: int, ok: bool
) -> None:
    ep = await serve(lambda _: reply(status, extra="Location: http://elsewhere.test/\r\n"))
    assert await client.post(f"http://127.0.0.1:{ep.port}/", JSON, 5, None) == sender.Outcome(
        ok, f"HTTP {status}"
    )
    assert len(ep.requests) == 1, "redirects are not followed"


async def test_connections_are_kept_alive_and_bounded(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda _: reply(200, b"ok"))
    url = f"http://127.0.0.1:{ep.port}/"
    for _ in range(20):
        assert (await client.post(url, JSON, 5, None)).ok
    assert ep.connections == 1
    outcomes = await asyncio.gather(*(client.post(url, JSON, 5, None) for _ in range(40)))
    assert all(o.ok for o in outcomes) and len(ep.requests) == 60
    assert ep.connections == 4, "at most max_connections at once, each reused"


async def test_102_is_a_success_and_its_connection_is_not_reused(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda n: b"HTTP/1.1 102 Processing\r\n\r\n" if n == 1 else reply(200))
    url = f"http://127.0.0.1:{ep.port}/"
    assert await client.post(url, JSON, 5, None) == sender.Outcome(True, "HTTP 102")
    assert (await client.post(url, JSON, 5, None)).ok
    assert ep.connections == 2, "the final response of the first request would follow on the first"


async def test_other_interim_statuses_precede_the_final_one(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda _: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\n" + reply(500))
    assert await client.post(f"http://127.0.0.1:{ep.port}/", JSON, 5, None) == sender.Outcome(
        False, "HTTP 500"
    )


async def test_101_is_a_failure_at_once(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(
        lambda _: b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await client.post(f"http://127.0.0.1:{ep.port}/", JSON, 5, None) == sender.Outcome(
        False, "HTTP 101"
    )
    assert loop.time() - started < 2, "not held until the deadline"


async def test_a_large_answer_is_not_read_whole_and_its_connection_closes(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    big = b"x" * (sender.KEEP_BODY * 4)
    ep = await serve(lambda n: reply(200, big if n == 1 else b"small"))
    url = f"http://127.0.0.1:{ep.port}/"
    assert (await client.post(url, JSON, 5, None)).ok
    assert (await client.post(url, JSON, 5, None)).ok
    assert (await client.post(url, JSON, 5, None)).ok
    assert ep.connections == 2, "a new connection after the large answer, then kept"


async def test_connection_close_from_the_endpoint_is_respected(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda _: reply(200, extra="Connection: close\r\n"))
    url = f"http://127.0.0.1:{ep.port}/"
    for _ in range(3):
        assert (await client.post(url, JSON, 5, None)).ok
    assert ep.connections == 3


async def test_no_answer_within_the_time_left_is_a_timeout(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda n: None if n == 1 else reply(200))
    url = f"http://127.0.0.1:{ep.port}/"
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await client.post(url, JSON, 0.3, None) == sender.Outcome(False, "timeout")
    assert 0.25 < loop.time() - started < 2
    assert (await client.post(url, JSON, 5, None)).ok
    assert ep.connections == 2, "the connection of the unanswered request is dropped"


async def test_many_exchanges_time_out_each_by_its_own_deadline(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda _: None)
    url = f"http://127.0.0.1:{ep.port}/"
    loop = asyncio.get_running_loop()

    async def timed(seconds: float) -> tuple[sender.Outcome, float]:
        started = loop.time()
        outcome = await client.post(url, JSON, seconds, None)
        return outcome, loop.time() - started

    results = await asyncio.gather(*(timed(s) for s in (0.2, 0.2, 0.6, 0.6)))
    assert [o for o, _ in results] == [sender.Outcome(False, "timeout")] * 4
    late = sender.TICK + 0.1  # the deadlines are checked every TICK; some slack for a busy machine
    for (_, took), seconds in zip(results, (0.2, 0.2, 0.6, 0.6), strict=True):
        assert seconds <= took < seconds + late, results


async def test_cancelling_a_push_from_outside_is_not_a_timeout(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda _: None)
    push = asyncio.create_task(client.post(f"http://127.0.0.1:{ep.port}/", JSON, 0.2, None))
    await asyncio.sleep(0.1)
    push.cancel()
    with pytest.raises(asyncio.CancelledError):
        await push
    await asyncio.sleep(0.3)  # past the deadline: nothing is left to expire


async def test_connection_errors_are_failures(client: sender.PushClient) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    outcome = await client.post(f"http://127.0.0.1:{port}/", JSON, 5, None)
    assert not outcome.ok and outcome.detail.startswith("ClientConnectorError"), outcome


async def test_tls_certificates_are_verified(
    serve: Callable[..., Awaitable[Endpoint]], client: sender.PushClient
) -> None:
    ep = await serve(lambda _: reply(200), tls=_self_signed_context())
    outcome = await client.post(f"https://localhost:{ep.port}/", JSON, 5, None)
    assert not outcome.ok and "certificate verify failed" in outcome.detail, outcome
    assert ep.requests == []


async def test_https_to_an_endpoint_whose_certificate_is_trusted(
    serve: Callable[..., Awaitable[Endpoint]], tmp_path: Path
) -> None:
    """A private CA is trusted by SSL_CERT_FILE in the gateway's environment (docs/push.md); a
    child process, since aiohttp reads the trust store once, when it is imported."""
    context, cert_pem = _self_signed()
    ep = await serve(lambda _: reply(204), tls=context)
    (tmp_path / "ca.pem").write_bytes(cert_pem)
    script = (
        "import asyncio, sys\n"
        "from gateway.push.body import PushRequest\n"
        "from gateway.push.sender import PushClient\n"
        "async def main():\n"
        "    http = PushClient(2)\n"
        "    outcomes = [await http.post(sys.argv[1], PushRequest(b'x', {}), 5, None) for _ in range(3)]\n"
        "    await http.close()\n"
        "    print(outcomes)\n"
        "asyncio.run(main())\n"
    )
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        f"https://localhost:{ep.port}/tls",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "SSL_CERT_FILE": str(tmp_path / "ca.pem")},
        cwd=Path(__file__).parents[2],
    )
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0, err.decode()[-2000:]
    assert out.decode().strip() == "[" + ", ".join([repr(sender.Outcome(True, "HTTP 204"))] * 3) + "]"
    assert [line for line, _, _ in ep.requests] == ["POST /tls HTTP/1.1"] * 3
    assert ep.connections == 1, "TLS connections are kept alive too"


def _self_signed_context() -> ssl.SSLContext:
    return _self_signed()[0]


def _self_signed() -> tuple[ssl.SSLContext, bytes]:
    """A server context for `localhost` and its certificate (PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as folder:
        cert_file, key_file = Path(folder) / "cert.pem", Path(folder) / "key.pem"
        cert_file.write_bytes(cert_pem)
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        context.load_cert_chain(cert_file, key_file)
    return context, cert_pem
