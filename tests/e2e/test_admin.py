"""Administration RPCs and validation, with the status codes the published API uses."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from google.api_core import exceptions
from google.protobuf import field_mask_pb2
from google.pubsub_v1 import types

from tests.e2e.clients import clients, gapic_publisher
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration


def test_topic_lifecycle_with_pages_and_update_masks(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub = clients(shared_gateway)
    topics = [names("topics", f"-{i}") for i in range(5)]
    for t in topics:
        pub.create_topic(request={"name": t, "labels": {"team": "a"}})
    with pytest.raises(exceptions.AlreadyExists):
        pub.create_topic(name=topics[0])
    assert pub.get_topic(topic=topics[0]).labels["team"] == "a"

    listed = [t.name for t in pub.list_topics(request={"project": "projects/test-project", "page_size": 2})]
    assert set(topics) <= set(listed)
    assert listed == sorted(listed)
    page = pub.list_topics(request={"project": "projects/test-project", "page_size": 2})
    first_page = next(iter(page.pages))
    assert len(first_page.topics) == 2 and first_page.next_page_token

    updated = pub.update_topic(
        request={
            "topic": {"name": topics[0], "labels": {"team": "b"}},
            "update_mask": field_mask_pb2.FieldMask(paths=["labels"]),
        }
    )
    assert dict(updated.labels) == {"team": "b"}
    with pytest.raises(exceptions.InvalidArgument):
        pub.update_topic(
            request={"topic": {"name": topics[0]}, "update_mask": field_mask_pb2.FieldMask(paths=["name"])}
        )
    with pytest.raises(exceptions.InvalidArgument):
        pub.update_topic(
            request={
                "topic": {"name": topics[0]},
                "update_mask": field_mask_pb2.FieldMask(paths=["no_such_field"]),
            }
        )

    subscription = names("subscriptions")
    sub.create_subscription(name=subscription, topic=topics[1])
    assert list(pub.list_topic_subscriptions(topic=topics[1])) == [subscription]
    pub.delete_topic(topic=topics[1])
    with pytest.raises(exceptions.NotFound):
        pub.get_topic(topic=topics[1])
    assert sub.get_subscription(subscription=subscription).topic == "_deleted-topic_"
    with pytest.raises(exceptions.NotFound):
        pub.publish(topics[1], b"x").result(timeout=30)


def test_subscription_lifecycle(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    pub, sub = clients(shared_gateway)
    topic = names("topics")
    pub.create_topic(name=topic)
    subscription = names("subscriptions")
    created = sub.create_subscription(name=subscription, topic=topic)
    assert created.ack_deadline_seconds == 10
    assert created.message_retention_duration.total_seconds() == 7 * 24 * 3600
    assert created.expiration_policy.ttl.total_seconds() == 31 * 24 * 3600
    with pytest.raises(exceptions.AlreadyExists):
        sub.create_subscription(name=subscription, topic=topic)
    with pytest.raises(exceptions.NotFound):
        sub.create_subscription(name=names("subscriptions", "-x"), topic=names("topics", "-missing"))

    updated = sub.update_subscription(
        request={
            "subscription": {"name": subscription, "ack_deadline_seconds": 42, "labels": {"k": "v"}},
            "update_mask": field_mask_pb2.FieldMask(paths=["ack_deadline_seconds", "labels"]),
        }
    )
    assert updated.ack_deadline_seconds == 42 and dict(updated.labels) == {"k": "v"}
    assert sub.get_subscription(subscription=subscription).ack_deadline_seconds == 42
    for bad in (["filter"], ["topic"], ["nonsense"]):
        with pytest.raises(exceptions.InvalidArgument):
            sub.update_subscription(
                request={
                    "subscription": {"name": subscription},
                    "update_mask": field_mask_pb2.FieldMask(paths=bad),
                }
            )
    assert subscription in [s.name for s in sub.list_subscriptions(project="projects/test-project")]

    sub.delete_subscription(subscription=subscription)
    with pytest.raises(exceptions.NotFound):
        sub.get_subscription(subscription=subscription)
    with pytest.raises(exceptions.NotFound):
        sub.pull(subscription=subscription, max_messages=1, timeout=10)
    with pytest.raises(exceptions.NotFound):
        sub.delete_subscription(subscription=subscription)


def test_detached_subscription_refuses_pull(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub = clients(shared_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    pub.detach_subscription(request={"subscription": subscription})
    assert sub.get_subscription(subscription=subscription).detached
    with pytest.raises(exceptions.FailedPrecondition):
        sub.pull(subscription=subscription, max_messages=1, timeout=10)


BAD_NAMES = [
    "projects/test-project/topics/ab",  # too short
    "projects/test-project/topics/1abc",  # must start with a letter
    "projects/test-project/topics/goog-abc",  # reserved prefix
    "projects/test-project/topics/a b c",  # bad character
    "projects/test-project/queues/abc",  # wrong collection
    "topics/abc",
]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_invalid_names_are_invalid_argument(shared_gateway: GatewayProcess, bad: str) -> None:
    pub, _ = clients(shared_gateway)
    with pytest.raises(exceptions.InvalidArgument, match="Invalid resource name"):
        pub.create_topic(name=bad)


def test_publish_and_subscribe_validation(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub = clients(shared_gateway)
    gapic = gapic_publisher(shared_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    M = types.PubsubMessage
    cases: list[tuple[list[types.PubsubMessage], str]] = [
        ([], "at least one message"),
        ([M(data=b"x")] * 1001, "messages"),
        ([M()], "neither data nor attributes"),
        ([M(attributes={f"k{i}": "v" for i in range(101)})], "attributes"),
        ([M(attributes={"k" * 257: "v"})], "Attribute key"),
        ([M(attributes={"k": "v" * 1025})], "Value of attribute"),
        ([M(attributes={"googx": "v"})], "reserved"),
        ([M(data=b"x", ordering_key="o" * 1025)], "ordering_key"),
        ([M(data=b"x" * 5_000_001), M(data=b"y" * 5_000_001)], "bytes"),
    ]
    for messages, needle in cases:
        with pytest.raises(exceptions.InvalidArgument, match=needle):
            gapic.publish(topic=topic, messages=messages, retry=None)
    # Limits themselves are fine.
    ok = gapic.publish(
        topic=topic, messages=[M(data=b"x", attributes={f"k{i}": "v" * 1024 for i in range(100)})]
    )
    assert len(ok.message_ids) == 1

    for deadline in (5, 601):
        with pytest.raises(exceptions.InvalidArgument, match="ack_deadline_seconds"):
            sub.create_subscription(
                request={
                    "name": names("subscriptions", f"-{deadline}"),
                    "topic": topic,
                    "ack_deadline_seconds": deadline,
                }
            )
    with pytest.raises(exceptions.InvalidArgument, match="max_messages"):
        sub.pull(subscription=subscription, max_messages=0, timeout=10)
    with pytest.raises(exceptions.InvalidArgument, match="ack ID"):
        sub.acknowledge(subscription=subscription, ack_ids=["not-an-ack-id"])
    with pytest.raises(exceptions.InvalidArgument, match="ack_deadline_seconds"):
        sub.modify_ack_deadline(
            subscription=subscription, ack_ids=["00000000-0-0-1"], ack_deadline_seconds=601
        )
    # A bad request changes nothing: the one good message is still the only one delivered.
    time.sleep(0.5)
    resp = sub.pull(subscription=subscription, max_messages=10, timeout=10)
    assert [len(m.message.attributes) for m in resp.received_messages] == [100]


def test_topic_retention_is_the_kafka_topics_retention(
    shared_gateway: GatewayProcess, names: Callable[[str], str], kafka_bootstrap: str
) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    from gateway.translate.names import kafka_topic_for
    from gateway.translate.names import topic as topic_name

    pub, sub = clients(shared_gateway)
    topic = names("topics")
    pub.create_topic(request={"name": topic, "message_retention_duration": "3600s"})
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    def retention_ms() -> str:
        resource = ConfigResource("TOPIC", kafka_topic_for(topic_name(topic)))
        return admin.describe_configs([resource])[resource].result(30)["retention.ms"].value

    assert retention_ms() == "3600000"
    subscription = names("subscriptions")
    created = sub.create_subscription(name=subscription, topic=topic)
    assert created.topic_message_retention_duration.total_seconds() == 3600
    pub.update_topic(
        request={
            "topic": {"name": topic, "message_retention_duration": "7200s"},
            "update_mask": field_mask_pb2.FieldMask(paths=["message_retention_duration"]),
        }
    )
    assert retention_ms() == "7200000"
    with pytest.raises(exceptions.InvalidArgument, match="message_retention_duration"):
        pub.create_topic(request={"name": names("topics", "-short"), "message_retention_duration": "300s"})
