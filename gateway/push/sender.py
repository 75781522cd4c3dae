"""One push request, judged as Pub/Sub judges it, over aiohttp's connection pool.

Success is HTTP 102, 200, 201, 202 or 204. Any other status (redirects are not followed), a
connection error, or no answer within the timeout (what is left of the ack deadline) is a
failure: the message is nacked.

aiohttp does the connections: its `TCPConnector` pools keep-alive connections per host, port and
TLS setting, resolves and caches names, and verifies TLS; its protocol parses every response
(the C llhttp parser) and decides whether the connection may be reused. This module writes the
request itself, a POST whose head is built once per endpoint, on a connection the connector hands
out (`BaseConnector.connect`), and reads the answer from that connection's protocol.
`ClientSession.post` would build a request and a response object, a timer and, on Python 3.11,
a task per request: on the benchmark machine that was ~55 us of CPU per request against ~20 us
this way, and the HTTP client was three quarters of what a push cost the gateway
(docs/push.md, "Benchmark").

Destinations are checked where the connection is made: the connector's resolver is wrapped by
`_GuardedResolver`, which refuses a name when any address it resolves to is refused by the
destination policy (endpoints.py), and aiohttp connects only to the addresses the resolver
returned, so a name cannot resolve to one address when checked and another when connected to
(DNS rebinding). Hosts that are addresses themselves never reach a resolver and are judged
before connecting. TLS still verifies, and SNI and Host still name, the URL's host. A refused
push is a failure like an unreachable endpoint, marked `refused` for the dispatcher's log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import socket

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from gateway.push.body import SUCCESS_STATUSES, PushRequest
from gateway.translate import endpoints

USER_AGENT = "pubsub-kafka-gateway-push"
KEEP_BODY = 64 * 1024  # a response body is read (so the connection is kept) up to this size
PROCESSING = 102  # an interim status, yet a success for Pub/Sub: the final response is not awaited
SWITCHING_PROTOCOLS = 101  # not HTTP any more: a failure
MIN_TIMEOUT = 0.05
TICK = 0.05  # how often deadlines are checked: a timeout fires up to this late
MAX_ENDPOINTS = 1024  # endpoints whose request head is kept; forgotten all at once past this
_NO_LIMITS = aiohttp.ClientTimeout()  # the whole exchange is bounded by its deadline (_Deadlines)


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    detail: str  # "HTTP 200", "timeout", "ClientConnectorError: ...", why a destination is refused
    refused: bool = False  # by the push destination policy: not sent at all
    # gRPC push's answers (grpc_push.py) that are not failures of the endpoint: ABORTED nacks the
    # message and nothing else; UNAVAILABLE nacks it and slows the push rate (window.PushRate).
    aborted: bool = False
    push_back: bool = False


_SUCCEEDED = {status: Outcome(True, f"HTTP {status}") for status in SUCCESS_STATUSES}  # one each, shared


@dataclasses.dataclass(frozen=True, slots=True)
class _Endpoint:
    key: aiohttp.ClientRequest  # what the connector pools connections by: host, port, TLS
    head: str  # request line and the headers every request to this URL carries
    basic_auth: str  # an Authorization header line from user:password in the URL, or ""
    refused: Outcome | None  # the host is an address the destination policy refuses


class PushClient:
    """The process's one HTTP client for push: at most `max_connections` connections at once."""

    def __init__(
        self,
        max_connections: int,
        destinations: endpoints.Policy = endpoints.DEFAULT_POLICY,
        resolver: AbstractResolver | None = None,
    ) -> None:
        """`resolver` (default aiohttp's) resolves names; its answers are checked against
        `destinations`, and so are hosts that are addresses."""
        self.destinations = destinations
        self._resolver = _GuardedResolver(resolver or DefaultResolver(), destinations)
        self._connector = aiohttp.TCPConnector(
            limit=max_connections,
            limit_per_host=0,
            keepalive_timeout=30,
            ttl_dns_cache=60,
            resolver=self._resolver,
        )
        self._endpoints: dict[str, _Endpoint] = {}
        self._deadlines = _Deadlines()

    async def close(self) -> None:
        self._deadlines.stop()
        await self._connector.close()
        await self._resolver.close()

    async def post(self, url: str, request: PushRequest, time_left: float, token: str | None) -> Outcome:
        task = asyncio.current_task()
        assert task is not None
        try:
            endpoint = self._endpoint(url)
            if endpoint.refused is not None:
                return endpoint.refused
            lines = [endpoint.head]
            lines.extend(f"{name}: {value}\r\n" for name, value in request.headers.items())
            if token is not None:
                lines.append(f"Authorization: Bearer {token}\r\n")
            elif endpoint.basic_auth:
                lines.append(endpoint.basic_auth)
            lines.append(f"Content-Length: {len(request.body)}\r\n\r\n")
            data = "".join(lines).encode() + request.body
            deadline = self._deadlines.add(task, max(MIN_TIMEOUT, time_left))
            try:
                status = await self._exchange(endpoint.key, data)
            except asyncio.CancelledError:
                if deadline.expired and task.uncancel() <= deadline.cancelling:
                    return Outcome(False, "timeout")
                raise  # stopped from outside
            finally:
                self._deadlines.remove(task)
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, DestinationRefused):
                return Outcome(False, str(exc.os_error), refused=True)
            return Outcome(False, f"{type(exc).__name__}: {exc}")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return Outcome(False, f"{type(exc).__name__}: {exc}")
        return _SUCCEEDED.get(status) or Outcome(False, f"HTTP {status}")

    async def _exchange(self, key: aiohttp.ClientRequest, data: bytes) -> int:
        """Send `data` on a pooled connection; the final status (or 102). The connection goes back
        to the pool when the response was read whole and aiohttp's protocol allows keep-alive."""
        conn = await self._connector.connect(key, [], _NO_LIMITS)
        keep = False
        try:
            protocol = conn.protocol
            transport = conn.transport
            if protocol is None or transport is None or transport.is_closing():
                raise aiohttp.ServerDisconnectedError()
            protocol.set_response_params(auto_decompress=False)
            transport.write(data)
            status = 100
            while status < 200 and status not in (PROCESSING, SWITCHING_PROTOCOLS):
                message, payload = await protocol.read()  # 100 Continue, 103 Early Hints: read on
                status = message.code
            if status < 200:
                return status  # 102 acks and 101 fails without a body; the connection is not reused
            received = 0
            while not payload.is_eof() and received <= KEEP_BODY:
                received += len(await payload.readany())
            keep = received <= KEEP_BODY
            return status
        finally:
            if keep:
                conn.release()
            else:
                conn.close()

    def _endpoint(self, url: str) -> _Endpoint:
        found = self._endpoints.get(url)
        if found is None:
            if len(self._endpoints) >= MAX_ENDPOINTS:
                self._endpoints.clear()
            found = self._endpoints[url] = _describe(url, self.destinations)
        return found


class DestinationRefused(OSError):
    """A name resolved to an address the push destination policy refuses."""


class _GuardedResolver(AbstractResolver):
    """Resolves with `inner`, and refuses a name unless every address it resolves to is allowed:
    the connector then connects only to those addresses."""

    def __init__(self, inner: AbstractResolver, destinations: endpoints.Policy) -> None:
        self._inner = inner
        self._destinations = destinations

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        for result in found:
            why = _address_refusal(result["host"], self._destinations)
            if why is not None:
                raise DestinationRefused(f"{host} resolves to {result['host']}, {why}")
        return found

    async def close(self) -> None:
        await self._inner.close()


def _address_refusal(text: str, destinations: endpoints.Policy) -> str | None:
    """Why `destinations` refuses the address `text` (as a resolver or a URL writes it)."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return "which is not an IP address"
    why = endpoints.refusal(address, destinations)
    return None if why is None else f"which is {why}"


@dataclasses.dataclass(slots=True)
class _Deadline:
    at: float  # loop time
    cancelling: int  # the task's cancel requests when the exchange began
    expired: bool = False


class _Deadlines:
    """The deadlines of the exchanges under way, enforced by one timer for all of them: an exchange
    past its deadline is cancelled within TICK seconds. `asyncio.timeout` would arm and disarm a
    timer of the event loop per request, which costs more CPU than writing the request."""

    def __init__(self) -> None:
        self._running: dict[asyncio.Task[object], _Deadline] = {}  # by the task awaiting the exchange
        self._timer: asyncio.TimerHandle | None = None

    def add(self, task: asyncio.Task[object], seconds: float) -> _Deadline:
        loop = asyncio.get_running_loop()
        deadline = self._running[task] = _Deadline(loop.time() + seconds, task.cancelling())
        if self._timer is None:
            self._timer = loop.call_later(TICK, self._sweep)
        return deadline

    def remove(self, task: asyncio.Task[object]) -> None:
        del self._running[task]

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for task, deadline in self._running.items():
            if deadline.at <= now and not deadline.expired:
                deadline.expired = True
                task.cancel()  # raised where the task awaits inside the exchange
        self._timer = loop.call_later(TICK, self._sweep) if self._running else None


def _describe(url: str, destinations: endpoints.Policy) -> _Endpoint:
    parsed = yarl.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise ValueError(f"not an http or https URL with a host: {endpoints.mask(url)!r}")
    refused = _host_refusal(parsed.raw_host, destinations)
    host = parsed.raw_host
    if ":" in host:
        host = f"[{host}]"
    if not parsed.is_default_port():
        host = f"{host}:{parsed.port}"
    head = f"POST {parsed.raw_path_qs} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {USER_AGENT}\r\n"
    auth = aiohttp.BasicAuth.from_url(parsed)
    basic = f"Authorization: {auth.encode()}\r\n" if auth is not None else ""
    key = aiohttp.ClientRequest("POST", parsed.with_user(None), loop=asyncio.get_running_loop())
    return _Endpoint(key, head, basic, refused)


def _host_refusal(host: str, destinations: endpoints.Policy) -> Outcome | None:
    """A refused outcome when `host` is an address (in any spelling) `destinations` refuses, or
    looks like an IPv6 address without being one (aiohttp would connect to it unresolved).
    Names are left to the resolver."""
    address = endpoints.host_address(host)
    if address is None:
        if ":" not in host:
            return None
        return Outcome(False, f"{host} is not an IP address", refused=True)
    why = endpoints.refusal(address, destinations)
    if why is None:
        return None
    spelled = host if str(address) == host else f"{host} ({address})"
    return Outcome(False, f"{spelled} is {why}", refused=True)
