"""The ClientHello reader of the shared port under TLS (gateway/wire/client_hello.py): real
hellos from Python's ssl module and from a gRPC client, the same hellos cut into pieces and
re-framed over several records, hand-made malformed ones, and fuzzing: it answers a hello, a
number of bytes still needed, or HelloError, and never raises anything else."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.wire.client_hello import (
    MAX_HELLO_BYTES,
    ClientHello,
    HelloError,
    Incomplete,
    parse,
)
from gateway.wire.shared_port import PREFACE


def captured_hello(alpn: list[str] | None, server_name: str | None = "localhost") -> bytes:
    """The first flight of Python's TLS client (OpenSSL's ClientHello), from a MemoryBIO."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


def grpc_client_hello() -> bytes:
    """What grpcio's own client sends first, read by a listener that answers nothing."""
    listener = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            data = b""
            while not isinstance(parse(data), ClientHello):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            got.append(data)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    credentials = grpc.ssl_channel_credentials()
    with grpc.secure_channel(f"127.0.0.1:{listener.getsockname()[1]}", credentials) as channel:
        channel.subscribe(lambda _: None, try_to_connect=True)
        thread.join(10)
    listener.close()
    assert got, "the gRPC client sent no ClientHello"
    return got[0]


HELLOS = {
    "h2": captured_hello(["h2"]),
    "http/1.1": captured_hello(["http/1.1"]),
    "both": captured_hello(["h2", "http/1.1"]),
    "none": captured_hello(None),
    "none, no SNI": captured_hello(None, server_name=None),
}


@pytest.mark.parametrize(
    ("name", "alpn", "rest"),
    [
        ("h2", (b"h2",), False),
        ("http/1.1", (b"http/1.1",), True),
        ("both", (b"h2", b"http/1.1"), True),
        ("none", None, True),
        ("none, no SNI", None, True),
    ],
)
def test_real_hellos_say_what_they_offer(name: str, alpn: tuple[bytes, ...] | None, rest: bool) -> None:
    data = HELLOS[name]
    hello = parse(data)
    assert hello == ClientHello(alpn, len(data))
    assert hello.wants_http1 is rest


def test_a_grpc_clients_hello_goes_to_grpc() -> None:
    hello = parse(grpc_client_hello())
    assert isinstance(hello, ClientHello)
    assert hello.alpn is not None and b"h2" in hello.alpn
    assert not hello.wants_http1


@pytest.mark.parametrize("name", sorted(HELLOS))
def test_every_prefix_asks_for_more_and_the_asked_bytes_get_there(name: str) -> None:
    data = HELLOS[name]
    for cut in range(len(data)):
        result = parse(data[:cut])
        assert isinstance(result, Incomplete)
        assert cut < result.needed <= len(data)
    # As the shared port reads: wait for what is needed, look again. Two looks: header, record.
    seen, looks = b"", 0
    while not isinstance(result := parse(seen), ClientHello):
        seen, looks = data[: result.needed], looks + 1
    assert looks == 2


def test_bytes_after_the_hello_are_not_its() -> None:
    data = HELLOS["h2"]
    hello = parse(data + b"\x17\x03\x03\x00\x05early")
    assert hello == ClientHello((b"h2",), len(data))


def _records(message: bytes, sizes: list[int]) -> bytes:
    """`message` (a handshake message) framed as handshake records of the given sizes."""
    out, at, index = b"", 0, 0
    while at < len(message):
        size = max(1, min(sizes[index % len(sizes)], len(message) - at)) if sizes else len(message)
        out += b"\x16\x03\x01" + size.to_bytes(2, "big") + message[at : at + size]
        at, index = at + size, index + 1
    return out


@given(sizes=st.lists(st.integers(1, 600), min_size=1, max_size=8), name=st.sampled_from(sorted(HELLOS)))
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_a_hello_split_over_records_reads_the_same(sizes: list[int], name: str) -> None:
    data = HELLOS[name]
    message = data[5:]  # one record: its fragment is the whole handshake message
    reframed = _records(message, sizes)
    expected = parse(data)
    assert isinstance(expected, ClientHello)
    assert parse(reframed) == ClientHello(expected.alpn, len(reframed))


# -- hand-made hellos ---------------------------------------------------------------------------


def _vector(size: int, data: bytes) -> bytes:
    return len(data).to_bytes(size, "big") + data


def make_hello(
    extensions: bytes | None = b"", *, version: bytes = b"\x03\x03", suites: bytes = b"\x13\x01"
) -> bytes:
    body = version + bytes(32) + _vector(1, b"") + _vector(2, suites) + _vector(1, b"\x00")
    if extensions is not None:
        body += _vector(2, extensions)
    message = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + len(message).to_bytes(2, "big") + message


def alpn_extension(*names: bytes, raw: bytes | None = None) -> bytes:
    listed = raw if raw is not None else b"".join(_vector(1, n) for n in names)
    return b"\x00\x10" + _vector(2, _vector(2, listed))


def test_hand_made_hellos() -> None:
    assert parse(make_hello(None)) == ClientHello(None, len(make_hello(None)))  # TLS 1.2: no extensions
    assert parse(make_hello(b"")).alpn is None  # type: ignore[union-attr]
    sni = b"\x00\x00" + _vector(2, b"\x00\x07\x00\x00\x04host")
    hello = parse(make_hello(sni + alpn_extension(b"grpc-exp", b"h2")))
    assert hello == ClientHello(
        (b"grpc-exp", b"h2"), len(make_hello(sni + alpn_extension(b"grpc-exp", b"h2")))
    )
    assert not hello.wants_http1


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a TLS handshake record"),
        (b"G", "not a TLS handshake record"),
        (PREFACE, "not a TLS handshake record"),
        (b"\x16\x02", "not a TLS handshake record"),  # major version 2
        (b"\x80\x2e\x01\x00\x02", "not a TLS handshake record"),  # an SSLv2-style hello
        (b"\x17\x03\x03\x00\x10", "not a TLS handshake record"),  # application data first
        (b"\x16\x03\x01\x00\x00", "a handshake record of 0 bytes"),
        (b"\x16\x03\x01\xff\xff", "a handshake record of 65535 bytes"),
        (b"\x16\x03\x01\x00\x04\x02\x00\x00\x00", "not ClientHello"),  # a ServerHello
        (b"\x16\x03\x01\x00\x04\x01\xff\xff\xff", "a ClientHello of 16777219 bytes"),
        (b"\x16\x03\x01\x00\x04\x01\x00\x00\x00", "ends inside a field"),  # an empty body
        (make_hello(version=b"\x02\x00"), "not TLS"),
        (make_hello(suites=b""), "a vector of 0 bytes"),
        (make_hello(suites=b"\x13\x01\x13"), "odd length"),
        (make_hello(alpn_extension(raw=b"")), "a vector of 0 bytes"),  # an empty list
        (make_hello(alpn_extension(b"")), "a vector of 1 bytes where at least 2"),  # an empty name
        (make_hello(alpn_extension(raw=b"\x05h2")), "ends inside a field"),
        (make_hello(alpn_extension(b"h2") * 2), "extension 16 twice"),
        (make_hello(b"\x00\x10\x00\x05\x00\x02\x01h\xff"), "after the ALPN protocol list"),
        (make_hello(b"\x00\x10\x00"), "ends inside a field"),
    ],
)
def test_what_is_not_a_hello_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(HelloError, match=reason):
        parse(data)


def test_a_hello_over_the_limit_is_refused_before_it_arrives() -> None:
    record = b"\x16\x03\x01\x40\x00"  # a record of 16 KiB, the most one may hold
    assert parse(record) == Incomplete(5 + 0x4000)
    with pytest.raises(HelloError, match="no ClientHello within 1000 bytes"):
        parse(record, limit=1000)  # its bytes need not come
    declared = record + b"\x01\x00\xa0\x00"  # a hello of 40 KiB, declared in its first bytes
    with pytest.raises(HelloError, match="a ClientHello of 40964 bytes, over 32768"):
        parse(declared + bytes(0x4000 - 4))
    fits = record + b"\x01\x00\x7f\x00" + bytes(0x4000 - 4)  # under 32 KiB: more records to come
    assert parse(fits) == Incomplete(len(fits) + 5)
    rest = 0x7F00 + 4 - 0x4000
    assert parse(fits + b"\x16\x03\x01" + rest.to_bytes(2, "big")) == Incomplete(len(fits) + 5 + rest)
    with pytest.raises(HelloError, match="no ClientHello within 32768 bytes"):
        parse(fits + record)  # a second full record would pass the limit


# -- fuzzing --------------------------------------------------------------------------------------


def _check(data: bytes) -> None:
    try:
        result = parse(data)
    except HelloError:
        return
    if isinstance(result, Incomplete):
        assert len(data) < result.needed <= MAX_HELLO_BYTES
    else:
        assert result.size <= len(data)
        assert result.alpn is None or all(1 <= len(name) <= 255 for name in result.alpn)


@given(st.binary(max_size=3000))
@settings(max_examples=2000)
def test_fuzz_random_bytes(data: bytes) -> None:
    _check(data)
    _check(b"\x16\x03\x01" + data)


@given(
    name=st.sampled_from(sorted(HELLOS)),
    edits=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, 2000),
)
@settings(max_examples=2000)
def test_fuzz_mutated_real_hellos(name: str, edits: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(HELLOS[name])
    for at, value in edits:
        data[at % len(data)] = value
    _check(bytes(data))
    _check(bytes(data[: cut % (len(data) + 1)]))


def test_parsing_is_cheap() -> None:
    data = HELLOS["both"]
    started = time.perf_counter()
    for _ in range(2000):
        parse(data)
    assert time.perf_counter() - started < 2.0
