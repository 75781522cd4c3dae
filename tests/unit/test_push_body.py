"""Push request bodies and headers (gateway.push.body): pure."""

from __future__ import annotations

import base64
import json

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.push import body
from gateway.push.body import PushTarget
from gateway.translate.records import MessageView

SUB = "projects/p/subscriptions/s"
MSG = MessageView(b"hello", {"k": "v"}, "", "1099511627776", 1_614_366_835_749)


def test_rfc3339_has_milliseconds_and_z() -> None:
    assert body.rfc3339(1_614_366_835_749) == "2021-02-26T19:13:55.749Z"
    assert body.rfc3339(0) == "1970-01-01T00:00:00.000Z"


def test_wrapped_body_matches_the_documented_example() -> None:
    req = body.build(SUB, MSG, 0, PushTarget("https://e.test/push"))
    assert req.headers == {"content-type": "application/json"}
    assert json.loads(req.body) == {
        "message": {
            "attributes": {"k": "v"},
            "data": base64.b64encode(b"hello").decode(),
            "messageId": "1099511627776",
            "message_id": "1099511627776",
            "publishTime": "2021-02-26T19:13:55.749Z",
            "publish_time": "2021-02-26T19:13:55.749Z",
        },
        "subscription": SUB,
    }


def test_ordering_key_and_delivery_attempt_only_when_present() -> None:
    msg = MessageView(b"", {}, "key-1", "7", 0)
    out = json.loads(body.build(SUB, msg, 3, PushTarget("http://e")).body)
    assert out["message"]["orderingKey"] == "key-1"
    assert out["deliveryAttempt"] == 3
    assert out["message"]["data"] == ""


def test_no_wrapper_sends_the_data_and_optionally_metadata_headers() -> None:
    plain = body.build(SUB, MSG, 2, PushTarget("http://e", no_wrapper=True))
    assert plain.body == b"hello"
    assert plain.headers == {"content-type": "application/octet-stream"}
    meta = body.build(
        SUB,
        MessageView(b"\x00raw", {"color": "red"}, "ok", "9", 1000),
        0,
        PushTarget("http://e", no_wrapper=True, write_metadata=True),
    )
    assert meta.body == b"\x00raw"
    assert meta.headers == {
        "content-type": "application/octet-stream",
        "x-goog-pubsub-subscription-name": SUB,
        "x-goog-pubsub-message-id": "9",
        "x-goog-pubsub-publish-time": "1970-01-01T00:00:01.000Z",
        "x-goog-pubsub-ordering-key": "ok",
        "color": "red",
    }


def test_attributes_that_cannot_be_headers_are_left_out() -> None:
    attrs = {
        "bad key": "x",
        "Authorization": "Bearer evil",
        "content-type": "text/html",
        "x-goog-pubsub-message-id": "forged",
        "newline": "a\r\nb",
        "ok": "v\tw",
        "é": "x",
        "User-Agent": "other",
        "Expect": "100-continue",
        "HOST": "elsewhere.test",
    }
    headers = body.metadata_headers(SUB, MessageView(b"", attrs, "", "5", 0))
    assert headers["x-goog-pubsub-message-id"] == "5"
    assert {k for k in headers if not k.startswith("x-goog-pubsub")} == {"ok"}


def test_audience_defaults_to_the_endpoint() -> None:
    assert PushTarget("https://e.test/p").audience == "https://e.test/p"
    assert PushTarget("https://e.test/p", oidc_audience="aud").audience == "aud"


def test_success_statuses() -> None:
    assert sorted(body.SUCCESS_STATUSES) == [102, 200, 201, 202, 204]


@hsettings(max_examples=200, deadline=None, database=None)
@given(
    data=st.binary(max_size=100),
    attrs=st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20)),
    attempt=st.integers(0, 100),
)
def test_wrapped_body_round_trips(data: bytes, attrs: dict[str, str], attempt: int) -> None:
    out = json.loads(
        body.build(SUB, MessageView(data, attrs, "", "1", 5), attempt, PushTarget("http://e")).body
    )
    assert base64.b64decode(out["message"]["data"]) == data
    assert out["message"]["attributes"] == attrs
    assert out.get("deliveryAttempt", 0) == attempt


@hsettings(max_examples=300, deadline=None, database=None)
@given(
    data=st.binary(max_size=64),
    attrs=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=12)),
    key=st.text(max_size=12),
    mid=st.one_of(st.integers(0, 2**60).map(str), st.text(max_size=10)),
    ms=st.integers(0, 2**42),
    attempt=st.integers(0, 100),
    sub=st.text(max_size=30),
)
def test_assembled_json_is_the_wrapped_dict(
    data: bytes, attrs: dict[str, str], key: str, mid: str, ms: int, attempt: int, sub: str
) -> None:
    msg = MessageView(data, attrs, key, mid, ms)
    assert json.loads(body.wrapped_json(sub, msg, attempt)) == _documented(sub, msg, attempt)


def _documented(subscription: str, message: MessageView, attempt: int) -> dict[str, object]:
    """The wrapped body as the push documentation describes it, field by field."""
    published = body.rfc3339(message.publish_time_ms)
    inner: dict[str, object] = {
        "attributes": dict(message.attributes),
        "data": base64.b64encode(message.data).decode(),
        "messageId": message.message_id,
        "message_id": message.message_id,
        "publishTime": published,
        "publish_time": published,
    }
    if message.ordering_key:
        inner["orderingKey"] = message.ordering_key
    out: dict[str, object] = {"message": inner, "subscription": subscription}
    if attempt > 0:
        out["deliveryAttempt"] = attempt
    return out


def test_rfc3339_agrees_with_datetime() -> None:
    import datetime

    for ms in (0, 999, 1_000, 951_782_400_123, 1_763_740_000_123, 4_102_444_800_000):
        moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
        assert body.rfc3339(ms) == moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
