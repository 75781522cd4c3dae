"""IAM tables and per-RPC permission checks (gateway.security.iam)."""

from __future__ import annotations

import pytest
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.type import expr_pb2

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as ps
from gateway._pb.google.pubsub.v1 import schema_pb2 as sc
from gateway.errors import Code, InvalidArgument, PermissionDenied
from gateway.security import iam

P = "projects/p"
TOPIC, SUB, SNAP, SCHEMA = (
    f"{P}/topics/top",
    f"{P}/subscriptions/sub",
    f"{P}/snapshots/snap",
    f"{P}/schemas/sch",
)
OTHER_TOPIC = "projects/q/topics/top2"  # a topic in another project


def policy(*bindings: tuple[str, list[str]], etag: bytes = b"", version: int = 0) -> policy_pb2.Policy:
    return policy_pb2.Policy(
        version=version, etag=etag, bindings=[policy_pb2.Binding(role=r, members=m) for r, m in bindings]
    )


def invalid(call: object, *args: object, match: str | None = None) -> InvalidArgument:
    with pytest.raises(InvalidArgument, match=match) as info:
        call(*args)  # type: ignore[operator]
    assert info.value.code is Code.INVALID_ARGUMENT
    return info.value


# --- Roles ----------------------------------------------------------------------------------

# (role, permission, granted): what each role may and may not do, per Google's role lists.
ROLE_CASES = [
    ("roles/pubsub.publisher", "pubsub.topics.publish", True),
    ("roles/pubsub.publisher", "pubsub.topics.get", False),
    ("roles/pubsub.publisher", "pubsub.subscriptions.consume", False),
    ("roles/pubsub.publisher", "pubsub.topics.attachSubscription", False),
    ("roles/pubsub.subscriber", "pubsub.subscriptions.consume", True),
    ("roles/pubsub.subscriber", "pubsub.topics.attachSubscription", True),
    ("roles/pubsub.subscriber", "pubsub.snapshots.seek", True),
    ("roles/pubsub.subscriber", "pubsub.topics.publish", False),
    ("roles/pubsub.subscriber", "pubsub.subscriptions.delete", False),
    ("roles/pubsub.subscriber", "pubsub.subscriptions.get", False),
    ("roles/pubsub.subscriber", "pubsub.subscriptions.create", False),
    ("roles/pubsub.viewer", "pubsub.topics.get", True),
    ("roles/pubsub.viewer", "pubsub.topics.list", True),
    ("roles/pubsub.viewer", "pubsub.subscriptions.get", True),
    ("roles/pubsub.viewer", "pubsub.snapshots.list", True),
    ("roles/pubsub.viewer", "pubsub.schemas.listRevisions", True),
    ("roles/pubsub.viewer", "pubsub.schemas.validate", True),
    ("roles/pubsub.viewer", "pubsub.topics.publish", False),
    ("roles/pubsub.viewer", "pubsub.subscriptions.consume", False),
    ("roles/pubsub.viewer", "pubsub.topics.getIamPolicy", False),
    ("roles/pubsub.viewer", "pubsub.schemas.attach", False),
    ("roles/pubsub.editor", "pubsub.topics.create", True),
    ("roles/pubsub.editor", "pubsub.topics.publish", True),
    ("roles/pubsub.editor", "pubsub.subscriptions.consume", True),
    ("roles/pubsub.editor", "pubsub.topics.detachSubscription", True),
    ("roles/pubsub.editor", "pubsub.schemas.commit", True),
    ("roles/pubsub.editor", "pubsub.topics.getIamPolicy", False),
    ("roles/pubsub.editor", "pubsub.topics.setIamPolicy", False),
    ("roles/pubsub.editor", "pubsub.subscriptions.setIamPolicy", False),
    ("roles/pubsub.admin", "pubsub.topics.setIamPolicy", True),
    ("roles/pubsub.admin", "pubsub.schemas.getIamPolicy", True),
    ("roles/pubsub.admin", "pubsub.snapshots.seek", True),
    ("roles/owner", "pubsub.subscriptions.setIamPolicy", True),
    ("roles/editor", "pubsub.topics.publish", True),
    ("roles/editor", "pubsub.schemas.getIamPolicy", True),
    ("roles/editor", "pubsub.topics.getIamPolicy", False),
    ("roles/editor", "pubsub.topics.setIamPolicy", False),
    ("roles/viewer", "pubsub.topics.get", True),
    ("roles/viewer", "pubsub.snapshots.seek", True),
    ("roles/viewer", "pubsub.schemas.attach", True),
    ("roles/viewer", "pubsub.subscriptions.consume", False),
    ("roles/viewer", "pubsub.topics.publish", False),
    ("roles/viewer", "pubsub.topics.getIamPolicy", False),
]


@pytest.mark.parametrize(("role", "permission", "expected"), ROLE_CASES)
def test_role_permissions(role: str, permission: str, expected: bool) -> None:
    assert (permission in iam.ROLES[role]) is expected
    assert permission in iam.PERMISSIONS
    bound = [policy((role, ["user:a@example.com"]))]
    assert iam.granted("user:a@example.com", permission, bound) is expected


def test_role_tables_are_consistent() -> None:
    assert iam.ROLES["roles/pubsub.admin"] == iam.ROLES["roles/owner"] == iam.PERMISSIONS
    assert iam.ROLES["roles/pubsub.publisher"] == {"pubsub.topics.publish"}
    assert iam.ROLES["roles/pubsub.subscriber"] == {
        "pubsub.topics.attachSubscription",
        "pubsub.subscriptions.consume",
        "pubsub.snapshots.seek",
    }
    editor = iam.ROLES["roles/pubsub.editor"]
    assert editor == {p for p in iam.PERMISSIONS if not p.endswith(("getIamPolicy", "setIamPolicy"))}
    assert iam.ROLES["roles/pubsub.viewer"] < editor < iam.ROLES["roles/editor"] < iam.ROLES["roles/owner"]
    assert iam.ROLES["roles/pubsub.viewer"] < iam.ROLES["roles/viewer"] < iam.ROLES["roles/editor"]
    assert set(iam.ROLES) == set(iam.GRANTABLE)
    assert len(iam.PERMISSIONS) == 10 + 8 + 8 + 11
    for role, perms in iam.ROLES.items():
        assert perms <= iam.PERMISSIONS, role
    # Every permission an RPC checks is a known one.
    for checks in iam.CHECKS.values():
        for check in checks:
            for kind in iam.KINDS:
                assert check.permission.format(kind=kind) in iam.PERMISSIONS, check


# --- What each RPC needs -----------------------------------------------------------------------

PUB, SUBR, SCH, IAMP = (
    "/google.pubsub.v1.Publisher/",
    "/google.pubsub.v1.Subscriber/",
    "/google.pubsub.v1.SchemaService/",
    "/google.iam.v1.IAMPolicy/",
)
topic_with_schema = ps.Topic(name=TOPIC, schema_settings=ps.SchemaSettings(schema=SCHEMA))

REQUIRED = [
    (PUB + "CreateTopic", ps.Topic(name=TOPIC), [("pubsub.topics.create", P)]),
    (
        PUB + "CreateTopic",
        topic_with_schema,
        [("pubsub.topics.create", P), ("pubsub.schemas.attach", SCHEMA)],
    ),
    (
        PUB + "UpdateTopic",
        ps.UpdateTopicRequest(topic=topic_with_schema, update_mask={"paths": ["labels"]}),
        [("pubsub.topics.update", TOPIC)],
    ),
    (
        PUB + "UpdateTopic",
        ps.UpdateTopicRequest(topic=topic_with_schema, update_mask={"paths": ["schema_settings.schema"]}),
        [("pubsub.topics.update", TOPIC), ("pubsub.schemas.attach", SCHEMA)],
    ),
    (PUB + "Publish", ps.PublishRequest(topic=TOPIC), [("pubsub.topics.publish", TOPIC)]),
    (PUB + "GetTopic", ps.GetTopicRequest(topic=TOPIC), [("pubsub.topics.get", TOPIC)]),
    (PUB + "ListTopics", ps.ListTopicsRequest(project=P), [("pubsub.topics.list", P)]),
    (
        PUB + "ListTopicSubscriptions",
        ps.ListTopicSubscriptionsRequest(topic=TOPIC),
        [("pubsub.topics.get", TOPIC)],
    ),
    (PUB + "ListTopicSnapshots", ps.ListTopicSnapshotsRequest(topic=TOPIC), [("pubsub.topics.get", TOPIC)]),
    (PUB + "DeleteTopic", ps.DeleteTopicRequest(topic=TOPIC), [("pubsub.topics.delete", TOPIC)]),
    (
        PUB + "DetachSubscription",
        ps.DetachSubscriptionRequest(subscription=SUB),
        [("pubsub.topics.detachSubscription", OTHER_TOPIC)],
    ),
    (
        SUBR + "CreateSubscription",
        ps.Subscription(name=SUB, topic=OTHER_TOPIC),
        [("pubsub.subscriptions.create", P), ("pubsub.topics.attachSubscription", OTHER_TOPIC)],
    ),
    (
        SUBR + "GetSubscription",
        ps.GetSubscriptionRequest(subscription=SUB),
        [("pubsub.subscriptions.get", SUB)],
    ),
    (
        SUBR + "UpdateSubscription",
        ps.UpdateSubscriptionRequest(subscription=ps.Subscription(name=SUB, topic=TOPIC)),
        [("pubsub.subscriptions.update", SUB)],
    ),
    (SUBR + "ListSubscriptions", ps.ListSubscriptionsRequest(project=P), [("pubsub.subscriptions.list", P)]),
    (
        SUBR + "DeleteSubscription",
        ps.DeleteSubscriptionRequest(subscription=SUB),
        [("pubsub.subscriptions.delete", SUB)],
    ),
    (
        SUBR + "ModifyAckDeadline",
        ps.ModifyAckDeadlineRequest(subscription=SUB),
        [("pubsub.subscriptions.consume", SUB)],
    ),
    (SUBR + "Acknowledge", ps.AcknowledgeRequest(subscription=SUB), [("pubsub.subscriptions.consume", SUB)]),
    (SUBR + "Pull", ps.PullRequest(subscription=SUB), [("pubsub.subscriptions.consume", SUB)]),
    (
        SUBR + "StreamingPull",
        ps.StreamingPullRequest(subscription=SUB),
        [("pubsub.subscriptions.consume", SUB)],
    ),
    (
        SUBR + "ModifyPushConfig",
        ps.ModifyPushConfigRequest(subscription=SUB),
        [("pubsub.subscriptions.update", SUB)],
    ),
    (SUBR + "GetSnapshot", ps.GetSnapshotRequest(snapshot=SNAP), [("pubsub.snapshots.get", SNAP)]),
    (SUBR + "ListSnapshots", ps.ListSnapshotsRequest(project=P), [("pubsub.snapshots.list", P)]),
    (
        SUBR + "CreateSnapshot",
        ps.CreateSnapshotRequest(name=SNAP, subscription="projects/q/subscriptions/sub2"),
        [("pubsub.snapshots.create", P), ("pubsub.subscriptions.consume", "projects/q/subscriptions/sub2")],
    ),
    (
        SUBR + "UpdateSnapshot",
        ps.UpdateSnapshotRequest(snapshot=ps.Snapshot(name=SNAP)),
        [("pubsub.snapshots.update", SNAP)],
    ),
    (SUBR + "DeleteSnapshot", ps.DeleteSnapshotRequest(snapshot=SNAP), [("pubsub.snapshots.delete", SNAP)]),
    (SUBR + "Seek", ps.SeekRequest(subscription=SUB), [("pubsub.subscriptions.consume", SUB)]),
    (
        SUBR + "Seek",
        ps.SeekRequest(subscription=SUB, snapshot=SNAP),
        [("pubsub.subscriptions.consume", SUB), ("pubsub.snapshots.seek", SNAP)],
    ),
    (SCH + "CreateSchema", sc.CreateSchemaRequest(parent=P), [("pubsub.schemas.create", P)]),
    (SCH + "GetSchema", sc.GetSchemaRequest(name=SCHEMA), [("pubsub.schemas.get", SCHEMA)]),
    (SCH + "ListSchemas", sc.ListSchemasRequest(parent=P), [("pubsub.schemas.list", P)]),
    (
        SCH + "ListSchemaRevisions",
        sc.ListSchemaRevisionsRequest(name=SCHEMA),
        [("pubsub.schemas.listRevisions", SCHEMA)],
    ),
    (SCH + "CommitSchema", sc.CommitSchemaRequest(name=SCHEMA), [("pubsub.schemas.commit", SCHEMA)]),
    (SCH + "RollbackSchema", sc.RollbackSchemaRequest(name=SCHEMA), [("pubsub.schemas.rollback", SCHEMA)]),
    (
        SCH + "DeleteSchemaRevision",
        sc.DeleteSchemaRevisionRequest(name=SCHEMA + "@c7cfa2a8"),
        [("pubsub.schemas.delete", SCHEMA)],
    ),
    (SCH + "DeleteSchema", sc.DeleteSchemaRequest(name=SCHEMA), [("pubsub.schemas.delete", SCHEMA)]),
    (SCH + "ValidateSchema", sc.ValidateSchemaRequest(parent=P), [("pubsub.schemas.validate", P)]),
    (
        SCH + "ValidateMessage",
        sc.ValidateMessageRequest(parent=P, name=SCHEMA),
        [("pubsub.schemas.validate", P)],
    ),
    (
        IAMP + "GetIamPolicy",
        iam_policy_pb2.GetIamPolicyRequest(resource=SUB),
        [("pubsub.subscriptions.getIamPolicy", SUB)],
    ),
    (
        IAMP + "SetIamPolicy",
        iam_policy_pb2.SetIamPolicyRequest(resource=SNAP),
        [("pubsub.snapshots.setIamPolicy", SNAP)],
    ),
    (
        IAMP + "SetIamPolicy",
        iam_policy_pb2.SetIamPolicyRequest(resource=SCHEMA),
        [("pubsub.schemas.setIamPolicy", SCHEMA)],
    ),
    (
        IAMP + "GetIamPolicy",
        iam_policy_pb2.GetIamPolicyRequest(resource=TOPIC),
        [("pubsub.topics.getIamPolicy", TOPIC)],
    ),
    (IAMP + "TestIamPermissions", iam_policy_pb2.TestIamPermissionsRequest(resource=TOPIC), []),
]


def attached(subscription: str) -> str | None:
    return {SUB: OTHER_TOPIC}.get(subscription)


@pytest.mark.parametrize(
    ("method", "request_", "expected"), REQUIRED, ids=lambda v: v if isinstance(v, str) else ""
)
def test_required(method: str, request_: object, expected: list[tuple[str, str]]) -> None:
    assert iam.required(method, request_, topic_of=attached) == expected  # type: ignore[arg-type]


def test_every_method_has_checks_and_a_case() -> None:
    services = [
        *ps.DESCRIPTOR.services_by_name.values(),
        *sc.DESCRIPTOR.services_by_name.values(),
        *iam_policy_pb2.DESCRIPTOR.services_by_name.values(),
    ]
    methods = {f"/{s.full_name}/{m.name}" for s in services for m in s.methods}
    assert {s.full_name for s in services} == {
        "google.pubsub.v1.Publisher",
        "google.pubsub.v1.Subscriber",
        "google.pubsub.v1.SchemaService",
        "google.iam.v1.IAMPolicy",
    }
    assert set(iam.CHECKS) == methods
    assert {method for method, _, _ in REQUIRED} == methods
    for s in services:
        for m in s.methods:  # each check's field exists in the method's request
            for check in iam.CHECKS[f"/{s.full_name}/{m.name}"]:
                descriptor = m.input_type
                for part in check.field.split("."):
                    field = descriptor.fields_by_name[part]
                    descriptor = field.message_type or descriptor
                assert field.type == field.TYPE_STRING, check


def test_detach_checks_the_topic_of_the_subscription() -> None:
    method, request = PUB + "DetachSubscription", ps.DetachSubscriptionRequest(subscription=SUB)
    assert iam.required(method, request, topic_of=lambda s: TOPIC) == [
        ("pubsub.topics.detachSubscription", TOPIC)
    ]
    # An unknown subscription or a deleted topic: the subscription is the resource checked.
    for answer in (None, "", "_deleted-topic_"):
        assert iam.required(method, request, topic_of=lambda s, a=answer: a) == [  # type: ignore[misc]
            ("pubsub.topics.detachSubscription", SUB)
        ]
    with pytest.raises(ValueError, match="topic_of"):
        iam.required(method, request)


def test_required_refuses_bad_names_and_unknown_methods() -> None:
    invalid(iam.required, PUB + "Publish", ps.PublishRequest(topic="topics/t"), match="Invalid resource name")
    invalid(iam.required, PUB + "Publish", ps.PublishRequest(topic=""), match="Invalid resource name")
    invalid(iam.required, PUB + "Publish", ps.PublishRequest(topic=SUB), match="Invalid resource name")
    invalid(iam.required, PUB + "ListTopics", ps.ListTopicsRequest(project="projects/"))
    invalid(iam.required, PUB + "ListTopics", ps.ListTopicsRequest(project=TOPIC))
    invalid(iam.required, PUB + "CreateTopic", ps.Topic(name=SUB))
    invalid(iam.required, SUBR + "CreateSubscription", ps.Subscription(name=SUB, topic=SNAP))
    invalid(iam.required, SUBR + "GetSubscription", ps.GetSubscriptionRequest(subscription=TOPIC))
    invalid(iam.required, PUB + "DetachSubscription", ps.DetachSubscriptionRequest(subscription=TOPIC))
    invalid(iam.required, IAMP + "GetIamPolicy", iam_policy_pb2.GetIamPolicyRequest(resource=P))
    invalid(iam.required, SUBR + "Seek", ps.SeekRequest(subscription=SUB, snapshot="snap"))
    with pytest.raises(LookupError):
        iam.required("/google.pubsub.v1.Publisher/Unknown", ps.PublishRequest(topic=TOPIC))
    # A deleted schema left on a topic is not something to attach.
    topic = ps.Topic(name=TOPIC, schema_settings=ps.SchemaSettings(schema="_deleted-schema_"))
    assert iam.required(PUB + "CreateTopic", topic) == [("pubsub.topics.create", P)]


@pytest.mark.parametrize(
    ("name", "kind", "project"),
    [
        (TOPIC, "topics", P),
        (SUB, "subscriptions", P),
        (SNAP, "snapshots", P),
        (SCHEMA, "schemas", P),
        (SCHEMA + "@abc", "schemas", P),
        ("projects/my-proj:x/topics/abc", "topics", "projects/my-proj:x"),
    ],
)
def test_kind_and_project(name: str, kind: str, project: str) -> None:
    assert iam.kind_of(name) == kind
    assert iam.project_of(name) == project
    assert iam.project_of(project) == project


@pytest.mark.parametrize(
    "name",
    [
        "",
        "projects",
        P,
        "projects/p/topics",
        "projects/p/queues/q",
        "x/p/topics/t",
        f"{TOPIC}/x",
        f"{TOPIC}@1",
    ],
)
def test_kind_of_refuses(name: str) -> None:
    invalid(iam.kind_of, name)
    if name != P:
        invalid(iam.project_of, name)


# --- Members and grants ------------------------------------------------------------------------

MATCHES = [
    ("allUsers", None, True),
    ("allUsers", "user:a@example.com", True),
    ("allAuthenticatedUsers", None, False),
    ("allAuthenticatedUsers", "serviceAccount:sa@p.iam.gserviceaccount.com", True),
    ("user:a@example.com", "user:a@example.com", True),
    ("user:A@Example.com", "user:a@EXAMPLE.com", True),
    ("user:a@example.com", "user:b@example.com", False),
    ("user:a@example.com", "serviceAccount:a@example.com", False),
    ("user:a@example.com", None, False),
    ("serviceAccount:sa@p.iam.gserviceaccount.com", "serviceAccount:SA@p.iam.gserviceaccount.com", True),
    ("domain:example.com", "user:a@example.com", True),
    ("domain:Example.COM", "serviceAccount:x@example.com", True),
    ("domain:example.com", "user:a@sub.example.com", False),
    ("domain:example.com", "user:a@example.com.evil", False),
    ("domain:example.com", "principal://iam.googleapis.com/x@example.com", False),
    ("domain:example.com", None, False),
    ("group:devs@example.com", "user:devs@example.com", False),
    ("group:devs@example.com", "group:devs@example.com", False),
    ("deleted:user:a@example.com?uid=123", "user:a@example.com", False),
    (
        "principal://iam.googleapis.com/locations/global/x",
        "principal://iam.googleapis.com/locations/global/x",
        True,
    ),
    (
        "principal://iam.googleapis.com/locations/global/x",
        "principal://iam.googleapis.com/locations/global/X",
        False,
    ),
    (
        "principalSet://iam.googleapis.com/locations/global/*",
        "principal://iam.googleapis.com/locations/global/x",
        False,
    ),
]


@pytest.mark.parametrize(("member", "principal", "expected"), MATCHES)
def test_matches(member: str, principal: str | None, expected: bool) -> None:
    assert iam.matches(member, principal) is expected


def test_granted_reads_every_policy_and_skips_conditions_and_unknown_roles() -> None:
    resource = policy(("roles/pubsub.publisher", ["user:p@example.com"]))
    project = policy(("roles/pubsub.subscriber", ["domain:example.com"]))
    assert iam.granted("user:p@example.com", "pubsub.topics.publish", [resource, project])
    assert iam.granted("user:p@example.com", "pubsub.subscriptions.consume", [resource, project])
    assert not iam.granted("user:p@other.org", "pubsub.subscriptions.consume", [resource, project])
    assert not iam.granted("user:p@example.com", "pubsub.topics.delete", [resource, project])
    assert not iam.granted(None, "pubsub.topics.publish", [])
    conditional = policy_pb2.Policy(
        bindings=[
            policy_pb2.Binding(
                role="roles/pubsub.admin", members=["allUsers"], condition=expr_pb2.Expr(expression="true")
            )
        ]
    )
    assert not iam.granted("user:p@example.com", "pubsub.topics.get", [conditional])
    assert not iam.granted(
        "user:p@example.com", "pubsub.topics.get", [policy(("roles/storage.admin", ["allUsers"]))]
    )
    assert iam.granted(None, "pubsub.topics.get", [policy(("roles/viewer", ["allUsers"]))])


def test_authorize_and_denial() -> None:
    policies = {TOPIC: [policy(("roles/pubsub.publisher", ["user:a@example.com"]))]}
    needs = [("pubsub.topics.publish", TOPIC), ("pubsub.topics.delete", TOPIC)]
    iam.authorize("user:a@example.com", needs[:1], lambda r: policies.get(r, []))
    with pytest.raises(PermissionDenied) as info:
        iam.authorize("user:a@example.com", needs, lambda r: policies.get(r, []))
    assert info.value.code is Code.PERMISSION_DENIED
    assert (
        info.value.message
        == f"Permission 'pubsub.topics.delete' denied on resource '{TOPIC}' (or it may not exist)."
    )
    assert isinstance(info.value, iam.Denied)
    assert (info.value.permission, info.value.resource) == ("pubsub.topics.delete", TOPIC)
    long = iam.denial("pubsub.topics.get", "projects/p/topics/" + "x" * 5000)
    assert len(long.message) < 1100
