"""The byte pump between a gRPC connection of the shared port and the gRPC server behind it.

grpcio cannot adopt a socket it did not accept, so the gRPC server listens on a unix socket in
a private directory and every HTTP/2 connection of the shared port is joined to a connection of
its own to that socket. Two threads per connection copy the bytes, one per direction, with
`splice(2)` through a pipe: the data stays in the kernel, and the threads hold the GIL only
between two system calls, never while they wait or copy. Without `os.splice` (not Linux) they
copy with recv_into/sendall.

Ends, as a direct connection would see them:
- an end of stream (FIN) in one direction is passed on as one (`shutdown(SHUT_WR)`); the other
  direction then has LINGER_SECONDS to end too, as it does when the far side closes after it.
  gRPC never half-closes, so a peer that stays silent after the other's FIN is gone: both
  sockets are then shut down, which a dead client's connection needs (its server-side end was
  closed by the server's keepalive, and nothing would wake the thread reading the client).
- a failed read (a reset) shuts both sockets down at once: the server sees its connection end
  and cancels its calls, and the client sees it closed.
- a failed write (the destination closed: a broken pipe) ends that direction only. The other
  one still carries what its side wrote before closing (a server that answered its last calls
  and closed its connection, while the client's next bytes were on their way) and has
  LINGER_SECONDS to end, as after a FIN. Shutting both down at once lost those answers: the
  client saw "Socket closed" on calls the server had completed.
GOAWAY, keepalive pings and their answers are bytes like any other: the server's connection
limits (idle, age, keepalive, ping strikes) act on its side of the pump, and their ends travel
through it as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time

log = logging.getLogger(__name__)

CHUNK = 1 << 16  # a pipe's default capacity: one splice moves at most this much
LINGER_SECONDS = 5.0
JOIN_SECONDS = 10.0  # at close, after the server stopped: an aborted connection ends at once
# What a pumped connection costs in descriptors: the client's socket, ours to the server and
# the server's end of it, and two pipes (with os.splice).
FILES_PER_CONNECTION = 7 if hasattr(os, "splice") else 3


class _WriteFailed(Exception):
    """The destination takes no more bytes (the OSError is the cause)."""


def _splice(src: socket.socket, dst: socket.socket, pipe: tuple[int, int]) -> None:
    """Copy src to dst until src's end of stream."""
    read_end, write_end = pipe
    src_fd, dst_fd = src.fileno(), dst.fileno()
    while True:
        n = os.splice(src_fd, write_end, CHUNK)
        if n == 0:
            return
        try:
            while n:
                n -= os.splice(read_end, dst_fd, n)
        except OSError as exc:
            raise _WriteFailed() from exc


def _copy(src: socket.socket, dst: socket.socket, pipe: tuple[int, int] | None) -> None:
    if pipe is not None:
        _splice(src, dst, pipe)
        return
    buffer = memoryview(bytearray(CHUNK))
    while n := src.recv_into(buffer):
        try:
            dst.sendall(buffer[:n])
        except OSError as exc:
            raise _WriteFailed() from exc


class _Pump:
    """One client connection and its connection to the server: two threads, one per direction."""

    def __init__(self, pumps: Pumps, public: socket.socket, prefix: bytes) -> None:
        self._pumps = pumps
        self.public = public
        self.internal: socket.socket | None = None
        self._prefix = prefix
        self._pipes: list[int] = []
        self._done = (threading.Event(), threading.Event())  # client->server, server->client
        self._lock = threading.Lock()  # abort() never shuts a descriptor _close() gave back
        self._closed = False
        self.thread = threading.Thread(target=self._run, name="grpc-pump", daemon=True)

    def _run(self) -> None:
        back: threading.Thread | None = None
        try:
            internal = self.internal = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            internal.connect(self._pumps.target)
            internal.sendall(self._prefix)  # what the shared port read to tell the protocol
            to_server, to_client = self._pipe(), self._pipe()
            if self._pumps.closing:
                return
            back = threading.Thread(
                target=self._direction,
                args=(1, internal, self.public, to_client),
                name="grpc-pump",
                daemon=True,
            )
            back.start()
            self._direction(0, self.public, internal, to_server)
        except OSError as exc:
            log.debug("shared port: a gRPC connection could not reach the server: %s", exc)
        finally:
            self.abort() if back is None else back.join()
            self._close()

    def _pipe(self) -> tuple[int, int] | None:
        if not hasattr(os, "splice"):
            return None
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        self._pipes += (read_end, write_end)
        return read_end, write_end

    def _direction(
        self, index: int, src: socket.socket, dst: socket.socket, pipe: tuple[int, int] | None
    ) -> None:
        try:
            _copy(src, dst, pipe)
        except _WriteFailed as exc:  # dst closed: the other direction may still carry its last bytes
            log.debug("shared port: gRPC connection closed by one side: %s", exc.__cause__)
        except OSError as exc:  # reset, or our own shutdown while closing
            log.debug("shared port: gRPC connection ended: %s", exc)
            self._done[index].set()
            self.abort()
            return
        else:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
        self._done[index].set()
        if not self._done[1 - index].wait(LINGER_SECONDS):
            self.abort()

    def abort(self) -> None:
        """End both directions now: wakes the threads wherever they wait."""
        with self._lock:
            if self._closed:
                return
            for sock in (self.public, self.internal):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            self.public.close()
            if self.internal is not None:
                self.internal.close()
            for fd in self._pipes:
                os.close(fd)
            self._pipes.clear()
        self._pumps._forget(self)


class Pumps:
    """Every pumped connection to the gRPC server listening at the unix socket `target`."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.closing = False
        self._lock = threading.Lock()
        self._open: set[_Pump] = set()
        self.started = 0

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def start(self, public: socket.socket, prefix: bytes) -> None:
        """Pump `public` (a connected socket, now the pump's) to the server, `prefix` first."""
        public.setblocking(True)
        with contextlib.suppress(OSError):  # as grpc does on its own sockets: no Nagle delay
            public.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pump = _Pump(self, public, prefix)
        with self._lock:
            if self.closing:
                public.close()
                return
            self._open.add(pump)
            self.started += 1
        pump.thread.start()

    def _forget(self, pump: _Pump) -> None:
        with self._lock:
            self._open.discard(pump)

    async def close(self) -> None:
        """End every pumped connection and join its threads. Run after the gRPC server stopped:
        its calls have ended and their connections closed, so only what lingers is cut."""
        with self._lock:
            self.closing = True
            pumps = list(self._open)
        for pump in pumps:
            pump.abort()
        deadline = time.monotonic() + JOIN_SECONDS

        def join() -> None:
            for pump in pumps:
                pump.thread.join(max(0.0, deadline - time.monotonic()))

        await asyncio.to_thread(join)
        stuck = sum(pump.thread.is_alive() for pump in pumps)
        if stuck:
            log.warning(
                "shared port: %d gRPC connection threads did not end within %.0f s", stuck, JOIN_SECONDS
            )
