"""Hostile input at the wire: undecodable protobuf requests, request bodies under a
Content-Encoding (gzip bombs included), and error messages that quote unbounded user input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from gateway.errors import MAX_MESSAGE_BYTES, QUOTE_CHARS, InvalidArgument, NotFound, bounded, quote
from gateway.translate import names
from gateway.wire import rest_json

# -- protobuf requests ----------------------------------------------------------------------------
# The gateway's generated protos and the official client's cannot share one descriptor pool, and
# the suite's end-to-end tests load the client's: these checks run in a child interpreter.

_DECODING = r"""
import json, random
from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.errors import InvalidArgument
from gateway.wire import grpc_api, rest_json
from gateway.wire.rest_routes import routes

def field(tag, payload):
    return bytes([tag, len(payload)]) + payload

def publish(key, value):
    entry = field(0x0A, key) + field(0x12, value)
    return field(0x0A, b"projects/p/topics/topic") + field(0x12, field(0x0A, b"data") + field(0x12, entry))

out = {}
decode = grpc_api.decoder(pb.PublishRequest)
good = decode(publish(b"k", b"v"))
out["good"] = [type(good).__name__, dict(good.messages[0].attributes), grpc_api.decoded(good) is good]
bad = {"corrupt": b"\xff\xff\xff", "past the end": b"\x0a\x05abc",
       "bad key": publish(b"\xff\xfe", b"v"), "cut value": publish(b"k", b"caf\xc3"),
       "surrogate": field(0x0A, b"projects/p/topics/\xed\xa0\x80")}
for name, data in bad.items():
    request = decode(data)
    try:
        grpc_api.decoded(request)
        out[name] = "decoded"
    except InvalidArgument as exc:
        out[name] = exc.message
rng = random.Random(7)
kinds = set()
for cls in (pb.StreamingPullRequest, pb.PublishRequest, pb.AcknowledgeRequest):
    for _ in range(3000):  # any bytes decode or are refused; nothing raises
        data = rng.randbytes(rng.randrange(60))
        kinds.add(type(grpc_api.decoder(cls)(data)).__name__)
out["fuzz"] = sorted(kinds)
route = next(r for r in routes([pb.DESCRIPTOR.services_by_name["Publisher"]]) if r.method.name == "Publish")
surrogates = []
for body in (b'{"messages": [{"data": "eA==", "attributes": {"\\ud800": "v"}}]}',
             b'{"messages": [{"data": "eA==", "attributes": {"k": "\\udfff"}}]}',
             b'{"messages": [{"data": "eA==", "orderingKey": "a\\ud800"}]}',
             b'{"topic": "projects/p/topics/\\ud800", "messages": [{"data": "eA=="}]}'):
    try:
        rest_json.build_request(route, {"topic": "projects/p/topics/t"}, [], body)
        surrogates.append("built")
    except rest_json.BadRequest as exc:
        surrogates.append(exc.message)
out["surrogates"] = surrogates
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def decoding() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _DECODING], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2], check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_valid_request_decodes(decoding: dict[str, Any]) -> None:
    assert decoding["good"] == ["PublishRequest", {"k": "v"}, True]


@pytest.mark.parametrize(("case", "reason"), [
    ("corrupt", "Wire format was corrupt"),
    ("past the end", "Wire format was corrupt"),
    ("bad key", "bad UTF-8"),
    ("cut value", "bad UTF-8"),
    ("surrogate", "bad UTF-8"),  # an encoded surrogate is not UTF-8
])
def test_undecodable_requests_become_invalid_argument(decoding: dict[str, Any], case: str, reason: str) -> None:
    message = decoding[case]
    assert message.startswith("Invalid PROTO payload received: the request is not a valid "
                              "google.pubsub.v1.PublishRequest"), message
    assert reason in message


def test_any_bytes_decode_or_are_refused(decoding: dict[str, Any]) -> None:
    assert set(decoding["fuzz"]) <= {"StreamingPullRequest", "PublishRequest", "AcknowledgeRequest",
                                     "Undecodable"}
    assert "Undecodable" in decoding["fuzz"]


def test_unpaired_surrogates_in_publish_bodies_are_bad_requests(decoding: dict[str, Any]) -> None:
    assert decoding["surrogates"], decoding
    for message in decoding["surrogates"]:
        assert message.startswith("Invalid JSON payload received."), message


# -- request bodies under a Content-Encoding ----------------------------------------------------


def test_identity_and_empty_bodies_pass_through() -> None:
    assert rest_json.decode_body(b'{"a": 1}', "") == b'{"a": 1}'
    assert rest_json.decode_body(b'{"a": 1}', " Identity ") == b'{"a": 1}'
    assert rest_json.decode_body(b"", "gzip") == b""


def test_gzip_and_deflate_bodies_are_decoded() -> None:
    body = b'{"messages": [{"data": "eA=="}]}'
    assert rest_json.decode_body(gzip.compress(body), "gzip") == body
    assert rest_json.decode_body(gzip.compress(body), "X-Gzip") == body
    assert rest_json.decode_body(gzip.compress(body[:10]) + gzip.compress(body[10:]), "gzip") == body
    assert rest_json.decode_body(zlib.compress(body), "deflate") == body
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert rest_json.decode_body(raw.compress(body) + raw.flush(), "deflate") == body


@pytest.mark.parametrize(("raw", "encoding", "text"), [
    (b'{"messages": []}', "gzip", "not valid gzip"),
    (gzip.compress(b"{}")[:-6], "gzip", "ends inside"),
    (gzip.compress(b"{}") + b"trailing", "gzip", "not valid gzip"),
    (b"\x78\x9cgarbage", "deflate", "not valid deflate"),
    (b"{}", "deflate", "ends inside"),  # read as raw deflate
    (zlib.compress(b"{}") + b"x", "deflate", "after its deflate stream"),
    (b"{}", "br", "Unsupported Content-Encoding 'br'"),
    (b"{}", "gzip, gzip", "Unsupported Content-Encoding"),
])
def test_bad_encoded_bodies_are_bad_requests(raw: bytes, encoding: str, text: str) -> None:
    with pytest.raises(rest_json.BadRequest, match=text):
        rest_json.decode_body(raw, encoding)


def test_a_gzip_bomb_is_refused_without_expanding_past_the_limit() -> None:
    limit = 1 << 20
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < 100_000
    with pytest.raises(rest_json.BadRequest, match=rest_json.TOO_LARGE.split(":")[0]):
        rest_json.decode_body(bomb, "gzip", limit=limit)
    many = gzip.compress(b"\0" * (limit // 2)) * 3  # members that add up past the limit
    with pytest.raises(rest_json.BadRequest, match="exceeds the limit"):
        rest_json.decode_body(many, "gzip", limit=limit)
    exact = gzip.compress(b"\0" * limit)
    assert len(rest_json.decode_body(exact, "gzip", limit=limit)) == limit


def test_the_default_limit_is_the_api_limit() -> None:
    assert rest_json.MAX_BODY == 10 * 1024 * 1024
    assert "10485760 bytes" in rest_json.TOO_LARGE


# -- error messages quoting user input ------------------------------------------------------------


def test_quote_cuts_long_values_and_says_how_long() -> None:
    assert quote("short") == "short"
    long = "a" * 1_000_000
    quoted = quote(long)
    assert quoted.startswith("a" * QUOTE_CHARS + "\u2026") and "(1000000 characters)" in quoted
    assert len(quoted) < QUOTE_CHARS + 30
    emoji = quote("\U0001f600" * 1000)  # cut by bytes, too: the length always shows
    assert emoji.endswith("\u2026 (1000 characters)") and len(emoji.encode()) < 700
    assert quote("x\ud800") == "x?\u2026 (2 characters)"  # changed, so marked as such


def test_every_error_message_is_bounded() -> None:
    err = NotFound("Topic not found (resource=" + "\u00e9" * 1_000_000 + ")")
    assert len(err.message.encode()) <= MAX_MESSAGE_BYTES
    assert err.message.endswith("\u2026") and str(err) == err.message
    assert bounded("x\ud800y") == "x?y"  # encodable on every wire
    assert bounded("\U0001f600" * 1000, 10) == "\U0001f600\u2026"  # never half a character


@pytest.mark.parametrize("collection", ["topics", "subscriptions", "snapshots"])
def test_a_megabyte_name_is_not_echoed_whole(collection: str) -> None:
    name = f"projects/p/{collection}/" + "x" * (1 << 20)
    parse = {"topics": names.topic, "subscriptions": names.subscription, "snapshots": names.snapshot}
    with pytest.raises(InvalidArgument, match="Invalid resource name given") as caught:
        parse[collection](name)
    assert len(caught.value.message) < QUOTE_CHARS + 100
    assert f"({len(name)} characters)" in caught.value.message
