"""Request validation against the published API limits (gateway.translate.limits)."""

from __future__ import annotations

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from gateway.errors import Code, InvalidArgument
from gateway.translate import limits
from gateway.translate.limits import OutgoingMessage


def msg(
    data: bytes = b"x", attributes: dict[str, str] | None = None, ordering_key: str = ""
) -> OutgoingMessage:
    return OutgoingMessage(data, attributes or {}, ordering_key)


def rejects(messages: list[OutgoingMessage], *fragments: str) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        limits.check_publish(messages)
    assert info.value.code is Code.INVALID_ARGUMENT
    for fragment in fragments:
        assert fragment in info.value.message, (fragment, info.value.message)
    return info.value


# -- every rule, with the field it names ----------------------------------------------------------


def test_empty_request() -> None:
    rejects([], "(messages)")


def test_too_many_messages() -> None:
    rejects([msg()] * 1001, "1001", "1000", "(messages)")


def test_exactly_1000_messages_pass() -> None:
    limits.check_publish([msg()] * 1000)


def test_empty_message() -> None:
    rejects([msg(), msg(b"")], "Message 1", "messages[1].data")


def test_empty_message_with_ordering_key_only() -> None:
    rejects([msg(b"", ordering_key="k")], "messages[0].data")


def test_attributes_only_message_passes() -> None:
    limits.check_publish([msg(b"", {"a": "b"})])


def test_empty_attribute_value_passes() -> None:
    limits.check_publish([msg(b"", {"a": ""})])


def test_too_many_attributes() -> None:
    attrs = {f"k{i}": "v" for i in range(101)}
    rejects([msg(attributes=attrs)], "101", "100", "messages[0].attributes")


def test_100_attributes_pass() -> None:
    limits.check_publish([msg(attributes={f"k{i}": "v" for i in range(100)})])


def test_empty_attribute_key() -> None:
    rejects([msg(attributes={"": "v"})], "messages[0].attributes")


def test_attribute_key_too_long() -> None:
    rejects([msg(), msg(attributes={"k" * 257: "v"})], "257", "256", "messages[1].attributes")


def test_attribute_key_counted_in_bytes() -> None:
    rejects([msg(attributes={"é" * 129: "v"})], "258", "messages[0].attributes")  # 129 chars


def test_attribute_key_256_bytes_passes() -> None:
    limits.check_publish([msg(attributes={"k" * 256: "v", "é" * 128: "v"})])


def test_attribute_value_too_long() -> None:
    rejects([msg(attributes={"k": "v" * 1025})], "1025", "1024", "messages[0].attributes")


def test_attribute_value_counted_in_bytes() -> None:
    rejects([msg(attributes={"k": "€" * 342})], "1026", "messages[0].attributes")  # 342 chars


def test_attribute_value_1024_bytes_passes() -> None:
    limits.check_publish([msg(attributes={"k": "v" * 1024, "j": "€" * 341 + "a"})])


@pytest.mark.parametrize("key", ["goog", "googclient_x", "google", "googclient_x-cloud-trace-context"])
def test_reserved_attribute_key(key: str) -> None:
    rejects([msg(attributes={key: "v"})], repr(key), "goog", "messages[0].attributes")


@pytest.mark.parametrize("key", ["Goog", "xgoog", "go", "goo"])
def test_attribute_keys_merely_like_goog_pass(key: str) -> None:
    limits.check_publish([msg(attributes={key: "v"})])


def test_the_trace_context_of_the_official_clients_passes() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    limits.check_publish([msg(attributes={"googclient_traceparent": parent, "googclient_tracestate": "k=v"})])


def test_ordering_key_too_long() -> None:
    rejects([msg(ordering_key="k" * 1025)], "1024", "messages[0].ordering_key")


def test_ordering_key_counted_in_bytes() -> None:
    rejects([msg(ordering_key="€" * 342)], "messages[0].ordering_key")  # 342 chars, 1026 bytes


def test_ordering_key_1024_bytes_passes() -> None:
    limits.check_publish([msg(ordering_key="k" * 1024), msg(ordering_key="€" * 341 + "a")])


_MB = b"x" * 1_000_000


def test_total_size_boundary() -> None:
    limits.check_publish([msg(_MB)] * 10)  # exactly 10,000,000 bytes
    err = rejects([msg(_MB)] * 10 + [msg(b"y")], "10000001", "10000000")
    assert "publish request" in err.message


def test_total_size_counts_attributes() -> None:
    rejects([msg(_MB)] * 9 + [msg(_MB[:999_999], {"k": "v"})], "10000001")


def test_total_size_counts_ordering_keys() -> None:
    rejects([msg(_MB)] * 9 + [msg(_MB[:999_999], ordering_key="kk")], "10000001")


def test_total_size_counts_ordering_key_bytes() -> None:
    """Ordering keys count in UTF-8 bytes, not characters (once counted len(str))."""
    ordering_key = "€" * 341  # 341 characters, 1023 bytes
    data = b"x" * (limits.MAX_PUBLISH_BYTES - 1023 + 1)
    assert len(data) + len(ordering_key.encode()) == 10_000_001
    rejects([msg(data, ordering_key=ordering_key)], "10000001")


def test_first_bad_message_is_named() -> None:
    rejects([msg(), msg(), msg(attributes={"goog-x": "v"}), msg(b"")], "message 2", "messages[2]")


# -- deadlines and counts ------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "expected"), [(0, 10), (10, 10), (11, 11), (600, 600)])
def test_ack_deadline_ok(given: int, expected: int) -> None:
    assert limits.ack_deadline(given) == expected


@pytest.mark.parametrize("seconds", [9, 1, -1, 601, 10**9])
def test_ack_deadline_invalid(seconds: int) -> None:
    with pytest.raises(InvalidArgument) as info:
        limits.ack_deadline(seconds)
    assert "ack_deadline_seconds" in info.value.message
    assert str(seconds) in info.value.message


def test_ack_deadline_custom_field() -> None:
    with pytest.raises(InvalidArgument, match="stream_ack_deadline_seconds"):
        limits.ack_deadline(5, "stream_ack_deadline_seconds")


@pytest.mark.parametrize("seconds", [0, 1, 9, 10, 599, 600])
def test_modify_deadline_ok(seconds: int) -> None:
    assert limits.modify_deadline(seconds) == seconds


@pytest.mark.parametrize("seconds", [-1, 601, 10**6])
def test_modify_deadline_invalid(seconds: int) -> None:
    with pytest.raises(InvalidArgument) as info:
        limits.modify_deadline(seconds)
    assert "ack_deadline_seconds" in info.value.message
    with pytest.raises(InvalidArgument, match="modify_deadline_seconds"):
        limits.modify_deadline(seconds, "modify_deadline_seconds")


@pytest.mark.parametrize("n", [1, 1000, 10**6])
def test_max_messages_ok(n: int) -> None:
    assert limits.max_messages(n) == n


@pytest.mark.parametrize("n", [0, -1])
def test_max_messages_invalid(n: int) -> None:
    with pytest.raises(InvalidArgument, match="max_messages"):
        limits.max_messages(n)


def test_seek_times_before_1970_mean_the_oldest_message() -> None:
    assert (
        limits.seek_time_ms(Timestamp(seconds=-1, nanos=999_000_000)) == 0
    )  # Kafka's -1 is "latest": never passed on
    assert limits.seek_time_ms(Timestamp(seconds=-62_135_596_800)) == 0
    assert limits.seek_time_ms(Timestamp(seconds=1, nanos=5_000_000)) == 1005


@pytest.mark.parametrize(
    ("seconds", "nanos"), [(2**62, 0), (0, -1), (0, 10**9), (-62_135_596_801, 0), (253_402_300_800, 0)]
)
def test_seek_times_outside_a_timestamp_are_invalid(seconds: int, nanos: int) -> None:
    with pytest.raises(InvalidArgument, match="Timestamp"):
        limits.seek_time_ms(Timestamp(seconds=seconds, nanos=nanos))
