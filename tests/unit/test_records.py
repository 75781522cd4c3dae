"""Message <-> Kafka record (gateway.translate.records)."""

from __future__ import annotations

import base64

import confluent_kafka
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.kafka import consumer as kafka_consumer
from gateway.translate import records
from gateway.translate.records import Record

HYP = hsettings(max_examples=200, deadline=None, database=None)

# Protobuf strings are valid Unicode: no lone surrogates.
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)))
attribute_keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
attributes = st.dictionaries(
    attribute_keys, st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40), max_size=8
)
ordering_keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=100)


def record(
    key: bytes | None,
    value: bytes | None,
    headers,
    partition: int = 0,
    offset: int = 0,  # type: ignore[no-untyped-def]
    timestamp_ms: int = 1,
) -> Record:
    return records.record(partition, offset, timestamp_ms, key, value, headers)


@HYP
@given(
    data=st.binary(max_size=200),
    attrs=attributes,
    ordering_key=ordering_keys,
    partition=st.integers(0, 1000),
    offset=st.integers(0, 2**40 - 1),
    ts=st.integers(0, 2**45),
)
def test_round_trip(
    data: bytes, attrs: dict[str, str], ordering_key: str, partition: int, offset: int, ts: int
) -> None:
    key, value, headers = records.to_record(data, attrs, ordering_key)
    assert value == data
    assert (key is None) == (ordering_key == "")
    assert (headers is None) == (not attrs)
    view = records.to_message(record(key, value, headers, partition, offset, ts))
    assert view.data == data
    assert view.attributes == attrs
    assert view.ordering_key == ordering_key
    assert view.publish_time_ms == ts
    assert records.parse_message_id(view.message_id) == (partition, offset)


def test_round_trip_longest_ordering_key() -> None:
    ordering_key = "€" * 341 + "a"  # 1024 bytes
    key, value, headers = records.to_record(b"x", {}, ordering_key)
    view = records.to_message(record(key, value, headers))
    assert view.ordering_key == ordering_key
    assert records.KEY_ATTRIBUTE not in view.attributes


def test_to_record_example() -> None:
    assert records.to_record(b"d", {"a": "é"}, "k") == (b"k", b"d", [("a", "é".encode())])
    assert records.to_record(b"", {}, "") == (None, b"", None)


@HYP
@given(partition=st.integers(0, 2**20), offset=st.integers(0, 2**40 - 1))
def test_message_id_round_trip(partition: int, offset: int) -> None:
    mid = records.message_id(partition, offset)
    assert mid.isdigit()
    assert records.parse_message_id(mid) == (partition, offset)
    assert records.message_ids([(partition, offset), (0, 0)]) == [mid, "0"]  # Publish's bulk form


@HYP
@given(
    a=st.tuples(st.integers(0, 2**20), st.integers(0, 2**40 - 1)),
    b=st.tuples(st.integers(0, 2**20), st.integers(0, 2**40 - 1)),
)
def test_message_ids_unique(a: tuple[int, int], b: tuple[int, int]) -> None:
    assert (records.message_id(*a) == records.message_id(*b)) == (a == b)


def test_message_ids_unique_across_partitions_same_offset() -> None:
    ids = {records.message_id(p, o) for p in range(64) for o in (0, 1, 2**40 - 1)}
    assert len(ids) == 64 * 3


# -- records from plain Kafka producers ---------------------------------------------------------


def test_binary_key_becomes_attribute() -> None:
    key = b"\xff\x00\xfe"
    view = records.to_message(record(key, b"v", None))
    assert view.ordering_key == ""
    assert view.attributes == {records.KEY_ATTRIBUTE: base64.b64encode(key).decode()}
    assert base64.b64decode(view.attributes["kafka-key-base64"]) == key


def test_overlong_text_key_becomes_attribute() -> None:
    key = b"k" * 1025
    view = records.to_message(record(key, b"v", None))
    assert view.ordering_key == ""
    assert base64.b64decode(view.attributes[records.KEY_ATTRIBUTE]) == key


def test_text_key_is_ordering_key() -> None:
    view = records.to_message(record("ключ".encode(), b"v", None))
    assert view.ordering_key == "ключ"
    assert view.attributes == {}


def test_empty_or_no_key() -> None:
    for key in (None, b""):
        view = records.to_message(record(key, b"v", None))
        assert view.ordering_key == ""
        assert view.attributes == {}


def test_non_utf8_header_is_base64() -> None:
    view = records.to_message(record(None, b"v", [("bin", b"\x80\x81"), ("txt", b"ok")]))
    assert view.attributes == {"bin-base64": base64.b64encode(b"\x80\x81").decode(), "txt": "ok"}


def test_none_header_value_is_empty_string() -> None:
    view = records.to_message(record(None, b"v", [("h", None)]))
    assert view.attributes == {"h": ""}


def test_none_value_is_empty_data() -> None:
    view = records.to_message(record(None, None, None, partition=3, offset=7, timestamp_ms=99))
    assert view.data == b""
    assert view.publish_time_ms == 99
    assert view.message_id == records.message_id(3, 7)


@HYP
@given(
    key=st.none() | st.binary(max_size=1100),
    value=st.none() | st.binary(max_size=50),
    headers=st.none()
    | st.lists(
        st.tuples(
            st.text(min_size=1, max_size=10).filter(lambda s: not s.endswith("-base64") and s != "kafka-key"),
            st.none() | st.binary(max_size=20),
        ),
        max_size=5,
    ),
)
def test_any_foreign_record_maps(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None
) -> None:
    view = records.to_message(record(key, value, headers))
    assert view.data == (value or b"")
    for name, _raw in headers or ():
        # the last header of a name wins, as in a dict
        last = [r for n, r in headers or () if n == name][-1]
        if last is None:
            assert view.attributes[name] == ""
        else:
            try:
                decoded = last.decode()
            except UnicodeDecodeError:
                assert base64.b64decode(view.attributes[f"{name}-base64"]) == last
            else:
                assert view.attributes[name] == decoded
    if key:
        try:
            text = key.decode()
        except UnicodeDecodeError:
            text = None
        if text is not None and len(key) <= 1024:
            assert view.ordering_key == text
        else:
            assert view.ordering_key == ""
            assert base64.b64decode(view.attributes[records.KEY_ATTRIBUTE]) == key
    else:
        assert view.ordering_key == ""


@pytest.mark.parametrize(("value", "key", "size"), [(b"abc", b"kk", 5), (None, None, 0), (b"", b"k", 1)])
def test_size(value: bytes | None, key: bytes | None, size: int) -> None:
    assert record(key, value, None).size == size


@HYP
@given(
    key=st.one_of(st.none(), st.binary(max_size=40)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    headers=st.one_of(
        st.none(),
        st.lists(st.tuples(st.text(min_size=1, max_size=10), st.one_of(st.none(), st.binary(max_size=20)))),
    ),
)
def test_a_fetched_message_becomes_the_record_records_makes(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None
) -> None:
    """kafka/consumer.py's `to_record` works the sizes out itself for the common record."""
    msg = confluent_kafka.Message(
        topic="t", partition=3, offset=17, key=key, value=value, headers=headers, timestamp=(1, 1_234)
    )
    assert kafka_consumer.to_record(msg) == records.record(3, 17, 1_234, key, value, headers)
