"""Hostile input at the wire: undecodable protobuf requests, request bodies under a
Content-Encoding (gzip bombs included), and error messages that quote unbounded user input."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.errors import MAX_MESSAGE_BYTES, QUOTE_CHARS, InvalidArgument, NotFound, bounded, quote
from gateway.translate import names
from gateway.wire import grpc_api, rest_json
from gateway.wire.rest_routes import routes

# -- protobuf requests ----------------------------------------------------------------------------


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (lengths under 128)."""
    assert len(payload) < 128
    return bytes([tag, len(payload)]) + payload


def _publish_with_attribute(key: bytes, value: bytes) -> bytes:
    entry = _field(0x0A, key) + _field(0x12, value)
    message = _field(0x0A, b"data") + _field(0x12, entry)
    return _field(0x0A, b"projects/p/topics/topic") + _field(0x12, message)


def test_a_valid_request_decodes() -> None:
    decode = grpc_api.decoder(pb.PublishRequest)
    request = decode(_publish_with_attribute(b"k", b"v"))
    assert isinstance(request, pb.PublishRequest)
    assert dict(request.messages[0].attributes) == {"k": "v"}
    assert grpc_api.decoded(request) is request


@pytest.mark.parametrize(("data", "reason"), [
    (b"\xff\xff\xff", "Wire format was corrupt"),
    (b"\x0a\x05abc", "Wire format was corrupt"),  # a length past the end
    (_publish_with_attribute(b"\xff\xfe", b"v"), "bad UTF-8"),
    (_publish_with_attribute(b"k", b"caf\xc3"), "bad UTF-8"),
    (_field(0x0A, b"projects/p/topics/\xed\xa0\x80"), "bad UTF-8"),  # an encoded surrogate
])
def test_undecodable_requests_become_invalid_argument(data: bytes, reason: str) -> None:
    request = grpc_api.decoder(pb.PublishRequest)(data)
    assert isinstance(request, grpc_api.Undecodable)
    with pytest.raises(InvalidArgument, match=reason) as caught:
        grpc_api.decoded(request)
    assert "google.pubsub.v1.PublishRequest" in caught.value.message


@hsettings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_are_refused(data: bytes) -> None:
    request = grpc_api.decoder(pb.StreamingPullRequest)(data)
    assert isinstance(request, pb.StreamingPullRequest | grpc_api.Undecodable)


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


def _publish_route() -> rest_json.Route:
    service = pb.DESCRIPTOR.services_by_name["Publisher"]
    return next(r for r in routes([service]) if r.method.name == "Publish")


@pytest.mark.parametrize("body", [
    b'{"messages": [{"data": "eA==", "attributes": {"\\ud800": "v"}}]}',
    b'{"messages": [{"data": "eA==", "attributes": {"k": "\\udfff"}}]}',
    b'{"messages": [{"data": "eA==", "orderingKey": "a\\ud800"}]}',
    b'{"topic": "projects/p/topics/\\ud800", "messages": [{"data": "eA=="}]}',
])
def test_unpaired_surrogates_in_publish_bodies_are_bad_requests(body: bytes) -> None:
    route = _publish_route()
    with pytest.raises(rest_json.BadRequest, match="Invalid JSON payload received"):
        rest_json.build_request(route, {"topic": "projects/p/topics/t"}, [], body)


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
