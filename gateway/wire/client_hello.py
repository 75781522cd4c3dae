"""What a TLS ClientHello offers, read from the first bytes of a connection.

Under TLS the shared port (shared_port.py) cannot tell gRPC from REST by the HTTP/2 preface:
the first bytes are a ClientHello. What the client offers in its ALPN extension (RFC 7301)
says it instead: gRPC clients offer `h2` alone (grpc core once added `grpc-exp`), HTTP/1.1
clients offer `http/1.1` or no ALPN at all. The shared port peeks at the bytes and leaves
them in the socket for whoever terminates TLS; this module only reads them.

Pure functions on bytes, no I/O. The layouts read, from RFC 8446 (4.1.2, 5.1) and RFC 5246
(6.2.1, 7.4.1.2): records of `type(1) version(2) length(2) fragment`, the handshake message
`type(1) length(3) body` possibly split over several records, and the ClientHello body
`version(2) random(32) session_id<0..32> cipher_suites<2..2^16-2>
compression_methods<1..2^8-1> [extensions<8..2^16-1>]`. Whatever is not a well-formed
ClientHello within `limit` bytes raises `HelloError`, and nothing else is ever raised.
"""

from __future__ import annotations

import dataclasses

RECORD_HEADER = 5
HANDSHAKE_HEADER = 4
CONTENT_HANDSHAKE = 22
HANDSHAKE_CLIENT_HELLO = 1
MAX_FRAGMENT = 1 << 14  # a TLSPlaintext fragment's limit (RFC 8446 5.1)
EXTENSION_ALPN = 16
# Hellos are ~0.5-2 KiB (post-quantum key shares included) and one record holds up to 16 KiB.
# The bytes stay in the socket's receive buffer while they are read, so the limit stays well
# under what that buffer holds by default.
MAX_HELLO_BYTES = 32 * 1024
HTTP1 = b"http/1.1"


class HelloError(ValueError):
    """The bytes are not the start of a TLS connection the gateway serves."""


@dataclasses.dataclass(frozen=True, slots=True)
class Incomplete:
    """More bytes are needed: `needed` in all (more than those given, at most the limit)."""

    needed: int


@dataclasses.dataclass(frozen=True, slots=True)
class ClientHello:
    """`alpn`: the protocols offered, in the client's order; None without an ALPN extension.
    `size`: the bytes of the records that carried the hello."""

    alpn: tuple[bytes, ...] | None
    size: int

    @property
    def wants_http1(self) -> bool:
        """HTTP/1.1 (REST): offered, or no ALPN at all (a client that does not say is a plain
        HTTPS client; gRPC clients always offer h2)."""
        return self.alpn is None or HTTP1 in self.alpn


def parse(data: bytes, limit: int = MAX_HELLO_BYTES) -> ClientHello | Incomplete:
    """The ClientHello at the start of `data`, or how many bytes are needed to read it."""
    found = _handshake_message(data, limit)
    if isinstance(found, Incomplete):
        return found
    body, size = found
    return ClientHello(_alpn(body), size)


def _handshake_message(data: bytes, limit: int) -> tuple[bytes, int] | Incomplete:
    """The ClientHello's body, reassembled from the handshake records it came in, and the
    bytes those records took."""
    fragments = bytearray()
    offset = 0
    total: int | None = None  # the message's length with its header, once that is read
    while total is None or len(fragments) < total:
        if offset + RECORD_HEADER > limit:
            raise HelloError(f"no ClientHello within {limit} bytes")
        if len(data) < offset + RECORD_HEADER:
            if not _could_be_tls(data[offset:]):
                raise HelloError("not a TLS handshake record")
            return Incomplete(offset + RECORD_HEADER)
        header = data[offset : offset + RECORD_HEADER]
        if not _could_be_tls(header):
            raise HelloError("not a TLS handshake record")
        length = int.from_bytes(header[3:5], "big")
        if length == 0 or length > MAX_FRAGMENT:
            raise HelloError(f"a handshake record of {length} bytes")
        end = offset + RECORD_HEADER + length
        if end > limit:
            raise HelloError(f"no ClientHello within {limit} bytes")
        if len(data) < end:
            return Incomplete(end)
        fragments += data[offset + RECORD_HEADER : end]
        offset = end
        if total is None and len(fragments) >= HANDSHAKE_HEADER:
            if fragments[0] != HANDSHAKE_CLIENT_HELLO:
                raise HelloError(f"the first handshake message is of type {fragments[0]}, not ClientHello")
            total = HANDSHAKE_HEADER + int.from_bytes(fragments[1:4], "big")
            if total > limit:
                raise HelloError(f"a ClientHello of {total} bytes, over {limit}")
    # What follows the hello in its last record (nothing, from a well-behaved client) is not ours.
    return bytes(fragments[HANDSHAKE_HEADER:total]), offset


def _could_be_tls(header: bytes) -> bool:
    """Whether a record header (or its first bytes) is a handshake record of TLS 1.x."""
    expected = (CONTENT_HANDSHAKE, 3)  # the type, the major version
    return all(got == want for got, want in zip(header[:2], expected, strict=False))


class _Reader:
    """Big-endian fields of a byte string; running past its end is a HelloError."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    @property
    def left(self) -> int:
        return len(self._data) - self._at

    def take(self, n: int) -> bytes:
        if n > self.left:
            raise HelloError("the ClientHello ends inside a field")
        out = self._data[self._at : self._at + n]
        self._at += n
        return out

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, size: int, minimum: int = 0, maximum: int | None = None) -> bytes:
        """A `<minimum..maximum>` vector whose length takes `size` bytes."""
        length = self.number(size)
        if length < minimum or (maximum is not None and length > maximum):
            allowed = f"{minimum}..{maximum}" if maximum is not None else f"at least {minimum}"
            raise HelloError(f"a vector of {length} bytes where {allowed} are allowed")
        return self.take(length)


def _alpn(body: bytes) -> tuple[bytes, ...] | None:
    hello = _Reader(body)
    if hello.number(1) != 3:  # legacy_version: 3.x (TLS 1.2 and 1.3 both say 3.3 here)
        raise HelloError("a ClientHello of a protocol version that is not TLS")
    hello.take(1 + 32)  # the minor version, random
    hello.vector(1, maximum=32)  # legacy_session_id
    suites = hello.vector(2, minimum=2)
    if len(suites) % 2:
        raise HelloError("cipher suites of an odd length")
    hello.vector(1, minimum=1)  # legacy_compression_methods
    if not hello.left:
        return None  # no extensions (TLS 1.2 allows that): no ALPN
    extensions = _Reader(hello.vector(2))
    if hello.left:
        raise HelloError("bytes after the extensions")
    seen: set[int] = set()
    alpn: tuple[bytes, ...] | None = None
    while extensions.left:
        kind = extensions.number(2)
        data = extensions.vector(2)
        if kind in seen:
            raise HelloError(f"extension {kind} twice")
        seen.add(kind)
        if kind == EXTENSION_ALPN:
            alpn = _protocol_names(data)
    return alpn


def _protocol_names(data: bytes) -> tuple[bytes, ...]:
    """ProtocolNameList: `ProtocolName protocol_name_list<2..2^16-1>`, each name `<1..2^8-1>`."""
    outer = _Reader(data)
    names = _Reader(outer.vector(2, minimum=2))
    if outer.left:
        raise HelloError("bytes after the ALPN protocol list")
    out: list[bytes] = []
    while names.left:
        out.append(names.vector(1, minimum=1))
    return tuple(out)
