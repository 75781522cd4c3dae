"""gRPC requests that are not valid protobuf, and REST publish bodies with unpaired surrogates
(here, not in tests/unit: these load the gateway's generated protos; see test_resource_quota)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.errors import InvalidArgument
from gateway.wire import grpc_api, rest_json
from gateway.wire.rest_routes import routes


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (lengths under 128)."""
    assert len(payload) < 128
    return bytes([tag, len(payload)]) + payload


def _publish_with_attribute(key: bytes, value: bytes) -> bytes:
    entry = _field(0x0A, key) + _field(0x12, value)
    message = _field(0x0A, b"data") + _field(0x12, entry)
    return _field(0x0A, b"projects/p/topics/topic") + _field(0x12, message)


def test_a_valid_request_decodes() -> None:
    request = grpc_api.decoder(pb.PublishRequest)(_publish_with_attribute(b"k", b"v"))
    assert isinstance(request, pb.PublishRequest)
    assert dict(request.messages[0].attributes) == {"k": "v"}
    assert grpc_api.decoded(request) is request


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xff\xff", "Wire format was corrupt"),
        (b"\x0a\x05abc", "Wire format was corrupt"),  # a length past the end
        (_publish_with_attribute(b"\xff\xfe", b"v"), "bad UTF-8"),
        (_publish_with_attribute(b"k", b"caf\xc3"), "bad UTF-8"),
        (_field(0x0A, b"projects/p/topics/\xed\xa0\x80"), "bad UTF-8"),  # an encoded surrogate
    ],
)
def test_undecodable_requests_become_invalid_argument(data: bytes, reason: str) -> None:
    request = grpc_api.decoder(pb.PublishRequest)(data)
    assert isinstance(request, grpc_api.Undecodable)
    with pytest.raises(InvalidArgument, match=reason) as caught:
        grpc_api.decoded(request)
    assert caught.value.message.startswith(
        "Invalid PROTO payload received: the request is not a valid google.pubsub.v1.PublishRequest"
    )


@hsettings(max_examples=500, deadline=None, database=None)
@given(
    st.binary(max_size=200),
    st.sampled_from([pb.StreamingPullRequest, pb.PublishRequest, pb.AcknowledgeRequest]),
)
def test_any_bytes_decode_or_are_refused(data: bytes, cls: type) -> None:
    request = grpc_api.decoder(cls)(data)
    assert isinstance(request, cls | grpc_api.Undecodable)


@pytest.mark.parametrize(
    "body",
    [
        b'{"messages": [{"data": "eA==", "attributes": {"\\ud800": "v"}}]}',
        b'{"messages": [{"data": "eA==", "attributes": {"k": "\\udfff"}}]}',
        b'{"messages": [{"data": "eA==", "orderingKey": "a\\ud800"}]}',
        b'{"topic": "projects/p/topics/\\ud800", "messages": [{"data": "eA=="}]}',
    ],
)
def test_unpaired_surrogates_in_publish_bodies_are_bad_requests(body: bytes) -> None:
    route = next(
        r for r in routes([pb.DESCRIPTOR.services_by_name["Publisher"]]) if r.method.name == "Publish"
    )
    with pytest.raises(rest_json.BadRequest, match="Invalid JSON payload received"):
        rest_json.build_request(route, {"topic": "projects/p/topics/t"}, [], body)
