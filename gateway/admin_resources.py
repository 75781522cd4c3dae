"""The admin commands on resources (gateway/admin_cli.py): topics, subscriptions, snapshots and
schemas, their IAM policies, as gcloud's commands of those names do them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gateway.admin_context import IAM_COLLECTIONS, Context, UsageError, pairs, read, seconds
from gateway.admin_messages import publish_one, pull, seek

_SCHEMA_TYPES = {"avro": "AVRO", "protocol-buffer": "PROTOCOL_BUFFER"}


def topics(ctx: Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
    from gateway._pb.google.pubsub.v1 import schema_pb2

    a = ctx.args
    if a.action == "list":
        request = pb.ListTopicsRequest(project=f"projects/{ctx.project()}")
        ctx.out.resources(list(ctx.pages(ctx.publisher.ListTopics, request, "topics")))
    elif a.action == "describe":
        ctx.out.resource(
            ctx.call(ctx.publisher.GetTopic, pb.GetTopicRequest(topic=ctx.name(a.name, "topics")))
        )
    elif a.action == "delete":
        name = ctx.name(a.name, "topics")
        ctx.call(ctx.publisher.DeleteTopic, pb.DeleteTopicRequest(topic=name))
        ctx.out.deleted(name)
    elif a.action == "update":
        current = ctx.call(ctx.publisher.GetTopic, pb.GetTopicRequest(topic=ctx.name(a.name, "topics")))
        topic = pb.Topic(name=current.name)
        paths = _labels_updated(a, current.labels, topic.labels)
        if a.message_retention_duration:
            topic.message_retention_duration.seconds = seconds(
                a.message_retention_duration, "--message-retention-duration"
            )
        if a.message_retention_duration or a.clear_message_retention_duration:
            paths.append("message_retention_duration")
        if not paths:
            raise UsageError("nothing to update: give at least one setting")
        change = pb.UpdateTopicRequest(topic=topic, update_mask={"paths": paths})
        ctx.out.resource(ctx.call(ctx.publisher.UpdateTopic, change))
    elif a.action == "list-subscriptions":
        of_topic = pb.ListTopicSubscriptionsRequest(topic=ctx.name(a.name, "topics"))
        found = list(ctx.pages(ctx.publisher.ListTopicSubscriptions, of_topic, "subscriptions"))
        ctx.out.done("\n".join(found), found)
    elif a.action == "detach-subscription":
        name = ctx.name(a.subscription, "subscriptions")
        ctx.call(ctx.publisher.DetachSubscription, pb.DetachSubscriptionRequest(subscription=name))
        ctx.out.done(f"detached {name}", {"subscription": name, "detached": True})
    elif a.action == "publish":
        return publish_one(ctx)
    else:
        labels = pairs(a.label, "--labels", commas=True)
        if a.partitions is not None:
            labels["kafka-partitions"] = str(a.partitions)
        if a.kafka_topic:
            labels["kafka-topic"] = a.kafka_topic
        topic = pb.Topic(name=ctx.name(a.name, "topics"), labels=labels)
        if a.message_retention_duration:
            topic.message_retention_duration.seconds = seconds(
                a.message_retention_duration, "--message-retention-duration"
            )
        if a.schema:
            settings = topic.schema_settings
            settings.schema = ctx.name(a.schema, "schemas")
            binary = a.message_encoding == "binary"
            settings.encoding = schema_pb2.Encoding.BINARY if binary else schema_pb2.Encoding.JSON
            settings.first_revision_id = a.first_revision_id or ""
            settings.last_revision_id = a.last_revision_id or ""
        elif a.message_encoding or a.first_revision_id or a.last_revision_id:
            raise UsageError("--message-encoding and the revision ids need --schema")
        if a.message_storage_policy_allowed_regions:
            topic.message_storage_policy.allowed_persistence_regions.extend(
                a.message_storage_policy_allowed_regions
            )
        if a.topic_encryption_key:
            topic.kms_key_name = a.topic_encryption_key
        ctx.out.resource(ctx.call(ctx.publisher.CreateTopic, topic), created=True)
    return 0


def subscriptions(ctx: Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    if a.action == "list":
        project = ctx.project() if not a.topic else ctx.name(a.topic, "topics").split("/")[1]
        request = pb.ListSubscriptionsRequest(project=f"projects/{project}")
        found = list(ctx.pages(ctx.subscriber.ListSubscriptions, request, "subscriptions"))
        if a.topic:  # ListTopicSubscriptions gives names only: the same list, filtered
            found = [s for s in found if s.topic == ctx.name(a.topic, "topics")]
        ctx.out.resources(found)
    elif a.action == "describe":
        name = ctx.name(a.name, "subscriptions")
        ctx.out.resource(
            ctx.call(ctx.subscriber.GetSubscription, pb.GetSubscriptionRequest(subscription=name))
        )
    elif a.action == "delete":
        name = ctx.name(a.name, "subscriptions")
        ctx.call(ctx.subscriber.DeleteSubscription, pb.DeleteSubscriptionRequest(subscription=name))
        ctx.out.deleted(name)
    elif a.action == "update":
        _update_subscription(ctx)
    elif a.action == "pull":
        return pull(ctx)
    elif a.action == "seek":
        return seek(ctx)
    elif a.action in ("ack", "modify-message-ack-deadline"):
        name = ctx.name(a.subscription, "subscriptions")
        if a.action == "ack":
            ctx.call(ctx.subscriber.Acknowledge, pb.AcknowledgeRequest(subscription=name, ack_ids=a.ack_ids))
            ctx.out.done(
                f"acknowledged {len(a.ack_ids)} messages", {"subscription": name, "ackIds": a.ack_ids}
            )
        else:
            modack = pb.ModifyAckDeadlineRequest(
                subscription=name, ack_ids=a.ack_ids, ack_deadline_seconds=a.ack_deadline
            )
            ctx.call(ctx.subscriber.ModifyAckDeadline, modack)
            doc = {"subscription": name, "ackIds": a.ack_ids, "ackDeadlineSeconds": a.ack_deadline}
            ctx.out.done(f"set the ack deadline of {len(a.ack_ids)} messages to {a.ack_deadline} s", doc)
    elif a.action == "modify-push-config":
        name = ctx.name(a.subscription, "subscriptions")
        config = _push_config(a, a.push_endpoint)
        ctx.call(
            ctx.subscriber.ModifyPushConfig, pb.ModifyPushConfigRequest(subscription=name, push_config=config)
        )
        text = f"{name} pushes to {a.push_endpoint}" if a.push_endpoint else f"{name} is a pull subscription"
        ctx.out.done(text, {"subscription": name, "pushEndpoint": a.push_endpoint})
    else:
        sub = pb.Subscription(
            name=ctx.name(a.name, "subscriptions"),
            topic=ctx.name(a.topic, "topics", a.topic_project),
            labels=pairs(a.label, "--labels", commas=True),
            enable_message_ordering=a.ordering,
            enable_exactly_once_delivery=a.exactly_once,
            filter=a.filter or "",
            retain_acked_messages=a.retain_acked_messages,
        )
        if a.ack_deadline is not None:
            sub.ack_deadline_seconds = a.ack_deadline
        config = _push_config(a, a.push_endpoint or "")
        if a.push_endpoint:
            sub.push_config.CopyFrom(config)
        if a.bigquery_table:  # the gateway refuses these with its reason (docs/fields.md)
            sub.bigquery_config.table = a.bigquery_table
        if a.cloud_storage_bucket:
            sub.cloud_storage_config.bucket = a.cloud_storage_bucket
        if a.message_retention_duration:
            sub.message_retention_duration.seconds = seconds(
                a.message_retention_duration, "--message-retention-duration"
            )
        if a.expiration_period:
            if a.expiration_period.strip().lower() == "never":
                sub.expiration_policy.SetInParent()  # no ttl: never expires
            else:
                sub.expiration_policy.ttl.seconds = seconds(a.expiration_period, "--expiration-period")
        if a.min_retry_delay or a.max_retry_delay:
            if a.min_retry_delay:
                sub.retry_policy.minimum_backoff.seconds = seconds(a.min_retry_delay, "--min-retry-delay")
            if a.max_retry_delay:
                sub.retry_policy.maximum_backoff.seconds = seconds(a.max_retry_delay, "--max-retry-delay")
        if a.dead_letter_topic:
            dead = ctx.name(a.dead_letter_topic, "topics", a.dead_letter_topic_project)
            sub.dead_letter_policy.dead_letter_topic = dead
            if a.max_delivery_attempts is not None:
                sub.dead_letter_policy.max_delivery_attempts = a.max_delivery_attempts
        elif a.max_delivery_attempts is not None:
            raise UsageError("--max-delivery-attempts needs --dead-letter-topic")
        ctx.out.resource(ctx.call(ctx.subscriber.CreateSubscription, sub), created=True)
    return 0


def _labels_updated(a: argparse.Namespace, current: Any, out: Any) -> list[str]:
    """The labels --update-labels, --remove-labels and --clear-labels make of `current`, into
    `out`; ["labels"] when they change anything asked, else []."""
    if not (a.update_labels or a.remove_labels or a.clear_labels):
        return []
    labels = {} if a.clear_labels else dict(current)
    labels.update(pairs(a.update_labels, "--update-labels", commas=True))
    for key in (k for v in a.remove_labels for k in v.split(",") if k):
        labels.pop(key, None)
    out.update(labels)
    return ["labels"]


def _update_subscription(ctx: Context) -> None:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    name = ctx.name(a.name, "subscriptions")
    current = ctx.call(ctx.subscriber.GetSubscription, pb.GetSubscriptionRequest(subscription=name))
    sub = pb.Subscription(name=name, topic=current.topic)
    paths = _labels_updated(a, current.labels, sub.labels)
    if a.ack_deadline is not None:
        sub.ack_deadline_seconds = a.ack_deadline
        paths.append("ack_deadline_seconds")
    if a.push_endpoint is not None:
        sub.push_config.CopyFrom(_push_config(a, a.push_endpoint))
        paths.append("push_config")
    elif a.push_no_wrapper or a.push_auth_service_account or a.push_auth_token_audience:
        raise UsageError("--push-no-wrapper and --push-auth-* need a --push-endpoint")
    if a.message_retention_duration:
        sub.message_retention_duration.seconds = seconds(
            a.message_retention_duration, "--message-retention-duration"
        )
        paths.append("message_retention_duration")
    if a.retain_acked_messages is not None:
        sub.retain_acked_messages = a.retain_acked_messages
        paths.append("retain_acked_messages")
    if a.enable_exactly_once_delivery is not None:
        sub.enable_exactly_once_delivery = a.enable_exactly_once_delivery
        paths.append("enable_exactly_once_delivery")
    if a.expiration_period:
        if a.expiration_period.strip().lower() == "never":
            sub.expiration_policy.SetInParent()
        else:
            sub.expiration_policy.ttl.seconds = seconds(a.expiration_period, "--expiration-period")
        paths.append("expiration_policy")
    if a.dead_letter_topic or a.max_delivery_attempts is not None:
        if a.clear_dead_letter_policy:
            raise UsageError("--max-delivery-attempts and --clear-dead-letter-policy contradict each other")
        sub.dead_letter_policy.CopyFrom(current.dead_letter_policy)
        if a.dead_letter_topic:
            sub.dead_letter_policy.dead_letter_topic = ctx.name(a.dead_letter_topic, "topics")
        if a.max_delivery_attempts is not None:
            sub.dead_letter_policy.max_delivery_attempts = a.max_delivery_attempts
        paths.append("dead_letter_policy")
    elif a.clear_dead_letter_policy:
        paths.append("dead_letter_policy")
    if a.min_retry_delay or a.max_retry_delay:
        if a.clear_retry_policy:
            raise UsageError("--max-retry-delay and --clear-retry-policy contradict each other")
        sub.retry_policy.CopyFrom(current.retry_policy)
        if a.min_retry_delay:
            sub.retry_policy.minimum_backoff.seconds = seconds(a.min_retry_delay, "--min-retry-delay")
        if a.max_retry_delay:
            sub.retry_policy.maximum_backoff.seconds = seconds(a.max_retry_delay, "--max-retry-delay")
        paths.append("retry_policy")
    elif a.clear_retry_policy:
        paths.append("retry_policy")
    if not paths:
        raise UsageError("nothing to update: give at least one setting")
    request = pb.UpdateSubscriptionRequest(subscription=sub, update_mask={"paths": paths})
    ctx.out.resource(ctx.call(ctx.subscriber.UpdateSubscription, request))


def _push_config(a: argparse.Namespace, endpoint: str) -> Any:
    """The PushConfig of --push-endpoint and the push flags given with it."""
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    config = pb.PushConfig(push_endpoint=endpoint)
    extra = a.push_no_wrapper or a.push_auth_service_account or a.push_auth_token_audience
    if not endpoint:
        if extra:
            raise UsageError("--push-no-wrapper and --push-auth-* need a --push-endpoint")
        return config
    if a.push_no_wrapper:
        config.no_wrapper.SetInParent()
    if a.push_auth_token_audience and not a.push_auth_service_account:
        raise UsageError("--push-auth-token-audience needs --push-auth-service-account")
    if a.push_auth_service_account:
        config.oidc_token.service_account_email = a.push_auth_service_account
        config.oidc_token.audience = a.push_auth_token_audience or ""
    return config


def snapshots(ctx: Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    if a.action == "list":
        request = pb.ListSnapshotsRequest(project=f"projects/{ctx.project()}")
        ctx.out.resources(list(ctx.pages(ctx.subscriber.ListSnapshots, request, "snapshots")))
    elif a.action == "describe":
        name = ctx.name(a.name, "snapshots")
        ctx.out.resource(ctx.call(ctx.subscriber.GetSnapshot, pb.GetSnapshotRequest(snapshot=name)))
    elif a.action == "delete":
        name = ctx.name(a.name, "snapshots")
        ctx.call(ctx.subscriber.DeleteSnapshot, pb.DeleteSnapshotRequest(snapshot=name))
        ctx.out.deleted(name)
    else:
        create = pb.CreateSnapshotRequest(
            name=ctx.name(a.name, "snapshots"),
            subscription=ctx.name(a.subscription, "subscriptions"),
            labels=pairs(a.label, "--labels", commas=True),
        )
        ctx.out.resource(ctx.call(ctx.subscriber.CreateSnapshot, create), created=True)
    return 0


def _definition(a: argparse.Namespace) -> str:
    return read(a.definition_file) if a.definition_file else str(a.definition)


def schemas(ctx: Context) -> int:
    from gateway._pb.google.pubsub.v1 import schema_pb2 as spb

    a = ctx.args
    if a.action == "list":
        listing = spb.ListSchemasRequest(parent=f"projects/{ctx.project()}")
        ctx.out.resources(list(ctx.pages(ctx.schemas.ListSchemas, listing, "schemas")))
    elif a.action == "describe":
        ctx.out.resource(
            ctx.call(ctx.schemas.GetSchema, spb.GetSchemaRequest(name=ctx.name(a.name, "schemas")))
        )
    elif a.action == "delete":
        name = ctx.name(a.name, "schemas")
        ctx.call(ctx.schemas.DeleteSchema, spb.DeleteSchemaRequest(name=name))
        ctx.out.deleted(name)
    elif a.action in ("create", "commit"):
        name = ctx.name(a.name, "schemas")
        schema = spb.Schema(name=name, type=_SCHEMA_TYPES[a.type], definition=_definition(a))
        if a.action == "create":
            parent = "/".join(name.split("/")[:2])
            create = spb.CreateSchemaRequest(parent=parent, schema_id=name.rsplit("/", 1)[1], schema=schema)
            ctx.out.resource(ctx.call(ctx.schemas.CreateSchema, create), created=True)
        else:
            ctx.out.resource(
                ctx.call(ctx.schemas.CommitSchema, spb.CommitSchemaRequest(name=name, schema=schema))
            )
    elif a.action == "list-revisions":
        revisions = spb.ListSchemaRevisionsRequest(name=ctx.name(a.name, "schemas"))
        found = list(ctx.pages(ctx.schemas.ListSchemaRevisions, revisions, "schemas"))
        if ctx.out.json:
            ctx.out.resources(found)
        else:
            for s in found:
                print(f"{s.revision_id}  {s.revision_create_time.ToJsonString()}")
    elif a.action == "rollback":
        rollback = spb.RollbackSchemaRequest(name=ctx.name(a.name, "schemas"), revision_id=a.revision_id)
        ctx.out.resource(ctx.call(ctx.schemas.RollbackSchema, rollback))
    elif a.action == "delete-revision":
        name, sep, revision = a.name.rpartition("@")
        if not sep or not name or not revision:
            raise UsageError(f"delete-revision takes NAME@REVISION, not {a.name!r}")
        gone = spb.DeleteSchemaRevisionRequest(name=f"{ctx.name(name, 'schemas')}@{revision}")
        ctx.out.resource(ctx.call(ctx.schemas.DeleteSchemaRevision, gone))
    elif a.action == "validate-schema":
        schema = spb.Schema(type=_SCHEMA_TYPES[a.type], definition=_definition(a))
        check = spb.ValidateSchemaRequest(parent=f"projects/{ctx.project()}", schema=schema)
        ctx.call(ctx.schemas.ValidateSchema, check)
        ctx.out.done("the schema is valid", {"valid": True})
    else:
        return _validate_message(ctx)
    return 0


def _validate_message(ctx: Context) -> int:
    from gateway._pb.google.pubsub.v1 import schema_pb2 as spb

    a = ctx.args
    if a.message is not None:
        message = a.message.encode()
    elif a.message_file == "-":
        message = sys.stdin.buffer.read()
    else:
        try:
            with open(a.message_file, "rb") as f:
                message = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {a.message_file}: {exc.strerror}") from None
    encoding = spb.Encoding.JSON if a.message_encoding == "json" else spb.Encoding.BINARY
    request = spb.ValidateMessageRequest(
        parent=f"projects/{ctx.project()}", message=message, encoding=encoding
    )
    if a.schema_name:
        request.name = ctx.name(a.schema_name, "schemas")
    elif a.type is None:
        raise UsageError("--definition and --definition-file need --type")
    else:
        request.schema.CopyFrom(spb.Schema(type=_SCHEMA_TYPES[a.type], definition=_definition(a)))
    ctx.call(ctx.schemas.ValidateMessage, request)
    ctx.out.done("the message is valid", {"valid": True})
    return 0


def iam(ctx: Context) -> int:
    """get-iam-policy, set-iam-policy, add-iam-policy-binding, remove-iam-policy-binding of
    any resource that holds a policy."""
    from google.iam.v1 import iam_policy_pb2, policy_pb2
    from google.protobuf import json_format

    a = ctx.args
    resource = ctx.name(a.name, IAM_COLLECTIONS[a.command])
    get = iam_policy_pb2.GetIamPolicyRequest(resource=resource)
    if a.action == "get-iam-policy":
        ctx.out.resource(ctx.call(ctx.iam.GetIamPolicy, get))
        return 0
    if a.action == "set-iam-policy":
        try:
            policy = json_format.Parse(read(a.policy_file), policy_pb2.Policy())
        except json_format.ParseError as exc:
            raise UsageError(f"{a.policy_file} is no IAM policy: {exc}") from None
    else:
        policy = ctx.call(ctx.iam.GetIamPolicy, get)  # its etag makes the set below fail on a race
        binding = next((b for b in policy.bindings if b.role == a.role and not b.HasField("condition")), None)
        if a.action == "add-iam-policy-binding":
            if binding is None:
                binding = policy.bindings.add(role=a.role)
            if a.member not in binding.members:
                binding.members.append(a.member)
        else:
            if binding is None or a.member not in binding.members:
                raise UsageError(f"{resource} has no binding of {a.member} to {a.role}")
            binding.members.remove(a.member)
            if not binding.members:
                policy.bindings.remove(binding)
    request = iam_policy_pb2.SetIamPolicyRequest(resource=resource, policy=policy)
    ctx.out.resource(ctx.call(ctx.iam.SetIamPolicy, request))
    return 0
