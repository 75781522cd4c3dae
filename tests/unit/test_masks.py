"""Update masks (core/masks.py): top-level paths and paths into singular message fields."""

from __future__ import annotations

import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.core import masks
from gateway.errors import InvalidArgument

ALL = {"labels", "push_config", "ack_deadline_seconds", "expiration_policy", "dead_letter_policy"}


def _stored() -> pb.Subscription:
    return pb.Subscription(
        name="projects/p/subscriptions/s",
        topic="projects/p/topics/t",
        ack_deadline_seconds=10,
        labels={"a": "1", "b": "2"},
        push_config=pb.PushConfig(
            push_endpoint="https://example.com/push",
            oidc_token=pb.PushConfig.OidcToken(service_account_email="sa@example.com", audience="aud"),
        ),
        dead_letter_policy=pb.DeadLetterPolicy(
            dead_letter_topic="projects/p/topics/dl", max_delivery_attempts=7
        ),
    )


def test_top_level_paths_replace_the_whole_field() -> None:
    dst = _stored()
    src = pb.Subscription(labels={"c": "3"}, ack_deadline_seconds=30, push_config=pb.PushConfig())
    assert masks.apply(src, dst, ["labels", "ack_deadline_seconds", "push_config"], ALL) == {
        "labels",
        "ack_deadline_seconds",
        "push_config",
    }
    assert dict(dst.labels) == {"c": "3"} and dst.ack_deadline_seconds == 30
    assert dst.HasField("push_config") and dst.push_config == pb.PushConfig()
    masks.apply(pb.Subscription(), dst, ["push_config", "dead_letter_policy"], ALL)
    assert not dst.HasField("push_config") and not dst.HasField("dead_letter_policy")


def test_a_nested_path_changes_that_field_only() -> None:
    dst = _stored()
    src = pb.Subscription(push_config=pb.PushConfig(oidc_token=pb.PushConfig.OidcToken(audience="new")))
    assert masks.apply(src, dst, ["push_config.oidc_token.audience"], ALL) == {"push_config"}
    assert dst.push_config.oidc_token.audience == "new"
    assert dst.push_config.oidc_token.service_account_email == "sa@example.com"
    assert dst.push_config.push_endpoint == "https://example.com/push"


def test_a_nested_path_the_request_leaves_empty_clears_it() -> None:
    dst = _stored()
    masks.apply(pb.Subscription(), dst, ["dead_letter_policy.max_delivery_attempts"], ALL)
    assert dst.dead_letter_policy.max_delivery_attempts == 0
    assert dst.dead_letter_policy.dead_letter_topic == "projects/p/topics/dl"
    # Into a message the stored version lacks, an empty value makes nothing.
    masks.apply(pb.Subscription(), dst, ["expiration_policy.ttl"], ALL)
    assert not dst.HasField("expiration_policy")
    src = pb.Subscription()
    src.expiration_policy.ttl.seconds = 86400
    masks.apply(src, dst, ["expiration_policy.ttl"], ALL)
    assert dst.expiration_policy.ttl.seconds == 86400


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("nonsense", "unknown field 'nonsense'"),
        ("push_config.nonsense", "unknown field 'push_config.nonsense'"),
        ("ack_deadline_seconds.x", "inside 'ack_deadline_seconds', which is not a message"),
        ("labels.a", "inside 'labels', which is not a message"),
        ("topic", "field 'topic' cannot be updated"),
        ("retry_policy.minimum_backoff", "field 'retry_policy' cannot be updated"),
        ("push_config..audience", "unknown field"),
    ],
)
def test_bad_paths_are_refused_and_nothing_changes(path: str, words: str) -> None:
    dst = _stored()
    src = pb.Subscription(ack_deadline_seconds=99, topic="projects/p/topics/other")
    with pytest.raises(InvalidArgument, match=words.replace("(", r"\(")):
        masks.apply(src, dst, ["ack_deadline_seconds", path], ALL)
    assert dst == _stored()


def test_an_empty_mask_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="at least one field"):
        masks.apply(pb.Subscription(), _stored(), [], ALL)
