"""The destination policy where pushes connect (gateway.push.sender), on real loopback sockets.

Names are resolved by a stub resolver that answers as a test says, so that a name can point at
any address, change its answer between lookups (DNS rebinding), or answer several addresses.
A small asyncio server on 127.0.0.1 counts every connection it gets. No broker.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.push import dispatcher as dispatcher_mod
from gateway.push import sender
from gateway.push.auth import TokenSigner
from gateway.push.body import PushRequest
from gateway.push.http_push import HttpPusher
from tests.unit.test_push_dispatcher import SUB, FakeCore

pytestmark = pytest.mark.asyncio(loop_scope="session")
REQUEST = PushRequest(b"{}", {"content-type": "application/json"})


class StubResolver(AbstractResolver):
    """Answers `answers[name]` (a list of address lists, one per lookup; the last repeats)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        turns = self.answers[host]
        found = turns.pop(0) if len(turns) > 1 else turns[0]
        return [
            ResolveResult(
                hostname=host,
                host=a,
                port=port,
                family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for a in found
        ]

    async def close(self) -> None:
        pass


class Server:
    def __init__(self) -> None:
        self.connections = 0
        self.heads: list[str] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                self.heads.append(head)
                length = next(
                    int(line.split(":")[1])
                    for line in head.split("\r\n")
                    if line.lower().startswith("content-length")
                )
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
                return  # every push needs a new connection, and so a lookup
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    listener = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    srv.port = listener.sockets[0].getsockname()[1]
    yield srv
    listener.close()
    await listener.wait_closed()


async def _post(
    policy: str, answers: dict[str, list[list[str]]], url: str
) -> tuple[sender.Outcome, StubResolver]:
    resolver = StubResolver(answers)
    client = sender.PushClient(2, policy, resolver=resolver)  # type: ignore[arg-type]
    try:
        return await client.post(url, REQUEST, 5, None), resolver
    finally:
        await client.close()


async def test_a_name_is_connected_to_the_address_it_resolved_to(server: Server) -> None:
    outcome, resolver = await _post(
        "any", {"push.test": [["127.0.0.1"]]}, f"http://push.test:{server.port}/p"
    )
    assert outcome == sender.Outcome(True, "HTTP 200")
    assert resolver.lookups == ["push.test"]
    assert f"Host: push.test:{server.port}\r\n" in server.heads[0], "Host names the URL's host"


@pytest.mark.parametrize(
    ("policy", "addresses"),
    [
        ("public", ["127.0.0.1"]),
        ("public", ["::1"]),
        ("public", ["::ffff:127.0.0.1"]),
        ("public", ["10.1.2.3"]),
        ("public", ["100.64.0.9"]),
        ("public", ["8.8.8.8", "127.0.0.1"]),  # one refused address refuses the name
        ("any", ["169.254.169.254"]),
        ("any", ["::ffff:169.254.169.254"]),
        ("any", ["fe80::1%1"]),
        ("any", ["0.0.0.0"]),
        ("any", ["127.0.0.1", "169.254.169.254"]),
        ("any", ["not-an-address"]),
    ],
)
async def test_names_resolving_to_refused_addresses_are_not_connected(
    server: Server, policy: str, addresses: list[str]
) -> None:
    outcome, _ = await _post(policy, {"rebind.test": [addresses]}, f"http://rebind.test:{server.port}/")
    assert not outcome.ok and outcome.refused, outcome
    assert outcome.detail.startswith("rebind.test resolves to "), outcome
    assert server.connections == 0


async def test_a_name_that_changes_its_answer_is_checked_at_each_lookup(server: Server) -> None:
    """DNS rebinding: allowed when first looked up, then pointing at the metadata address. Each
    lookup is checked, and the connection goes only to what the checked lookup said."""
    resolver = StubResolver({"rebind.test": [["127.0.0.1"], ["169.254.169.254"]]})
    client = sender.PushClient(1, "any", resolver=resolver)
    url = f"http://rebind.test:{server.port}/"
    try:
        assert (await client.post(url, REQUEST, 5, None)).ok
        client._connector.clear_dns_cache()  # as when the cache's 60 s are up
        second = await client.post(url, REQUEST, 5, None)
    finally:
        await client.close()
    assert second.refused and "169.254.169.254" in second.detail
    assert resolver.lookups == ["rebind.test"] * 2
    assert server.connections == 1 and len(server.heads) == 1


@pytest.mark.parametrize(
    ("policy", "url"),
    [
        ("any", "http://169.254.169.254:{port}/"),
        ("any", "http://0xa9fea9fe:{port}/"),
        ("any", "http://[::ffff:169.254.169.254]:{port}/"),
        ("any", "http://[fe80::1%25lo]:{port}/"),
        ("any", "http://0.0.0.0:{port}/"),
        ("any", "http://[::]:{port}/"),
        ("public", "http://127.0.0.1:{port}/"),
        ("public", "http://0x7f000001:{port}/"),
        ("public", "http://[::ffff:127.0.0.1]:{port}/"),
        ("public", "http://user:pw@127.0.0.1:{port}/"),
    ],
)
async def test_literal_addresses_are_judged_without_a_resolver(server: Server, policy: str, url: str) -> None:
    outcome, resolver = await _post(policy, {}, url.format(port=server.port))
    assert not outcome.ok and outcome.refused, outcome
    assert resolver.lookups == [] and server.connections == 0
    assert "pw" not in outcome.detail


async def test_loopback_is_allowed_by_default(server: Server) -> None:
    outcome, _ = await _post("any", {}, f"http://127.0.0.1:{server.port}/")
    assert outcome.ok and not outcome.refused


# -- the dispatcher: a refused push is a failure like an unreachable endpoint -------------------


class RefusingEndpoint:
    def __init__(self, core: FakeCore) -> None:
        self.core = core
        self.posts = 0

    async def post(
        self, url: str, request: PushRequest, time_left: float, token: str | None
    ) -> sender.Outcome:
        self.posts += 1
        self.core.changed.set()
        await asyncio.sleep(0)
        return sender.Outcome(False, "rebind.test resolves to 10.0.0.1, which is private", refused=True)


def _resource(endpoint: str) -> Any:
    push = SimpleNamespace(
        push_endpoint=endpoint,
        no_wrapper=SimpleNamespace(write_metadata=False),
        oidc_token=SimpleNamespace(service_account_email="", audience=""),
        HasField=lambda _: False,
    )
    proto = SimpleNamespace(
        push_config=push, ack_deadline_seconds=10, enable_message_ordering=False, HasField=lambda _: False
    )
    return SimpleNamespace(name=SUB, meta=SimpleNamespace(uid="u1"), proto=proto)


async def test_refused_pushes_are_nacked_backed_off_and_warned_about_rarely(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core = FakeCore(3)
    endpoint = RefusingEndpoint(core)
    res = _resource("http://user:s3cret@rebind.test/p?token=t0ken")
    d = dispatcher_mod.Dispatcher(
        res,
        core,  # type: ignore[arg-type]
        HttpPusher(res, endpoint, TokenSigner(list, "http://i")),  # type: ignore[arg-type]
        100,
        max_senders=10,
    )
    caplog.set_level(logging.DEBUG, logger="gateway.push")
    d.start()
    try:
        await asyncio.sleep(1.6)
    finally:
        await d.stop(grace=1)
    assert core.acked == []
    assert sorted(set(core.nacked)) == ["m0", "m1", "m2"], "every message went back to the subscription"
    assert sorted(core.backlog) == sorted(set(core.backlog)) and set(core.backlog) == {"m0", "m1", "m2"}
    assert endpoint.posts <= 3 + 5, "the push backoff applies (0.1 + 0.2 + 0.4 + 0.8 s)"
    assert d.backoff.delay >= 0.8
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    text = warnings[0].getMessage()
    assert SUB in text and "http://***@rebind.test/p?token=***" in text and "policy" in text
    assert all("s3cret" not in r.getMessage() and "t0ken" not in r.getMessage() for r in caplog.records)


async def test_the_warning_repeats_once_a_minute_with_a_count(caplog: pytest.LogCaptureFixture) -> None:
    core = FakeCore(0)
    res = _resource("http://rebind.test/")
    d = dispatcher_mod.Dispatcher(
        res,
        core,  # type: ignore[arg-type]
        HttpPusher(res, RefusingEndpoint(core), TokenSigner(list, "http://i")),  # type: ignore[arg-type]
        100,
        max_senders=10,
    )
    refused = sender.Outcome(False, "refused", refused=True)
    caplog.set_level(logging.WARNING, logger="gateway.push")
    for now in (0.0, 1.0, 30.0, 59.0, 61.0, 62.0, 125.0):
        d._log_refusal(refused, now)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages
    assert "since the previous" not in messages[0]
    assert "(4 refused since the previous warning)" in messages[1]
    assert "(2 refused since the previous warning)" in messages[2]
