"""Labels (Google's rules), quotas decided by log order, and the limit settings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import Code, InvalidArgument, ResourceExhausted
from gateway.settings import SettingsError
from gateway.translate import limits
from tests.unit.test_settings import parse

OWN = {"kafka-topic": 249, "kafka-partitions": 63}


def refused(labels: dict[str, str], *fragments: str, own: dict[str, int] | None = None) -> str:
    with pytest.raises(InvalidArgument) as info:
        limits.check_labels(labels, own)
    assert info.value.code is Code.INVALID_ARGUMENT
    for fragment in fragments:
        assert fragment in info.value.message, (fragment, info.value.message)
    return info.value.message


# -- labels ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"team": "a"},
        {"k": ""},  # values may be empty
        {"a" * 63: "b" * 63},
        {"env_1-x": "prod_2-y"},
        {"ключ": "значение"},  # lowercase letters of other scripts
        {"名前": "値"},  # letters without case ("international characters")
        {"k": "٣"},  # digits of any script
        {f"k{i}": "v" for i in range(64)},
    ],
)
def test_valid_labels(labels: dict[str, str]) -> None:
    limits.check_labels(labels)


@pytest.mark.parametrize(
    ("labels", "fragment"),
    [
        ({"Team": "a"}, "label key 'Team'"),  # uppercase key
        ({"": "a"}, "label key ''"),
        ({"1team": "a"}, "starts with"),  # must start with a letter
        ({"_team": "a"}, "starts with"),
        ({"-team": "a"}, "starts with"),
        ({"a" * 64: "b"}, "1 to 63 characters"),
        ({"te am": "a"}, "label key"),
        ({"te.am": "a"}, "label key"),
        ({"Ключ": "a"}, "label key"),  # an uppercase letter of another script
        ({"k": "A"}, "value 'A' of label k"),
        ({"k": "a.b"}, "value 'a.b'"),
        ({"k": "a/b"}, "value"),
        ({"k": "b" * 64}, "at most 63 characters"),
        ({"k": "🙂"}, "value"),  # a symbol, not a letter
    ],
)
def test_invalid_labels(labels: dict[str, str], fragment: str) -> None:
    refused(labels, fragment, "(labels)")


def test_at_most_64_labels() -> None:
    refused({f"k{i}": "v" for i in range(65)}, "Too many labels: 65", "at most 64")


def test_a_long_refused_value_is_not_echoed_whole() -> None:
    message = refused({"k": "X" * 1_000_000})
    assert len(message) < 400 and "1000000 characters" in message


def test_gateway_labels_follow_their_own_rules() -> None:
    """A kafka-topic value is a Kafka name: dots, uppercase, up to 249 characters."""
    limits.check_labels({"kafka-topic": "Legacy.Orders_v2", "kafka-partitions": "12"}, OWN)
    limits.check_labels({"kafka-topic": "t" * 249}, OWN)
    refused({"kafka-topic": "t" * 250}, "at most 249", own=OWN)
    refused({"kafka-topic": "Legacy.Orders"}, "value 'Legacy.Orders'")  # elsewhere: Google's rules
    refused({f"k{i}": "v" for i in range(64)} | {"kafka-topic": "x"}, "Too many labels", own=OWN)


_LETTER = st.characters(categories=["Ll", "Lo"])
_CHAR = st.characters(categories=["Ll", "Lo", "Nd", "Nl", "No"]) | st.sampled_from("_-")


@given(first=_LETTER, rest=st.text(_CHAR, max_size=62), value=st.text(_CHAR, max_size=63))
def test_every_key_and_value_of_googles_alphabet_passes(first: str, rest: str, value: str) -> None:
    limits.check_labels({first + rest: value})


@given(key=st.text(max_size=70), value=st.text(max_size=70))
def test_anything_else_is_invalid_argument_and_what_passes_is_sane(key: str, value: str) -> None:
    try:
        limits.check_labels({key: value})
    except InvalidArgument:
        return
    assert 1 <= len(key) <= 63 and len(value) <= 63
    assert key[0].isalpha() and not key[0].isupper()
    assert not any(c.isupper() or c.isspace() or c in "./:=@" for c in key + value)


# -- quotas ---------------------------------------------------------------------------------------


def quota_error(current: int) -> ResourceExhausted:
    return limits.quota_exceeded("topics", "p", current, 3, "--max-topics-per-project")


def test_quota_message_names_the_limit_and_the_setting() -> None:
    err = quota_error(3)
    assert err.code is Code.RESOURCE_EXHAUSTED
    assert 'type="topics-per-project", current=3, maximum=3' in err.message
    assert "--max-topics-per-project" in err.message


# -- settings -------------------------------------------------------------------------------------


def test_limit_defaults() -> None:
    s = parse([])
    assert (
        s.max_partitions_per_topic,
        s.max_topics_per_project,
        s.max_subscriptions_per_project,
        s.max_snapshots_per_project,
        s.max_schemas_per_project,
    ) == (64, 10_000, 10_000, 5_000, 10_000)


def test_limits_from_flags_and_env() -> None:
    s = parse(
        ["--max-topics-per-project", "3"],
        {
            "PUBSUB_GATEWAY_MAX_PARTITIONS_PER_TOPIC": "8",
            "PUBSUB_GATEWAY_MAX_SUBSCRIPTIONS_PER_PROJECT": "4",
            "PUBSUB_GATEWAY_MAX_SNAPSHOTS_PER_PROJECT": "5",
            "PUBSUB_GATEWAY_MAX_SCHEMAS_PER_PROJECT": "6",
            "PUBSUB_GATEWAY_MAX_TOPICS_PER_PROJECT": "99",  # the flag wins
        },
    )
    assert (
        s.max_partitions_per_topic,
        s.max_topics_per_project,
        s.max_subscriptions_per_project,
        s.max_snapshots_per_project,
        s.max_schemas_per_project,
    ) == (8, 3, 4, 5, 6)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--max-partitions-per-topic", "0"], "--max-partitions-per-topic must be at least 1"),
        (["--max-topics-per-project", "-1"], "--max-topics-per-project must be at least 1"),
        (["--max-subscriptions-per-project", "0"], "--max-subscriptions-per-project"),
        (["--max-snapshots-per-project", "0"], "--max-snapshots-per-project"),
        (["--max-schemas-per-project", "0"], "--max-schemas-per-project"),
        (["--max-partitions-per-topic", "2"], "--default-partitions (4) must not exceed"),
    ],
)
def test_limits_out_of_range_are_refused(argv: list[str], fragment: str) -> None:
    with pytest.raises(SettingsError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        parse(argv)
