"""Settings the gateway cannot act on, through the official client and REST: refused with
UNIMPLEMENTED naming the field, before anything is made; settings that only describe Google's
infrastructure round-trip; what Pub/Sub sets itself is overwritten (docs/fields.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from google.api_core import exceptions
from google.protobuf import field_mask_pb2
from google.pubsub_v1 import types

from gateway.translate.unsupported import MARK
from tests.inprocess.conftest import InProcessGateway

Names = Callable[..., str]
TRANSFORM = types.MessageTransform(
    javascript_udf=types.JavaScriptUDF(function_name="f", code="function f(m) {}")
)
REFUSED_TOPIC: dict[str, dict[str, Any]] = {
    "ingestion_data_source_settings": {
        "ingestion_data_source_settings": types.IngestionDataSourceSettings(
            aws_kinesis=types.IngestionDataSourceSettings.AwsKinesis(stream_arn="arn:aws:kinesis:x")
        )
    },
    "message_transforms": {"message_transforms": [TRANSFORM]},
}
REFUSED_SUBSCRIPTION: dict[str, dict[str, Any]] = {
    "bigquery_config": {"bigquery_config": types.BigQueryConfig(table="p.dataset.table")},
    "cloud_storage_config": {"cloud_storage_config": types.CloudStorageConfig(bucket="bucket")},
    "bigtable_config": {"bigtable_config": types.BigtableConfig(table="projects/p/instances/i/tables/t")},
    "message_transforms": {"message_transforms": [TRANSFORM]},
    "push_config": {
        "push_config": types.PushConfig(
            push_endpoint="http://127.0.0.1:9/push", attributes={"x-goog-version": "v1beta1"}
        )
    },
}


@pytest.fixture(scope="module")
def kafka(gw: InProcessGateway) -> AdminClient:
    assert gw.settings.kafka_bootstrap
    return AdminClient({"bootstrap.servers": gw.settings.kafka_bootstrap})


def kafka_objects(admin: AdminClient, mark: str) -> list[str]:
    """Kafka topics and consumer groups whose names hold `mark` (a resource's unique id)."""
    topics = [t for t in admin.list_topics(timeout=30).topics if mark in t]
    groups = [g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid if mark in g.group_id]
    return topics + groups


def uid(name: str) -> str:
    return name.rsplit("/", 1)[1]  # `sub-<hex>`: unique, and part of its log's and group's names


def refused(call: Callable[[], object], field: str) -> None:
    with pytest.raises(exceptions.MethodNotImplemented) as info:
        call()
    assert field in info.value.message and MARK in info.value.message, info.value.message


@pytest.mark.parametrize("field", sorted(REFUSED_TOPIC))
def test_create_topic_refuses_and_makes_nothing(
    gw: InProcessGateway, names: Names, kafka: AdminClient, field: str
) -> None:
    publisher, _ = gw.clients()
    topic = names("topics")
    refused(lambda: publisher.create_topic(request={"name": topic, **REFUSED_TOPIC[field]}), field)
    with pytest.raises(exceptions.NotFound):
        publisher.get_topic(topic=topic)
    assert kafka_objects(kafka, uid(topic)) == []


@pytest.mark.parametrize("field", sorted(REFUSED_TOPIC))
def test_update_topic_refuses_what_its_mask_names(gw: InProcessGateway, names: Names, field: str) -> None:
    publisher, _ = gw.clients()
    topic = names("topics")
    before = publisher.create_topic(request={"name": topic, "labels": {"a": "b"}})
    change = types.Topic(name=topic, labels={"a": "c"}, **REFUSED_TOPIC[field])
    refused(
        lambda: publisher.update_topic(
            topic=change, update_mask=field_mask_pb2.FieldMask(paths=["labels", field])
        ),
        field,
    )
    assert publisher.get_topic(topic=topic) == before
    # The same topic, with a mask that leaves the refused field out, is an ordinary update.
    after = publisher.update_topic(topic=change, update_mask=field_mask_pb2.FieldMask(paths=["labels"]))
    assert after.labels == {"a": "c"} and not after.message_transforms
    assert not after.ingestion_data_source_settings


@pytest.mark.parametrize("field", sorted(REFUSED_SUBSCRIPTION))
def test_create_subscription_refuses_and_makes_nothing(
    gw: InProcessGateway, names: Names, kafka: AdminClient, field: str
) -> None:
    publisher, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    publisher.create_topic(name=topic)
    request = {"name": sub, "topic": topic, **REFUSED_SUBSCRIPTION[field]}
    refused(
        lambda: subscriber.create_subscription(request=request),
        field if field != "push_config" else "v1beta1",
    )
    with pytest.raises(exceptions.NotFound):
        subscriber.get_subscription(subscription=sub)
    assert list(publisher.list_topic_subscriptions(topic=topic)) == []
    assert kafka_objects(kafka, uid(sub)) == []  # no lease/ack log, no consumer group


@pytest.mark.parametrize("field", sorted(REFUSED_SUBSCRIPTION))
def test_update_subscription_refuses_what_its_mask_names(
    gw: InProcessGateway, names: Names, field: str
) -> None:
    publisher, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    publisher.create_topic(name=topic)
    before = subscriber.create_subscription(name=sub, topic=topic)
    change = types.Subscription(name=sub, topic=topic, ack_deadline_seconds=42, **REFUSED_SUBSCRIPTION[field])
    mask = field_mask_pb2.FieldMask(paths=["ack_deadline_seconds", field])
    refused(
        lambda: subscriber.update_subscription(subscription=change, update_mask=mask),
        field if field != "push_config" else "v1beta1",
    )
    assert subscriber.get_subscription(subscription=sub) == before
    # Clearing it (the mask names it, the value is unset) asks for nothing.
    cleared = types.Subscription(name=sub, topic=topic, ack_deadline_seconds=42)
    after = subscriber.update_subscription(subscription=cleared, update_mask=mask)
    assert after.ack_deadline_seconds == 42


@pytest.mark.parametrize(
    ("path", "field"),
    [("bigquery_config.table", "bigquery_config"), ("cloud_storage_config.bucket", "cloud_storage_config")],
)
def test_a_path_into_a_refused_field_is_refused_too(
    gw: InProcessGateway, names: Names, path: str, field: str
) -> None:
    publisher, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    publisher.create_topic(name=topic)
    before = subscriber.create_subscription(name=sub, topic=topic)
    change = types.Subscription(name=sub, topic=topic, **REFUSED_SUBSCRIPTION[field])
    refused(
        lambda: subscriber.update_subscription(
            subscription=change, update_mask=field_mask_pb2.FieldMask(paths=[path])
        ),
        field,
    )
    assert subscriber.get_subscription(subscription=sub) == before


def test_modify_push_config_refuses_attributes_it_cannot_honour(gw: InProcessGateway, names: Names) -> None:
    publisher, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    publisher.create_topic(name=topic)
    before = subscriber.create_subscription(name=sub, topic=topic)
    for attributes, words in (({"x-goog-version": "v1beta1"}, "v1beta1"), ({"color": "red"}, "color")):
        push = types.PushConfig(push_endpoint="http://127.0.0.1:9/push", attributes=attributes)
        refused(lambda p=push: subscriber.modify_push_config(subscription=sub, push_config=p), words)
        assert subscriber.get_subscription(subscription=sub) == before
    # v1 is the format the gateway sends: accepted (then switched back to pull).
    v1 = types.PushConfig(push_endpoint="http://127.0.0.1:9/push", attributes={"x-goog-version": "v1"})
    subscriber.modify_push_config(subscription=sub, push_config=v1)
    assert subscriber.get_subscription(subscription=sub).push_config.attributes == {"x-goog-version": "v1"}
    subscriber.modify_push_config(subscription=sub, push_config=types.PushConfig())


def test_a_push_subscription_always_names_its_push_format(gw: InProcessGateway, names: Names) -> None:
    """As Pub/Sub returns it: `x-goog-version` defaults to v1 on create, and a change that does
    not name it keeps the one before. A pull subscription has no attributes."""
    publisher, subscriber = gw.clients()
    topic, push_sub, pull_sub = names("topics"), names("subscriptions"), names("subscriptions", "-pull")
    publisher.create_topic(name=topic)
    endpoint = "http://127.0.0.1:9/push"
    made = subscriber.create_subscription(
        name=push_sub, topic=topic, push_config=types.PushConfig(push_endpoint=endpoint)
    )
    assert made.push_config.attributes == {"x-goog-version": "v1"}
    assert subscriber.get_subscription(subscription=push_sub).push_config.attributes == {
        "x-goog-version": "v1"
    }
    beta = types.PushConfig(push_endpoint=endpoint, attributes={"x-goog-version": "v1beta2"})
    subscriber.modify_push_config(subscription=push_sub, push_config=beta)
    subscriber.modify_push_config(subscription=push_sub, push_config=types.PushConfig(push_endpoint=endpoint))
    kept = subscriber.get_subscription(subscription=push_sub).push_config
    assert kept.attributes == {"x-goog-version": "v1beta2"}
    updated = subscriber.update_subscription(
        subscription=types.Subscription(
            name=push_sub, push_config=types.PushConfig(push_endpoint=endpoint + "2")
        ),
        update_mask={"paths": ["push_config"]},
    )
    assert updated.push_config.attributes == {"x-goog-version": "v1beta2"}
    pull = subscriber.create_subscription(name=pull_sub, topic=topic)
    assert pull.push_config.attributes == {}
    subscriber.modify_push_config(subscription=push_sub, push_config=types.PushConfig())
    assert subscriber.get_subscription(subscription=push_sub).push_config == types.PushConfig()


def test_how_to_push_without_an_endpoint_is_invalid(
    gw: InProcessGateway, names: Names, kafka: AdminClient
) -> None:
    publisher, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    publisher.create_topic(name=topic)
    token = types.PushConfig(oidc_token=types.PushConfig.OidcToken(service_account_email="a@b.example"))
    with pytest.raises(exceptions.InvalidArgument, match=r"push_config\.oidc_token"):
        subscriber.create_subscription(request={"name": sub, "topic": topic, "push_config": token})
    assert kafka_objects(kafka, uid(sub)) == []
    before = subscriber.create_subscription(name=sub, topic=topic)
    bare = types.PushConfig(no_wrapper=types.PushConfig.NoWrapper(write_metadata=True))
    with pytest.raises(exceptions.InvalidArgument, match=r"push_config\.no_wrapper"):
        subscriber.modify_push_config(subscription=sub, push_config=bare)
    with pytest.raises(exceptions.InvalidArgument, match=r"push_config\.oidc_token"):
        subscriber.update_subscription(
            subscription=types.Subscription(name=sub, push_config=token),
            update_mask=field_mask_pb2.FieldMask(paths=["push_config"]),
        )
    assert subscriber.get_subscription(subscription=sub) == before


def test_infrastructure_fields_round_trip_and_output_only_fields_are_overwritten(
    gw: InProcessGateway, names: Names
) -> None:
    publisher, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    storage = types.MessageStoragePolicy(
        allowed_persistence_regions=["europe-west1"], enforce_in_transit=True
    )
    key = "projects/p/locations/europe-west1/keyRings/r/cryptoKeys/k"
    made = publisher.create_topic(
        request={
            "name": topic,
            "kms_key_name": key,
            "message_storage_policy": storage,
            "satisfies_pzs": True,
            "tags": {"123/environment": "production"},
            "state": types.Topic.State.INGESTION_RESOURCE_ERROR,
        }
    )
    got = publisher.get_topic(topic=topic)
    assert got == made
    assert got.kms_key_name == key and got.message_storage_policy == storage
    assert not got.satisfies_pzs and not got.tags and got.state == types.Topic.State.ACTIVE
    updated = publisher.update_topic(
        topic=types.Topic(name=topic, kms_key_name=key + "2"),
        update_mask=field_mask_pb2.FieldMask(paths=["kms_key_name"]),
    )
    assert updated.kms_key_name == key + "2" and updated.message_storage_policy == storage

    info = types.Subscription.AnalyticsHubSubscriptionInfo(listing="l", subscription="s")
    made_sub = subscriber.create_subscription(
        request={
            "name": sub,
            "topic": topic,
            "retain_acked_messages": True,
            "topic_message_retention_duration": {"seconds": 12345},
            "analytics_hub_subscription_info": info,
            "tags": {"123/environment": "production"},
            "state": types.Subscription.State.RESOURCE_ERROR,
        }
    )
    got_sub = subscriber.get_subscription(subscription=sub)
    assert got_sub == made_sub
    assert got_sub.retain_acked_messages
    assert "topic_message_retention_duration" not in got_sub  # the topic has no retention
    assert "analytics_hub_subscription_info" not in got_sub and not got_sub.tags
    assert got_sub.state == types.Subscription.State.ACTIVE


def test_a_subscription_created_detached_delivers_nothing(gw: InProcessGateway, names: Names) -> None:
    publisher, subscriber = gw.clients()
    topic, sub = names("topics"), names("subscriptions")
    publisher.create_topic(name=topic)
    assert subscriber.create_subscription(request={"name": sub, "topic": topic, "detached": True}).detached
    with pytest.raises(exceptions.FailedPrecondition):
        subscriber.pull(subscription=sub, max_messages=1, timeout=10)


def test_rest_refuses_a_bigquery_subscription(gw: InProcessGateway, names: Names, kafka: AdminClient) -> None:
    topic, sub = names("topics"), names("subscriptions")
    assert gw.http("PUT", topic, {})[0] == 200
    status, body = gw.http("PUT", sub, {"topic": topic, "bigqueryConfig": {"table": "p.d.t"}})
    assert status == 501 and body["error"]["status"] == "UNIMPLEMENTED"
    assert "bigquery_config" in body["error"]["message"] and MARK in body["error"]["message"]
    status, body = gw.http("PUT", topic + "-2", {"messageTransforms": [{"enabled": True}]})
    assert status == 501 and "message_transforms" in body["error"]["message"]
    with urllib.request.urlopen(f"http://{gw.rest_address}/v1/{topic}/subscriptions", timeout=30) as resp:
        assert json.loads(resp.read()).get("subscriptions", []) == []
    assert kafka_objects(kafka, uid(sub)) == []
