"""Hostile input at the wire: request bodies under a Content-Encoding (gzip bombs included), and
error messages that quote unbounded user input. Undecodable protobuf requests:
tests/inprocess/test_wire_decoding.py."""

from __future__ import annotations

import gzip
import zlib

import pytest

from gateway.errors import MAX_MESSAGE_BYTES, QUOTE_CHARS, InvalidArgument, NotFound, bounded, quote
from gateway.translate import names
from gateway.wire import rest_json

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


@pytest.mark.parametrize(
    ("raw", "encoding", "text"),
    [
        (b'{"messages": []}', "gzip", "not valid gzip"),
        # (mtime=0: the bytes, which name the test, must not change with the clock, or two
        # pytest-xdist workers that collect in different seconds refuse to run)
        (gzip.compress(b"{}", mtime=0)[:-6], "gzip", "ends inside"),
        (gzip.compress(b"{}", mtime=0) + b"trailing", "gzip", "not valid gzip"),
        (b"\x78\x9cgarbage", "deflate", "not valid deflate"),
        (b"{}", "deflate", "ends inside"),  # read as raw deflate
        (zlib.compress(b"{}") + b"x", "deflate", "after its deflate stream"),
        (b"{}", "br", "Unsupported Content-Encoding 'br'"),
        (b"{}", "gzip, gzip", "Unsupported Content-Encoding"),
    ],
)
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
