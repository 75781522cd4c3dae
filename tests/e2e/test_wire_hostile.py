"""Hostile bytes at the wire: requests that are not valid protobuf, invalid UTF-8, bodies that
are not what their Content-Encoding says (gzip bombs included), megabyte resource names.

Each is refused with INVALID_ARGUMENT (HTTP 400), at once, without a traceback at ERROR in the
gateway's log, and without writing anything. The gateway is this module's own, so that its log
holds only what these tests did.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import queue
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from google.api_core import exceptions
from google.pubsub_v1 import types

from tests.e2e.clients import clients, pull_until
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration
MEGABYTE = 1 << 20


@pytest.fixture(scope="module")
def gw(kafka_bootstrap: str, log_dir: Path) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(kafka_bootstrap, f"wire{uuid.uuid4().hex[:6]}", log_dir).start()
    yield gateway
    gateway.terminate()


@contextlib.contextmanager
def clean_log(gw: GatewayProcess) -> Iterator[None]:
    """Nothing the block makes the gateway do is logged at ERROR, nor with a traceback."""
    path = gw.log_paths[-1]
    start = path.stat().st_size
    yield
    time.sleep(0.3)  # the gateway's last lines reach its log
    text = path.read_bytes()[start:].decode(errors="replace")
    bad = [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]
    assert not bad, text[-3000:]


def _raw(channel: grpc.Channel, method: str) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)


def _field(tag: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([tag, len(payload)]) + payload


def _publish_bytes(topic: str, attribute_key: bytes, attribute_value: bytes) -> bytes:
    """A PublishRequest of one message with one attribute, written by hand: the client
    libraries cannot encode invalid UTF-8."""
    entry = _field(0x0A, attribute_key) + _field(0x12, attribute_value)
    message = _field(0x0A, b"hostile") + _field(0x12, entry)
    good = _field(0x0A, b"fine")
    return _field(0x0A, topic.encode()) + _field(0x12, good) + _field(0x12, message)


def _topic_and_subscription(gw: GatewayProcess, names: Callable[[str], str]) -> tuple[str, str]:
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "1"}})
    sub.create_subscription(request={"name": subscription, "topic": topic})
    return topic, subscription


def _only_later_messages_arrive(gw: GatewayProcess, topic: str, subscription: str) -> None:
    """Nothing of the refused requests was written: the first message the subscription gets
    is one published after them."""
    pub, sub = clients(gw)
    pub.publish(topic, b"after").result(timeout=30)
    got = pull_until(sub, subscription, 1)
    assert [m.message.data for m in got] == [b"after"]


# -- gRPC ---------------------------------------------------------------------------------------


def test_undecodable_grpc_requests_are_invalid_argument(
    gw: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, subscription = _topic_and_subscription(gw, names)
    channel = grpc.insecure_channel(gw.address)
    cases = [
        ("/google.pubsub.v1.Publisher/GetTopic", b"\xff\xff\xff", "Wire format was corrupt"),
        ("/google.pubsub.v1.Publisher/CreateTopic", b"\x0a\x7fshort", "Wire format was corrupt"),
        ("/google.pubsub.v1.Subscriber/Acknowledge", b"\x12\x05\xff", "Wire format was corrupt"),
        ("/google.pubsub.v1.Publisher/Publish", _publish_bytes(topic, b"\xff\xfe", b"v"), "bad UTF-8"),
        ("/google.pubsub.v1.Publisher/Publish", _publish_bytes(topic, b"k", b"caf\xc3"), "bad UTF-8"),
        ("/google.pubsub.v1.Publisher/Publish", _publish_bytes(topic, b"k", b"\xed\xa0\x80"), "bad UTF-8"),
    ]
    with clean_log(gw):
        for method, data, reason in cases:
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as caught:
                _raw(channel, method)(data, timeout=10)
            err = caught.value
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err.details())
            assert err.details().startswith("Invalid PROTO payload received") and reason in err.details()
            assert time.monotonic() - started < 5
    channel.close()
    _only_later_messages_arrive(gw, topic, subscription)


def _stream(channel: grpc.Channel, requests: queue.Queue[bytes | None]) -> Iterator[bytes]:
    def gen() -> Iterator[bytes]:
        while (item := requests.get()) is not None:
            yield item

    call = channel.stream_stream(
        "/google.pubsub.v1.Subscriber/StreamingPull",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    return call(gen(), timeout=30)  # type: ignore[no-any-return]


def test_undecodable_streaming_pull_requests_end_the_stream_with_invalid_argument(
    gw: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, subscription = _topic_and_subscription(gw, names)
    channel = grpc.insecure_channel(gw.address)
    first = types.StreamingPullRequest.serialize(
        types.StreamingPullRequest(subscription=subscription, stream_ack_deadline_seconds=60)
    )
    with clean_log(gw):
        for opening in ([b"\xff\xff"], [first, b"\x0a\x03\xff\xfe\xfd"], [first, b"\x0a\x7f"]):
            requests: queue.Queue[bytes | None] = queue.Queue()
            for item in opening:
                requests.put(item)
            responses = _stream(channel, requests)
            with pytest.raises(grpc.RpcError) as caught:
                for _ in responses:
                    pass
            requests.put(None)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
            assert "Invalid PROTO payload received" in caught.value.details()
    channel.close()
    _only_later_messages_arrive(gw, topic, subscription)


def test_megabyte_names_over_grpc_are_invalid_argument_with_a_short_message(
    gw: GatewayProcess, names: Callable[[str], str]
) -> None:
    """The official client repeats the name in a request header (x-goog-request-params) and the
    gateway echoes only its start: no call fails on gRPC's metadata limits (RESOURCE_EXHAUSTED,
    which publishers retry for a minute)."""
    pub, sub = clients(gw)
    topic, subscription = _topic_and_subscription(gw, names)
    big_topic = "projects/test-project/topics/t" + "a" * MEGABYTE
    big_sub = "projects/test-project/subscriptions/s" + "\u00e9" * (MEGABYTE // 2)  # 3 MB encoded
    calls: list[Callable[[], object]] = [
        lambda: pub.get_topic(topic=big_topic, timeout=30),
        lambda: pub.create_topic(name=big_topic, timeout=30),
        lambda: pub.publish(big_topic, b"x").result(timeout=30),
        lambda: sub.create_subscription(name=big_sub, topic=topic, timeout=30),
        lambda: sub.create_subscription(name=names("subscriptions"), topic=big_topic, timeout=30),
        lambda: sub.pull(subscription=big_sub, max_messages=1, timeout=30),
        lambda: sub.acknowledge(subscription=big_sub, ack_ids=["x"], timeout=30),
        lambda: sub.get_subscription(subscription=subscription + "\U0001f600" * (MEGABYTE // 4), timeout=30),
    ]
    with clean_log(gw):
        for call in calls:
            started = time.monotonic()
            with pytest.raises(exceptions.InvalidArgument) as caught:
                call()
            assert time.monotonic() - started < 10
            message = caught.value.message
            assert message.startswith("Invalid resource name given") and len(message) < 600, message[:700]
            assert "characters)" in message
    assert big_topic not in [t.name for t in pub.list_topics(project="projects/test-project")]
    _only_later_messages_arrive(gw, topic, subscription)


# -- REST ---------------------------------------------------------------------------------------


async def _post(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    async with session.post(url, data=body, headers=headers or {}) as resp:
        return resp.status, json.loads(await resp.read())


def _invalid(status: int, body: dict[str, object], text: str) -> None:
    assert status == 400, body
    error = body["error"]
    assert isinstance(error, dict) and error["status"] == "INVALID_ARGUMENT" and error["code"] == 400, body
    assert text in str(error["message"]), body


async def test_rest_bodies_that_are_not_what_their_encoding_says(
    gw: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, subscription = _topic_and_subscription(gw, names)
    url = f"http://{gw.rest_address}/v1/{topic}:publish"
    plain = b'{"messages": [{"data": "eA=="}]}'
    bomb = gzip.compress(b" " * (200 * MEGABYTE))  # 200 MB of JSON whitespace in ~200 KB
    assert len(bomb) < MEGABYTE
    with clean_log(gw):
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            status, body = await _post(session, url, plain, {"Content-Encoding": "gzip"})
            _invalid(status, body, "not valid gzip data")
            status, body = await _post(session, url, gzip.compress(plain)[:-4], {"Content-Encoding": "gzip"})
            _invalid(status, body, "ends inside its gzip data")
            status, body = await _post(session, url, plain, {"Content-Encoding": "br"})
            _invalid(status, body, "Unsupported Content-Encoding")
            started = time.monotonic()
            status, body = await _post(session, url, bomb, {"Content-Encoding": "gzip"})
            _invalid(status, body, "Request payload size exceeds the limit: 10485760 bytes.")
            assert time.monotonic() - started < 10
    _only_later_messages_arrive(gw, topic, subscription)
    async with aiohttp.ClientSession() as session:  # a real gzip body still publishes
        status, body = await _post(
            session, url, gzip.compress(b'{"messages": [{"data": "Z3ppcA=="}]}'), {"Content-Encoding": "gzip"}
        )
        assert status == 200, body
    _, sub = clients(gw)
    assert [m.message.data for m in pull_until(sub, subscription, 1)] == [b"gzip"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"messages": [{"data": "eA=="}, {"data": "eA==", "attributes": {"\\ud800": "v"}}]}',
        b'{"messages": [{"data": "eA=="}, {"data": "eA==", "attributes": {"k": "\\udfff"}}]}',
        b'{"messages": [{"data": "eA=="}, {"data": "eA==", "orderingKey": "\\ud800"}]}',
        b'{"messages": [{"data": "eA=="}, {"data": "eA==", "attributes": {"k": "v\\xff"}}]}',
        b'{"messages": [{"data": "eA=="}, {"data": "eA==", "attributes": {"k": "\xff"}}]}',
    ],
)
async def test_rest_strings_that_are_not_unicode(
    gw: GatewayProcess, names: Callable[[str], str], body: bytes
) -> None:
    topic, subscription = _topic_and_subscription(gw, names)
    with clean_log(gw):
        async with aiohttp.ClientSession() as session:
            status, parsed = await _post(session, f"http://{gw.rest_address}/v1/{topic}:publish", body)
            _invalid(status, parsed, "Invalid JSON payload received.")
    _only_later_messages_arrive(gw, topic, subscription)


async def test_rest_megabyte_names(gw: GatewayProcess, names: Callable[[str], str]) -> None:
    topic = "projects/test-project/topics/t" + "a" * MEGABYTE
    base = f"http://{gw.rest_address}/v1"
    with clean_log(gw):
        async with aiohttp.ClientSession() as session:
            body = io.BytesIO(json.dumps({"topic": topic}).encode())
            async with session.put(f"{base}/{names('subscriptions')}", data=body) as resp:
                parsed = await resp.json()
            _invalid(resp.status, parsed, "Invalid resource name given")
            assert (
                len(json.dumps(parsed)) < 700 and f"({len(topic)} characters)" in parsed["error"]["message"]
            )
            async with session.get(f"{base}/{topic}") as resp:  # a request line past 8 KiB
                assert resp.status == 400
                await resp.read()


def _exchange(address: str, data: bytes, timeout: float = 10.0) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


async def test_rest_malformed_chunked_body(gw: GatewayProcess, names: Callable[[str], str]) -> None:
    topic = names("topics")
    request = (
        f"POST /v1/{topic}:publish HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
    ).encode()
    with clean_log(gw):
        answer = await asyncio.to_thread(_exchange, gw.rest_address, request)
    assert answer.split(b"\r\n")[0].endswith(b" 400 Bad Request"), answer[:200]
