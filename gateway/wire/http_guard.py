"""Connection limits of the REST port, around aiohttp's own connection handling.

aiohttp closes a connection that has not sent a complete request head for `keepalive_timeout`
(counted from its opening or from its last response). What it lacks is added here:
- a cap on open connections: one past it is answered 503 UNAVAILABLE and closed at once,
  without costing a request handler;
- a deadline on request heads: once a byte of a request arrives, its line and headers must be
  complete within `header_timeout`, or the connection is closed (a client trickling a header
  a byte at a time holds nothing for long).
The request body has a deadline of its own, where the API reads it (rest.py).

`ConnectionGuard` is the protocol factory of the listening socket; each connection's protocol
passes everything on to aiohttp's. The guard's middleware tells it when aiohttp has handed a
request to the application (its head is complete) and when the application is done with it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import web

log = logging.getLogger(__name__)
REFUSAL_LOG_INTERVAL = 10.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _refusal() -> bytes:
    body = json.dumps(
        {
            "error": {
                "code": 503,
                "status": "UNAVAILABLE",
                "message": "The gateway's REST port has too many open connections; retry later.",
            }
        }
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    return head.encode() + body


REFUSAL = _refusal()


class ConnectionGuard:
    """The protocol factory of one listening socket: at most `max_connections` open, and
    `header_timeout` seconds for each request head from its first byte."""

    def __init__(self, max_connections: int, header_timeout: float) -> None:
        # aiohttp's server (its protocol factory) exists once the app runner is set up.
        self.protocol_factory: Callable[[], asyncio.Protocol] | None = None
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self._open: dict[asyncio.BaseTransport, _GuardedConnection] = {}
        self.refused = 0
        self.timed_out = 0
        self._refusals_logged_at = 0.0

    def __call__(self) -> asyncio.Protocol:
        return _GuardedConnection(self)

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def _admit(self, conn: _GuardedConnection, transport: asyncio.BaseTransport) -> bool:
        if len(self._open) >= self.max_connections:
            self.refused += 1
            now = time.monotonic()
            if now - self._refusals_logged_at >= REFUSAL_LOG_INTERVAL:
                self._refusals_logged_at = now
                log.warning(
                    "REST port: %d connections open, the most --http-max-connections allows; "
                    "refusing new ones (%d so far)",
                    len(self._open),
                    self.refused,
                )
            return False
        self._open[transport] = conn
        return True

    def _forget(self, transport: asyncio.BaseTransport) -> None:
        self._open.pop(transport, None)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Outermost middleware: the request's head is complete while the app handles it."""
        conn = self._open.get(request.transport) if request.transport is not None else None
        if conn is None:
            return await handler(request)
        conn.busy += 1
        conn.cancel_timer()
        try:
            return await handler(request)
        finally:
            conn.busy -= 1


class _GuardedConnection(asyncio.Protocol):
    """One connection: admitted or refused, with a head deadline, otherwise aiohttp's protocol."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self._guard = guard
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.busy = 0

    def connection_made(self, base: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, base)  # uvloop's are not asyncio.Transport subclasses
        if not self._guard._admit(self, transport):
            transport.write(REFUSAL)
            transport.close()
            return
        assert self._guard.protocol_factory is not None
        self._transport = transport
        self._inner = self._guard.protocol_factory()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if not self.busy and self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._guard.header_timeout, self._head_overdue)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.cancel_timer()
        if self._transport is not None:
            self._guard._forget(self._transport)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_overdue(self) -> None:
        self._timer = None
        if self.busy or self._transport is None:
            return
        self._guard.timed_out += 1
        log.debug(
            "REST port: closing a connection whose request head took over %.1f s", self._guard.header_timeout
        )
        self._transport.abort()
