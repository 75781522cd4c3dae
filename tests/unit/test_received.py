"""Received messages encoded by hand (wire/received.py) against the protobuf runtime's own."""

from __future__ import annotations

from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.core.runner import Delivery
from gateway.schemas.names import ATTR_SCHEMA_NAME
from gateway.translate import records
from gateway.translate.records import Record, record
from gateway.wire import received

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
headers = st.lists(
    st.tuples(
        st.one_of(st.text(min_size=1, max_size=10), st.just(ATTR_SCHEMA_NAME)),
        st.one_of(st.none(), st.binary(max_size=20), texts),
    ),
    max_size=4,
)
plain_records = st.builds(
    record,
    partition=st.integers(0, 1000),
    offset=st.integers(0, (1 << 40) - 1),
    timestamp_ms=st.one_of(
        st.sampled_from([0, -1, 1000, 999, 1_764_150_000_000]), st.integers(-(10**13), 10**13)
    ),
    key=st.none(),
    value=st.one_of(st.none(), st.binary(max_size=300), st.binary(min_size=16_380, max_size=16_400)),
    headers=st.none(),
)
any_records = st.one_of(
    plain_records,
    st.builds(
        record,
        partition=st.integers(0, 1000),
        offset=st.integers(0, (1 << 40) - 1),
        timestamp_ms=st.integers(-(10**13), 10**13),
        key=st.one_of(st.none(), st.binary(max_size=40), texts.map(str.encode)),
        value=st.one_of(st.none(), st.binary(max_size=300)),
        headers=st.one_of(st.none(), headers),
    ),
)
ack_ids = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=200)
attempts = st.one_of(st.just(0), st.integers(1, 1000), st.integers(0, (1 << 31) - 1))


def deliveries(records_: st.SearchStrategy[Record]) -> st.SearchStrategy[list[Delivery]]:
    return st.lists(st.builds(Delivery, ack_id=ack_ids, record=records_, attempt=attempts), max_size=20)


class Marks:
    """Stands in for SchemaMarks: rewrites the schema-name attribute, as a deleted schema would
    (SchemaMarks changes only messages that carry it)."""

    def apply(self, attributes: dict[str, str]) -> None:
        if ATTR_SCHEMA_NAME in attributes:
            attributes[ATTR_SCHEMA_NAME] = "_deleted-schema_"


def runtime(got: list[Delivery], marks: Any = None) -> pb.PullResponse:
    """The response built with the protobuf runtime, field by field in place."""
    response = pb.PullResponse()
    for d in got:
        view = records.to_message(d.record)
        if marks is not None:
            marks.apply(view.attributes)
        out = response.received_messages.add(ack_id=d.ack_id, delivery_attempt=d.attempt)
        msg = out.message
        msg.data = view.data
        msg.message_id = view.message_id
        msg.ordering_key = view.ordering_key
        msg.attributes.update(view.attributes)
        when = msg.publish_time
        when.seconds, ms = divmod(d.record.timestamp_ms, 1000)
        when.nanos = ms * 1_000_000
    return response


@hsettings(max_examples=300)
@given(deliveries(plain_records))
def test_plain_records_encode_to_the_runtimes_bytes(got: list[Delivery]) -> None:
    assert received.encode(got) == runtime(got).SerializeToString()


@hsettings(max_examples=500)
@given(deliveries(any_records), st.booleans())
def test_any_record_decodes_to_what_the_runtime_builds(got: list[Delivery], marked: bool) -> None:
    # A map's entries may come in any order, so the bytes are compared decoded.
    marks = Marks() if marked else None
    assert pb.PullResponse.FromString(received.encode(got, marks)) == runtime(got, marks)


def test_attributes_and_ordering_keys_are_encoded_without_the_runtime(monkeypatch: Any) -> None:
    """What publishers write (UTF-8 header values, a UTF-8 key) does not go through the
    runtime; a header value that is not UTF-8, a key that is none, or a numeric-labels mark does."""
    went: list[Record] = []
    general = received._general
    monkeypatch.setattr(received, "_general", lambda r, marks: went.append(r) or general(r, marks))
    plain = [
        record(
            0, 1, 5, b"key", b"x", [("a", b"1"), ("b", "two"), ("c", None), ("\u00e9", "\u00e9".encode())]
        ),
        record(0, 2, 5, "\u00fc".encode(), None, None),
        record(0, 3, 5, None, b"", [("only", b"")]),
        record(0, 4, 5, None, b"y", [(records.NUMERIC_HEADER, b'["n"]'), ("n", b"7")]),
    ]
    other = [
        record(0, 5, 5, None, b"z", [("bin", b"\xff")]),
        record(0, 6, 5, b"\xff", b"z", None),
        record(0, 7, 5, b"k" * 1025, b"z", None),
    ]
    got = [Delivery(f"id-{r.offset}", r, 0) for r in plain + other]
    assert pb.PullResponse.FromString(received.encode(got)) == runtime(got)
    assert went == other
    # With schema marks (as the servers pass them), only a record a schema validated goes too.
    went.clear()
    validated = record(0, 8, 5, None, b"v", [("s", b"1"), (ATTR_SCHEMA_NAME, b"projects/p/schemas/x")])
    got = [Delivery(f"id-{r.offset}", r, 0) for r in [*plain, validated, *plain]]
    assert pb.PullResponse.FromString(received.encode(got, Marks())) == runtime(got, Marks())
    assert went == [validated]


def test_a_response_is_its_messages_and_the_rest_of_it() -> None:
    got = [
        Delivery("a-1", record(2, 7, 1_700_000_000_123, None, b"x", None), 0),
        Delivery(
            "a-2", record(2, 8, 1_700_000_000_123, b"k", b"y", [(ATTR_SCHEMA_NAME, b"v"), ("t", b"\xff")]), 3
        ),
    ]
    head = pb.StreamingPullResponse(
        subscription_properties=pb.StreamingPullResponse.SubscriptionProperties(
            exactly_once_delivery_enabled=True
        ),
        acknowledge_confirmation=pb.StreamingPullResponse.AcknowledgeConfirmation(ack_ids=["a-0"]),
    )
    response = received.Encoded(head, received.encode(got, Marks()))
    whole = pb.StreamingPullResponse.FromString(response.SerializeToString())
    assert whole.subscription_properties.exactly_once_delivery_enabled
    assert list(whole.acknowledge_confirmation.ack_ids) == ["a-0"]
    assert [m.ack_id for m in whole.received_messages] == ["a-1", "a-2"]
    second = whole.received_messages[1]
    assert second.delivery_attempt == 3
    assert second.message.ordering_key == "k"
    assert dict(second.message.attributes) == {ATTR_SCHEMA_NAME: "_deleted-schema_", "t-base64": "/w=="}
    assert second.message.message_id == records.message_id(2, 8)
    assert (second.message.publish_time.seconds, second.message.publish_time.nanos) == (
        1_700_000_000,
        123_000_000,
    )
    assert list(response.received_messages) == list(whole.received_messages)


@given(st.integers(-(1 << 63), (1 << 63) - 1).filter(bool))
def test_varints_are_protobufs(n: int) -> None:
    assert Timestamp(seconds=n).SerializeToString() == b"\x08" + received.varint(n)
