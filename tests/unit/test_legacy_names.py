"""Names of the early API (gateway.legacy.names)."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidArgument
from gateway.legacy.names import LegacyNames, assigned_subscription, push_endpoint
from gateway.translate import names

N = LegacyNames("old")


def test_short_names_are_of_the_legacy_project() -> None:
    assert N.topic("foo") == "projects/old/topics/foo"
    assert N.subscription("bar") == "projects/old/subscriptions/bar"


def test_full_names_are_taken_as_they_are() -> None:
    assert N.topic("projects/p/topics/foo") == "projects/p/topics/foo"
    assert N.subscription("projects/p/subscriptions/s-1") == "projects/p/subscriptions/s-1"


@pytest.mark.parametrize(
    "bad", ["", "a", "1abc", "goog-x", "a/b/c", "projects/p/subscriptions/abc", "x" * 256]
)
def test_v1_rules_apply(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        N.topic(bad)


def test_names_are_shown_as_given() -> None:
    assert N.show("projects/old/topics/foo") == "foo"
    assert N.show("projects/old/topics/foo", given="projects/old/topics/foo") == "projects/old/topics/foo"
    assert N.show("projects/other/topics/foo") == "projects/other/topics/foo"
    assert N.show(names.DELETED_TOPIC) == names.DELETED_TOPIC


def test_an_assigned_name_is_in_the_topics_project_and_valid() -> None:
    name = assigned_subscription("projects/p/topics/tpc")
    assert name.startswith("projects/p/subscriptions/")
    names.subscription(name)
    assert name != assigned_subscription("projects/p/topics/tpc")


@pytest.mark.parametrize(
    ("given", "kept"),
    [("machinename:8888", "machinename:8888"), ("127.0.0.1:1", "127.0.0.1:1"), ("[::1]:0443", "[::1]:443")],
)
def test_push_endpoints_are_host_and_port(given: str, kept: str) -> None:
    assert push_endpoint(given, "any") == kept


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "host",
        ":80",
        "host:",
        "host:0",
        "host:65536",
        "http://h:80",
        "h h:1",
        "host:8a",
        "169.254.169.254:80",
    ],
)
def test_other_push_endpoints_are_invalid(bad: str) -> None:
    with pytest.raises(InvalidArgument, match="push_endpoint"):
        push_endpoint(bad, "any")


def test_push_endpoints_follow_the_destination_policy() -> None:
    with pytest.raises(InvalidArgument, match="push_endpoint"):
        push_endpoint("127.0.0.1:80", "public")
