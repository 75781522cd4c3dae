"""Labels of the early API <-> attributes, the numeric-labels header, and events
(gateway.legacy.labels, gateway.legacy.events, translate.records)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway._pb.tech.label.label_pb2 import Label
from gateway.errors import InvalidArgument
from gateway.legacy import events, labels
from gateway.translate import records
from gateway.translate.records import record

HYP = hsettings(max_examples=200, deadline=None, database=None)
keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
values = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
)


def _label(key: str, value: str | int) -> Label:
    return Label(key=key, num_value=value) if isinstance(value, int) else Label(key=key, str_value=value)


def _through_kafka(attributes: dict[str, str], numeric: tuple[str, ...]) -> records.MessageView:
    key, value, headers = records.to_record(b"d", attributes, "", numeric)
    return records.to_message(record(0, 7, 1000, key, value, headers))


def test_strings_and_numbers_become_attributes() -> None:
    attrs, numeric = labels.to_attributes([Label(key="a", str_value="x"), Label(key="n", num_value=-42)])
    assert attrs == {"a": "x", "n": "-42"}
    assert numeric == ("n",)


@pytest.mark.parametrize(
    ("given", "word"),
    [
        ([Label(str_value="x")], "no key"),
        ([Label(key="", num_value=1)], "no key"),
        ([Label(key="a")], "no value"),
        ([Label(key="a", str_value="x"), Label(key="a", num_value=1)], "twice"),
    ],
)
def test_bad_labels_are_invalid_arguments(given: list[Label], word: str) -> None:
    with pytest.raises(InvalidArgument, match=word):
        labels.to_attributes(given)


@HYP
@given(st.dictionaries(keys, values, max_size=8))
def test_labels_round_trip_through_a_record(given: dict[str, str | int]) -> None:
    sent = [_label(k, v) for k, v in given.items()]
    attrs, numeric = labels.to_attributes(sent)
    view = _through_kafka(attrs, numeric)
    assert records.NUMERIC_HEADER not in view.attributes
    assert view.attributes == attrs
    event = events.message_event("sub", view)
    assert list(event.message.label) == sent


def test_a_string_that_looks_like_a_number_stays_a_string() -> None:
    view = _through_kafka({"n": "12", "s": "12"}, ("n",))
    assert [lb.WhichOneof("value") for lb in events.message_event("s", view).message.label] == [
        "num_value",
        "str_value",
    ]


@pytest.mark.parametrize("text", ["012", "+1", "1.0", " 1", "9223372036854775808", "", "-0x1"])
def test_only_exact_int64_decimals_are_numbers(text: str) -> None:
    assert labels.number(text) is None


def test_a_foreign_numeric_header_is_ignored() -> None:
    rec = record(0, 1, 0, None, b"x", [(records.NUMERIC_HEADER, b"not json"), ("n", b"5")])
    view = records.to_message(rec)
    assert view.attributes == {"n": "5"} and view.numeric == frozenset()
    assert events.message_event("s", view).message.label[0].str_value == "5"


def test_message_event_carries_data_id_and_subscription() -> None:
    view = _through_kafka({}, ())
    event = events.message_event("my-sub", view)
    assert event.subscription == "my-sub"
    assert event.message.data == b"d"
    assert event.message.message_id == records.message_id(0, 7)
    assert event.WhichOneof("type") == "message"
    assert events.deleted_event("my-sub").deleted


def test_strings_that_are_not_utf8_are_refused_anywhere_in_a_request() -> None:
    from gateway._pb.tech.pubsub import pubsub_pb2 as lpb
    from gateway.legacy.servicers import text_checked

    fine = lpb.PublishBatchRequest(
        topic="t", messages=[lpb.PubsubMessage(label=[Label(key="k", str_value="v")])]
    )
    assert text_checked(fine) is fine
    # PublishBatchRequest{messages: [PubsubMessage{label: [Label{key: b"\xff"}]}]}
    label = b"\x0a\x01\xff"
    message = b"\x12" + bytes([len(label)]) + label
    request = lpb.PublishBatchRequest.FromString(b"\x12" + bytes([len(message)]) + message)
    with pytest.raises(InvalidArgument, match=r"messages\.label\.key is not valid UTF-8"):
        text_checked(request)
