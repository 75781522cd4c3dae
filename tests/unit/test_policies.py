"""A subscription's delivery policies (gateway.core.policies): retry backoff, dead-letter headers,
and their derivation from a subscription (through a fake with the resource's fields)."""

from __future__ import annotations

import datetime
import re
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.core import policies
from gateway.core.policies import backoff_of, dead_letter_headers
from gateway.errors import InvalidArgument
from gateway.translate.records import Record, record

HYP = hsettings(max_examples=200, deadline=None, database=None)
SUB = "projects/proj-1/subscriptions/sub-a"
RFC3339_MS_Z = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


# -- backoff -----------------------------------------------------------------------------------


def test_backoff_doubles_from_the_minimum_up_to_the_maximum() -> None:
    delay = backoff_of(100, 5_000)
    assert [delay(n) for n in range(1, 10)] == [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]
    assert delay(0) == 100, "no failed delivery yet counts as the first"
    assert delay(10**9) == 5_000, "huge counts neither overflow nor exceed the maximum"


def test_backoff_defaults_of_pubsub() -> None:
    delay = backoff_of(policies.DEFAULT_MIN_BACKOFF_MS, policies.DEFAULT_MAX_BACKOFF_MS)
    assert policies.DEFAULT_MIN_BACKOFF_MS == 10_000
    assert policies.DEFAULT_MAX_BACKOFF_MS == 600_000
    assert delay(1) == 10_000
    assert delay(6) == 320_000
    assert delay(7) == 600_000


@pytest.mark.parametrize("maximum", [0, 1, 600_000])
def test_backoff_with_minimum_zero_is_zero(maximum: int) -> None:
    delay = backoff_of(0, maximum)
    assert [delay(n) for n in (0, 1, 2, 10, 31, 32, 1000)] == [0] * 7


def test_backoff_equal_bounds_is_constant() -> None:
    delay = backoff_of(7_000, 7_000)
    assert {delay(n) for n in range(50)} == {7_000}


@given(lo=st.integers(0, 600_000), span=st.integers(0, 600_000), n=st.integers(1, 200))
@HYP
def test_backoff_is_exponential_capped_and_monotonic(lo: int, span: int, n: int) -> None:
    hi = lo + span
    delay = backoff_of(lo, hi)
    d = delay(n)
    assert isinstance(d, int)
    assert d == min(hi, lo * 2 ** (n - 1))
    assert lo <= d <= hi
    assert delay(n + 1) >= d
    assert delay(n + 1) == min(hi, 2 * d), "each failure doubles the delay until the cap"
    assert delay(1) == lo


@given(lo=st.integers(0, 600_000), hi=st.integers(0, 600_000))
@HYP
def test_backoff_never_exceeds_the_maximum(lo: int, hi: int) -> None:
    delay = backoff_of(lo, hi)
    ds = [delay(n) for n in range(40)]
    assert all(0 <= d <= hi for d in ds)
    assert ds == sorted(ds)


# -- dead-letter headers -----------------------------------------------------------------------


def _record(timestamp_ms: int, headers: Any = None) -> Record:
    return record(partition=2, offset=17, timestamp_ms=timestamp_ms, key=b"k", value=b"v", headers=headers)


def test_dead_letter_headers_keep_the_originals_and_add_the_source() -> None:
    original = [("a", b"1"), ("b", "two"), ("c", None)]
    out = dead_letter_headers(_record(1_700_000_000_123, original), SUB, 5)
    assert out[:3] == original
    assert out[3:] == [
        ("CloudPubSubDeadLetterSourceDeliveryCount", b"5"),
        ("CloudPubSubDeadLetterSourceSubscription", b"sub-a"),
        ("CloudPubSubDeadLetterSourceSubscriptionProject", b"proj-1"),
        ("CloudPubSubDeadLetterSourceTopicPublishTime", b"2023-11-14T22:13:20.123Z"),
    ]
    assert original == [("a", b"1"), ("b", "two"), ("c", None)], "the record is not changed"


@pytest.mark.parametrize("headers", [None, [], ()])
def test_dead_letter_headers_without_original_headers(headers: Any) -> None:
    out = dead_letter_headers(_record(0, headers), SUB, 1)
    assert dict(out) == {
        "CloudPubSubDeadLetterSourceDeliveryCount": b"1",
        "CloudPubSubDeadLetterSourceSubscription": b"sub-a",
        "CloudPubSubDeadLetterSourceSubscriptionProject": b"proj-1",
        "CloudPubSubDeadLetterSourceTopicPublishTime": b"1970-01-01T00:00:00.000Z",
    }
    assert len(out) == 4


def test_dead_letter_headers_values_are_bytes_and_counts_are_decimal() -> None:
    out = dict(dead_letter_headers(_record(1), SUB, 123))
    assert all(isinstance(v, bytes) for v in out.values())
    assert out["CloudPubSubDeadLetterSourceDeliveryCount"] == b"123"
    assert out["CloudPubSubDeadLetterSourceTopicPublishTime"] == b"1970-01-01T00:00:00.001Z"


@given(ts=st.integers(0, 4_102_444_800_000), deliveries=st.integers(1, 100))  # up to 2100
@HYP
def test_dead_letter_publish_time_is_rfc3339_utc(ts: int, deliveries: int) -> None:
    out = dict(dead_letter_headers(_record(ts), SUB, deliveries))
    text = out["CloudPubSubDeadLetterSourceTopicPublishTime"]
    assert isinstance(text, bytes)
    stamp = text.decode()
    assert RFC3339_MS_Z.fullmatch(stamp), stamp
    expected = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ts)
    assert stamp == expected.strftime("%Y-%m-%dT%H:%M:%S") + f".{ts % 1000:03d}Z"
    back = datetime.datetime.fromisoformat(stamp)
    assert back == expected
    assert out["CloudPubSubDeadLetterSourceDeliveryCount"] == str(deliveries).encode()


def test_dead_letter_publish_time_is_exact_for_far_future_timestamps() -> None:
    out = dict(dead_letter_headers(_record(11_760_640_680_585), SUB, 1))
    assert out["CloudPubSubDeadLetterSourceTopicPublishTime"] == b"2342-09-06T12:38:00.585Z"


# -- policies of a subscription (a fake with the resource's fields) ------------------------------


def _duration(ms: int) -> SimpleNamespace:
    return SimpleNamespace(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


class FakeMessage(SimpleNamespace):
    """Just enough of a protobuf message: fields, and HasField for the set ones."""

    def HasField(self, name: str) -> bool:  # protobuf spelling
        return getattr(self, name, None) is not None


def _sub(**fields: Any) -> FakeMessage:
    defaults: dict[str, Any] = {
        "filter": "",
        "message_retention_duration": _duration(0),
        "retry_policy": None,
        "dead_letter_policy": None,
    }
    return FakeMessage(**{**defaults, **fields})


def test_of_a_plain_subscription() -> None:
    p = policies.of(_sub(), "dlq")
    assert p.filter is None
    assert p.retention_ms == policies.DEFAULT_RETENTION_MS == 7 * 24 * 3600 * 1000
    assert p.backoff is None
    assert p.max_attempts is None
    assert p.dead_letter_kafka_topic is None


def test_of_retry_policy_and_retention() -> None:
    rp = FakeMessage(minimum_backoff=_duration(1_500), maximum_backoff=_duration(4_000))
    p = policies.of(_sub(retry_policy=rp, message_retention_duration=_duration(3_600_250)), None)
    assert p.retention_ms == 3_600_250
    assert p.backoff is not None
    assert [p.backoff(n) for n in (1, 2, 3, 4)] == [1_500, 3_000, 4_000, 4_000]


def test_of_retry_policy_defaults_for_unset_bounds() -> None:
    p = policies.of(_sub(retry_policy=FakeMessage(minimum_backoff=None, maximum_backoff=None)), None)
    assert p.backoff is not None
    assert [p.backoff(n) for n in (1, 2, 7, 8)] == [10_000, 20_000, 600_000, 600_000]
    p = policies.of(_sub(retry_policy=FakeMessage(minimum_backoff=_duration(0), maximum_backoff=None)), None)
    assert p.backoff is not None
    assert p.backoff(5) == 0


def test_of_dead_letter_policy() -> None:
    dlp = FakeMessage(dead_letter_topic="projects/p/topics/dead", max_delivery_attempts=7)
    p = policies.of(_sub(dead_letter_policy=dlp), "dlq-topic")
    assert p.max_attempts == 7
    assert p.dead_letter_kafka_topic == "dlq-topic"
    dlp = FakeMessage(dead_letter_topic="projects/p/topics/dead", max_delivery_attempts=0)
    assert policies.of(_sub(dead_letter_policy=dlp), "dlq-topic").max_attempts == 5


def test_of_parses_the_filter() -> None:
    p = policies.of(_sub(filter='attributes.a = "1"'), None)
    assert p.filter is not None
    assert p.filter({"a": "1"}) and not p.filter({"a": "2"})
    with pytest.raises(InvalidArgument):
        policies.of(_sub(filter="attributes.a ="), None)
