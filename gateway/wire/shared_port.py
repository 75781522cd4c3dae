"""One port for gRPC and REST, as Google's emulator has (docs/connections.md, "One port").

The listener accepts every connection itself and reads its first bytes. gRPC clients open
HTTP/2 with prior knowledge, so their connections start with the HTTP/2 preface; every other
connection is taken for HTTP/1.1. Then:
- an HTTP/1.1 connection becomes a transport of the event loop with the REST server's
  protocol (its ConnectionGuard, so the REST limits hold), the bytes already read replayed to
  it first: REST runs as on a port of its own, no copy in between;
- an HTTP/2 connection goes to the pump (pump.py), which joins it to the gRPC server listening
  on a private unix socket, so the gRPC server's options (handshake, idle, age, keepalive,
  streams, message sizes) hold as on a port of its own. `--grpc-max-connections` is counted here.

Under TLS (`tls`, the REST server's SSLContext) the first bytes are a ClientHello instead. The
listener peeks at them (MSG_PEEK: they stay in the socket) until the whole hello is there, and
its ALPN extension says (client_hello.py): `http/1.1` offered, or no ALPN at all, is REST, and
the connection becomes a TLS transport of the event loop (the loop does the handshake, then
REST's protocol runs as above); anything else (gRPC clients offer `h2`) goes to the pump as it
is, still encrypted, and the gRPC server behind it terminates TLS with its own credentials, so
the pump stays a byte pump. Bytes that are not a ClientHello (plaintext HTTP, the HTTP/2
preface, garbage) close the connection: a TLS port never serves in the clear.

A connection that has not said which it is yet is pending: it has `first_bytes_timeout`
seconds to do so, and at most `max_pending` wait at once; one more closes the oldest (clients
send their first bytes as they connect, so those waiting longest are the likeliest idle ones,
and a flood of idle connections cannot keep new clients out).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable, Coroutine

from gateway.errors import CannotListen
from gateway.wire import client_hello
from gateway.wire.pump import Pumps

log = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113, 3.4: what every HTTP/2 client sends first
READ_SIZE = 1 << 16
BACKLOG = 1024
ACCEPTS_PER_WAKEUP = 64  # then the loop serves others before accepting more
ACCEPT_PAUSE_SECONDS = 1.0  # after EMFILE and the like, as asyncio's own servers pause
LOG_INTERVAL = 10.0
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class Protocol(enum.Enum):
    GRPC = "grpc"
    REST = "rest"


def identify(first: bytes) -> Protocol | None:
    """The protocol a connection's first bytes say, or None while they may still be either."""
    if first.startswith(PREFACE):
        return Protocol.GRPC
    if PREFACE.startswith(first):  # empty, or a part of the preface: wait for more
        return None
    return Protocol.REST


@dataclasses.dataclass(frozen=True, slots=True)
class PortLimits:
    first_bytes_timeout: float
    max_pending: int
    grpc_max_connections: int
    tls_handshake_timeout: float = 10.0  # REST under TLS: the rest of its handshake, once the hello came


class _Handoff(asyncio.Protocol):
    """Gives the transport to REST's protocol, after replaying what the listener read."""

    def __init__(self, inner: asyncio.Protocol, first: bytes) -> None:
        self._inner = inner
        self._first = first

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        inner = self._inner
        transport.set_protocol(inner)  # from now on the loop calls REST's protocol directly
        inner.connection_made(transport)
        inner.data_received(self._first)


@dataclasses.dataclass(slots=True)
class _Pending:
    timer: asyncio.TimerHandle
    first: bytes = b""
    peeked: int = 0  # under TLS: the bytes seen in the socket so far, still unread


def _low_water(sock: socket.socket, size: int) -> None:
    """Wake the listener only once `size` bytes are in the socket (or it ends): peeked bytes
    stay there, so the socket would otherwise be readable, and wake it, all the time."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no SO_RCVLOWAT here
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)


class SharedPort:
    """The public listener of a shared port. `bind()` takes the port, `serve()` starts
    accepting (once REST's protocol factory exists), `close()` stops (idempotent)."""

    def __init__(
        self,
        host: str,
        port: int,
        limits: PortLimits,
        pumps: Pumps,
        tls: ssl.SSLContext | None = None,
        *,
        reuse_port: bool = False,
    ) -> None:
        self._host = host
        self._reuse_port = reuse_port  # the port is shared with the other workers (--workers)
        self._requested_port = port
        self._limits = limits
        self._pumps = pumps
        self._tls = tls
        self._rest: Callable[[], asyncio.Protocol] | None = None
        self._listeners: list[socket.socket] = []
        self._pending: dict[socket.socket, _Pending] = {}  # oldest first
        self._handoffs: set[asyncio.Task[object]] = set()
        self._paused: asyncio.TimerHandle | None = None
        self._logged_at: dict[str, float] = {}
        self.port = 0
        # What happened to connections, for logs and tests.
        self.timed_out = self.evicted = self.refused_grpc = self.refused_not_tls = 0

    @property
    def pending_connections(self) -> int:
        return len(self._pending)

    async def bind(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(
                self._host or None, self._requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            port = self._requested_port
            seen: set[tuple[int, object]] = set()
            # IPv6 sockets take IPv4 too (as gRPC's own listener on `::` did), unless the name
            # also gave an IPv4 address, which then has a socket of its own.
            v6_only = len({info[0] for info in infos}) > 1
            for family, kind, proto, _, address in infos:
                if (family, address[0]) in seen:
                    continue
                seen.add((family, address[0]))
                sock = socket.socket(family, kind, proto)
                self._listeners.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if self._reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6_only))
                sock.bind((address[0], port, *address[2:]))  # port 0: the first picks it for all
                sock.listen(BACKLOG)
                sock.setblocking(False)
                port = sock.getsockname()[1]
        except OSError as exc:
            self._close_listeners()
            raise CannotListen(f"cannot listen on {self._host}:{self._requested_port}: {exc}") from None
        self.port = port
        return port

    def serve(self, rest: Callable[[], asyncio.Protocol]) -> None:
        self._rest = rest
        self._watch_listeners()

    def _watch_listeners(self) -> None:
        self._paused = None
        loop = asyncio.get_running_loop()
        for sock in self._listeners:
            loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                sock, _address = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._pause_accepting(exc)
                # Otherwise (ECONNABORTED, ...) one connection failed: go on with the next.
                return
            self._wait_for_first_bytes(sock)

    def _pause_accepting(self, exc: OSError) -> None:
        self._log("accept", "shared port: cannot accept (%s); pausing %.0f s", exc, ACCEPT_PAUSE_SECONDS)
        loop = asyncio.get_running_loop()
        for sock in self._listeners:
            loop.remove_reader(sock.fileno())
        self._paused = loop.call_later(ACCEPT_PAUSE_SECONDS, self._watch_listeners)

    def _wait_for_first_bytes(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        if len(self._pending) >= self._limits.max_pending:
            self.evicted += 1
            self._log(
                "evict",
                "shared port: %d connections have not sent their first bytes (--max-pending-"
                "connections); closing the oldest (%d so far)",
                len(self._pending),
                self.evicted,
            )
            self._drop(next(iter(self._pending)))
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self._limits.first_bytes_timeout, self._first_bytes_overdue, sock)
        self._pending[sock] = _Pending(timer)
        loop.add_reader(sock.fileno(), self._readable, sock)

    def _readable(self, sock: socket.socket) -> None:
        pending = self._pending.get(sock)
        if pending is None:
            return
        if self._tls is not None:
            self._peek_hello(sock, pending)
            return
        try:
            data = sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sock)
            return
        if not data:  # closed before it said anything usable
            self._drop(sock)
            return
        pending.first += data
        protocol = identify(pending.first)
        if protocol is None:
            return
        self._forget(sock)
        if protocol is Protocol.GRPC:
            self._to_grpc(sock, pending.first)
        else:
            self._to_rest(sock, pending.first)

    def _peek_hello(self, sock: socket.socket, pending: _Pending) -> None:
        try:
            data = sock.recv(client_hello.MAX_HELLO_BYTES, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sock)
            return
        if len(data) <= pending.peeked:  # readable with nothing new: it ended (or is stuck full)
            self._drop(sock)
            return
        pending.peeked = len(data)
        try:
            hello = client_hello.parse(data)
        except client_hello.HelloError as exc:
            self.refused_not_tls += 1
            log.debug("shared port: closing a connection that did not open TLS: %s", exc)
            self._drop(sock)
            return
        if isinstance(hello, client_hello.Incomplete):
            _low_water(sock, hello.needed)
            return
        _low_water(sock, 1)  # as the socket was: the pump's reads and the loop's must not wait
        self._forget(sock)
        if hello.wants_http1:
            self._to_rest(sock, b"")
        else:
            self._to_grpc(sock, b"")  # the hello is still in the socket: the server reads it

    def _to_grpc(self, sock: socket.socket, first: bytes) -> None:
        if self._pumps.open_connections >= self._limits.grpc_max_connections:
            # As the gRPC server does past grpc.max_allowed_incoming_connections: closed at once.
            self.refused_grpc += 1
            self._log(
                "grpc-cap",
                "shared port: %d gRPC connections open, the most --grpc-max-connections allows; "
                "closing new ones (%d so far)",
                self._pumps.open_connections,
                self.refused_grpc,
            )
            sock.close()
            return
        self._pumps.start(sock, first)

    def _to_rest(self, sock: socket.socket, first: bytes) -> None:
        rest = self._rest
        assert rest is not None
        loop = asyncio.get_running_loop()
        handoff: Coroutine[object, object, tuple[asyncio.BaseTransport, asyncio.BaseProtocol]]
        if self._tls is None:
            handoff = loop.connect_accepted_socket(lambda: _Handoff(rest(), first), sock)
        else:  # the loop does the handshake, which reads the hello still in the socket
            handoff = loop.connect_accepted_socket(
                rest, sock, ssl=self._tls, ssl_handshake_timeout=self._limits.tls_handshake_timeout
            )
        task: asyncio.Task[object] = loop.create_task(handoff)
        self._handoffs.add(task)

        def handed_off(done: asyncio.Task[object]) -> None:
            self._handoffs.discard(done)
            if done.cancelled() or done.exception() is not None:
                log.debug(
                    "shared port: a REST connection was lost on its way to the server: %r",
                    None if done.cancelled() else done.exception(),
                )
                sock.close()

        task.add_done_callback(handed_off)

    def _first_bytes_overdue(self, sock: socket.socket) -> None:
        if sock in self._pending:
            self.timed_out += 1
            log.debug(
                "shared port: closing a connection that sent no protocol's first bytes within %.1f s",
                self._limits.first_bytes_timeout,
            )
            self._drop(sock)

    def _forget(self, sock: socket.socket) -> None:
        pending = self._pending.pop(sock, None)
        if pending is not None:
            pending.timer.cancel()
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(sock.fileno())

    def _drop(self, sock: socket.socket) -> None:
        self._forget(sock)
        sock.close()

    def _log(self, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._logged_at.get(kind, -LOG_INTERVAL) >= LOG_INTERVAL:
            self._logged_at[kind] = now
            log.warning(message, *args)

    def _close_listeners(self) -> None:
        with contextlib.suppress(RuntimeError):  # no running loop: nothing is watched
            loop = asyncio.get_running_loop()
            for sock in self._listeners:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(sock.fileno())
        for sock in self._listeners:
            sock.close()
        self._listeners.clear()

    async def close(self) -> None:
        """Accept nothing more; close the connections that have not said what they are. Those
        handed over are their servers' to end."""
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        self._close_listeners()
        for sock in list(self._pending):
            self._drop(sock)
        handoffs = list(self._handoffs)
        for task in handoffs:
            task.cancel()
        await asyncio.gather(*handoffs, return_exceptions=True)

    async def __aenter__(self) -> SharedPort:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
