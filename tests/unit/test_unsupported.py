"""The refusal of settings this gateway cannot act on (gateway/translate/unsupported.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.protobuf.message import Message

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.core import subscriptions
from gateway.errors import Code, GatewayError
from gateway.translate import unsupported

TOPIC = "projects/p/topics/t"


def refusal(check: Callable[..., None], *args: object) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        check(*args)
    return info.value


def refused_topics() -> list[tuple[str, pb.Topic]]:
    transform = pb.MessageTransform(
        javascript_udf=pb.JavaScriptUDF(function_name="f", code="function f(m){}")
    )
    ingestion = pb.IngestionDataSourceSettings(
        aws_kinesis=pb.IngestionDataSourceSettings.AwsKinesis(stream_arn="arn")
    )
    logs_only = pb.IngestionDataSourceSettings(platform_logs_settings=pb.PlatformLogsSettings(severity=2))
    return [
        ("ingestion_data_source_settings", pb.Topic(name=TOPIC, ingestion_data_source_settings=ingestion)),
        ("ingestion_data_source_settings", pb.Topic(name=TOPIC, ingestion_data_source_settings=logs_only)),
        ("message_transforms", pb.Topic(name=TOPIC, message_transforms=[transform])),
        ("message_transforms", pb.Topic(name=TOPIC, message_transforms=[pb.MessageTransform(disabled=True)])),
    ]


def refused_subscriptions() -> list[tuple[str, pb.Subscription]]:
    return [
        ("bigquery_config", pb.Subscription(bigquery_config=pb.BigQueryConfig(table="p.d.t"))),
        ("bigquery_config", pb.Subscription(bigquery_config=pb.BigQueryConfig())),  # empty, yet set
        ("cloud_storage_config", pb.Subscription(cloud_storage_config=pb.CloudStorageConfig(bucket="b"))),
        ("bigtable_config", pb.Subscription(bigtable_config=pb.BigtableConfig(table="t"))),
        ("message_transforms", pb.Subscription(message_transforms=[pb.MessageTransform(enabled=True)])),
        (
            "attributes",
            pb.Subscription(push_config=pb.PushConfig(push_endpoint="http://h/", attributes={"x": "y"})),
        ),
        (
            "v1beta1",
            pb.Subscription(
                push_config=pb.PushConfig(push_endpoint="http://h/", attributes={"x-goog-version": "v1beta1"})
            ),
        ),
    ]


@pytest.mark.parametrize(("field", "topic"), refused_topics())
def test_a_topic_setting_a_refused_field_is_unimplemented_naming_it(field: str, topic: pb.Topic) -> None:
    err = refusal(unsupported.check_topic, topic)
    assert err.code is Code.UNIMPLEMENTED
    assert f"Topic field {field} {unsupported.MARK}" in err.message
    assert "docs/fields.md" in err.message


@pytest.mark.parametrize(("field", "sub"), refused_subscriptions())
def test_a_subscription_setting_a_refused_field_is_unimplemented_naming_it(
    field: str, sub: pb.Subscription
) -> None:
    err = refusal(unsupported.check_subscription, sub)
    assert err.code is Code.UNIMPLEMENTED
    assert field in err.message
    assert unsupported.MARK in err.message


def test_what_the_gateway_does_or_only_stores_passes() -> None:
    topic = pb.Topic(
        name=TOPIC,
        labels={"a": "b"},
        kms_key_name="projects/p/locations/l/keyRings/r/cryptoKeys/k",
        message_storage_policy=pb.MessageStoragePolicy(allowed_persistence_regions=["europe-west1"]),
        schema_settings=pb.SchemaSettings(schema="projects/p/schemas/s"),
        satisfies_pzs=True,
        tags={"123/env": "prod"},
    )
    topic.message_retention_duration.seconds = 3600
    unsupported.check_topic(topic)
    push = pb.PushConfig(
        push_endpoint="https://h/push",
        attributes={"x-goog-version": "v1"},
        oidc_token=pb.PushConfig.OidcToken(service_account_email="a@b", audience="x"),
        no_wrapper=pb.PushConfig.NoWrapper(write_metadata=True),
    )
    sub = pb.Subscription(
        name="projects/p/subscriptions/s",
        topic=TOPIC,
        push_config=push,
        retain_acked_messages=True,
        enable_message_ordering=True,
        enable_exactly_once_delivery=True,
        filter="attributes:a",
        detached=True,
        tags={"123/env": "prod"},
    )
    unsupported.check_subscription(sub)
    unsupported.check_push_config(pb.PushConfig(attributes={"x-goog-version": "v1beta2"}))
    unsupported.check_push_config(pb.PushConfig())


def test_an_update_checks_only_the_fields_its_mask_names() -> None:
    sub = pb.Subscription(
        bigquery_config=pb.BigQueryConfig(table="p.d.t"), push_config=pb.PushConfig(attributes={"k": "v"})
    )
    unsupported.check_subscription(sub, ["labels", "ack_deadline_seconds"])
    assert (
        "bigquery_config"
        in refusal(unsupported.check_subscription, sub, ["labels", "bigquery_config"]).message
    )
    assert "attributes" in refusal(unsupported.check_subscription, sub, ["push_config"]).message
    topic = refused_topics()[0][1]
    unsupported.check_topic(topic, ["labels"])
    assert (
        refusal(unsupported.check_topic, topic, ["ingestion_data_source_settings"]).code is Code.UNIMPLEMENTED
    )


def test_clearing_a_refused_field_asks_for_nothing() -> None:
    """An update whose mask names a refused field left unset turns it off: accepted."""
    unsupported.check_subscription(
        pb.Subscription(), ["bigquery_config", "cloud_storage_config", "message_transforms"]
    )
    unsupported.check_topic(pb.Topic(), ["message_transforms", "ingestion_data_source_settings"])


def test_a_long_attribute_key_is_quoted_short() -> None:
    err = refusal(unsupported.check_push_config, pb.PushConfig(attributes={"k" * 10_000: "v"}))
    assert len(err.message) < 600


def test_scrub_clears_what_pubsub_sets_or_never_returns() -> None:
    topic = pb.Topic(name=TOPIC, satisfies_pzs=True, tags={"1/e": "p"}, kms_key_name="k")
    unsupported.scrub_topic(topic)
    assert topic == pb.Topic(name=TOPIC, kms_key_name="k")
    sub = pb.Subscription(
        name="projects/p/subscriptions/s",
        tags={"1/e": "p"},
        analytics_hub_subscription_info=pb.Subscription.AnalyticsHubSubscriptionInfo(listing="l"),
        retain_acked_messages=True,
    )
    sub.topic_message_retention_duration.seconds = 99
    unsupported.scrub_subscription(sub)
    assert sub == pb.Subscription(name="projects/p/subscriptions/s", retain_acked_messages=True)


@pytest.mark.parametrize("desc", [pb.Topic.DESCRIPTOR, pb.Subscription.DESCRIPTOR])
def test_is_set_answers_for_every_kind_of_field(desc: object) -> None:
    message: Message = pb.Topic() if desc is pb.Topic.DESCRIPTOR else pb.Subscription()
    for field in message.DESCRIPTOR.fields:
        assert not unsupported.is_set(message, field.name), field.name


def test_how_to_push_is_refused_on_a_pull_subscription() -> None:
    """Pub/Sub answers INVALID_ARGUMENT for a token on a pull subscription; so does the gateway,
    for it and for no_wrapper, which nothing would use either."""
    token = pb.PushConfig.OidcToken(service_account_email="a@b")
    for push, field in (
        (pb.PushConfig(oidc_token=token), "oidc_token"),
        (pb.PushConfig(no_wrapper=pb.PushConfig.NoWrapper()), "no_wrapper"),
    ):
        err = refusal(subscriptions.check_push_only, push)
        assert err.code is Code.INVALID_ARGUMENT and f"push_config.{field}" in err.message
        push.push_endpoint = "https://h/push"
        subscriptions.check_push_only(push)
    subscriptions.check_push_only(pb.PushConfig(pubsub_wrapper=pb.PushConfig.PubsubWrapper()))
