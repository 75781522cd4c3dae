"""IAM tables, per-RPC permission checks and allow policies (gateway.security.iam)."""

from __future__ import annotations

import json
import random

import pytest
from google.iam.v1 import iam_policy_pb2, options_pb2, policy_pb2
from google.type import expr_pb2
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as ps
from gateway._pb.google.pubsub.v1 import schema_pb2 as sc
from gateway.errors import Code, InvalidArgument, PermissionDenied
from gateway.security import iam
from gateway.security import roles as tables

HYP = hsettings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

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
    assert (permission in tables.ROLES[role]) is expected
    assert permission in tables.PERMISSIONS
    bound = [policy((role, ["user:a@example.com"]))]
    assert iam.granted("user:a@example.com", permission, bound) is expected


def test_role_tables_are_consistent() -> None:
    assert tables.ROLES["roles/pubsub.admin"] == tables.ROLES["roles/owner"] == tables.PERMISSIONS
    assert tables.ROLES["roles/pubsub.publisher"] == {"pubsub.topics.publish"}
    assert tables.ROLES["roles/pubsub.subscriber"] == {
        "pubsub.topics.attachSubscription",
        "pubsub.subscriptions.consume",
        "pubsub.snapshots.seek",
    }
    editor = tables.ROLES["roles/pubsub.editor"]
    assert editor == {p for p in tables.PERMISSIONS if not p.endswith(("getIamPolicy", "setIamPolicy"))}
    assert (
        tables.ROLES["roles/pubsub.viewer"]
        < editor
        < tables.ROLES["roles/editor"]
        < tables.ROLES["roles/owner"]
    )
    assert tables.ROLES["roles/pubsub.viewer"] < tables.ROLES["roles/viewer"] < tables.ROLES["roles/editor"]
    assert set(tables.ROLES) == set(tables.GRANTABLE)
    assert len(tables.PERMISSIONS) == 10 + 8 + 8 + 11
    for role, perms in tables.ROLES.items():
        assert perms <= tables.PERMISSIONS, role
    # Every permission an RPC checks is a known one.
    for checks in tables.CHECKS.values():
        for check in checks:
            for kind in tables.KINDS:
                assert check.permission.format(kind=kind) in tables.PERMISSIONS, check


@pytest.mark.parametrize(
    ("role", "kinds"),
    [
        ("roles/pubsub.publisher", {"topics"}),
        ("roles/pubsub.subscriber", {"topics", "subscriptions", "snapshots"}),
        ("roles/pubsub.viewer", set(tables.KINDS)),
        ("roles/pubsub.editor", set(tables.KINDS)),
        ("roles/pubsub.admin", set(tables.KINDS)),
        ("roles/owner", set(tables.KINDS)),
        ("roles/editor", set(tables.KINDS)),
        ("roles/viewer", set(tables.KINDS)),
    ],
)
def test_where_roles_are_grantable(role: str, kinds: set[str]) -> None:
    for kind in tables.KINDS:
        p = policy((role, ["user:a@example.com"]))
        if kind in kinds:
            iam.validate_policy(p, kind)
        else:
            invalid(iam.validate_policy, p, kind, match=f"Role {role} is not supported for this resource")
    iam.validate_policy(policy((role, ["user:a@example.com"])), tables.PROJECTS)


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
    assert set(tables.CHECKS) == methods
    assert {method for method, _, _ in REQUIRED} == methods
    for s in services:
        for m in s.methods:  # each check's field exists in the method's request
            for check in tables.CHECKS[f"/{s.full_name}/{m.name}"]:
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


def test_project_policies() -> None:
    loaded = {
        "projects/p": policy(("roles/viewer", ["allUsers"])),
        "projects/*": policy(("roles/owner", ["user:root@example.com"])),
    }
    assert iam.project_policies(loaded, TOPIC) == [loaded["projects/p"], loaded["projects/*"]]
    assert iam.project_policies(loaded, "projects/q") == [loaded["projects/*"]]
    assert iam.project_policies({}, SUB) == []


# --- Policies ------------------------------------------------------------------------------------

GOOD_MEMBERS = [
    "user:alice@example.com",
    "serviceAccount:my-app@my-project.iam.gserviceaccount.com",
    "group:admins@example.com",
    "domain:example.com",
    "allUsers",
    "allAuthenticatedUsers",
    "principal://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/subject/s",
    "principalSet://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/*",
    "deleted:user:alice@example.com?uid=123456789012345678901",
    "deleted:serviceAccount:my-app@p.iam.gserviceaccount.com?uid=1",
    "deleted:group:admins@example.com?uid=42",
]
BAD_MEMBERS = [
    "",
    "alice@example.com",
    "user:",
    "user:alice",
    "user:alice@",
    "user:alice@example",
    "User:alice@example.com",
    "user:alice @example.com",
    "domain:example",
    "domain:",
    "allusers",
    "projectOwner:p",
    "deleted:user:alice@example.com",
    "deleted:domain:example.com?uid=1",
    "principal://",
    "principal://has space",
    "user:" + "a" * 1100 + "@example.com",
]


@pytest.mark.parametrize("member", GOOD_MEMBERS)
def test_members_accepted(member: str) -> None:
    iam.validate_policy(policy(("roles/pubsub.viewer", [member])), "topics")


@pytest.mark.parametrize("member", BAD_MEMBERS)
def test_members_refused(member: str) -> None:
    invalid(iam.validate_policy, policy(("roles/pubsub.viewer", [member])), "topics", match="Invalid member")


def test_policy_validation() -> None:
    good = policy(
        ("roles/pubsub.editor", ["domain:google.com"]), ("roles/pubsub.viewer", ["group:logs@google.com"])
    )
    for version in (0, 1, 3):
        good.version = version
        iam.validate_policy(good, "topics")
    iam.validate_policy(policy(("roles/pubsub.viewer", [])), "subscriptions")  # dropped when stored
    for version in (2, 4, -1):
        invalid(iam.validate_policy, policy(version=version), "topics", match="version")
    invalid(
        iam.validate_policy, policy(("roles/storage.admin", ["allUsers"])), "topics", match="storage.admin"
    )
    invalid(iam.validate_policy, policy(("projects/p/roles/custom", ["allUsers"])), "topics")
    invalid(iam.validate_policy, policy(("", ["allUsers"])), "topics")
    invalid(iam.validate_policy, policy(("roles/pubsub.publisher", ["allUsers"])), "subscriptions")
    conditional = policy(("roles/pubsub.viewer", ["allUsers"]))
    conditional.bindings[0].condition.expression = "request.time < timestamp('2030-01-01T00:00:00Z')"
    invalid(iam.validate_policy, conditional, "topics", match="conditions are not supported")
    audited = policy()
    audited.audit_configs.add(service="allServices")
    invalid(iam.validate_policy, audited, "topics", match="audit")
    with pytest.raises(ValueError, match="kind"):
        iam.validate_policy(policy(), "buckets")


def test_member_limit() -> None:
    members = [f"user:u{i}@example.com" for i in range(750)]
    at_limit = policy(("roles/pubsub.viewer", members), ("roles/pubsub.editor", members))
    iam.validate_policy(at_limit, "topics")
    # Duplicates within a role (in any case) count once; one more principal is one too many.
    at_limit.bindings.add(
        role="roles/pubsub.viewer", members=[m.upper().replace("USER:", "user:") for m in members]
    )
    iam.validate_policy(at_limit, "topics")
    at_limit.bindings.add(role="roles/pubsub.admin", members=["allUsers"])
    invalid(iam.validate_policy, at_limit, "topics", match="1501 principals")


def test_normalized() -> None:
    messy = policy(
        ("roles/pubsub.viewer", ["user:B@example.com", "allUsers"]),
        ("roles/pubsub.editor", []),
        ("roles/pubsub.admin", ["user:a@example.com"]),
        ("roles/pubsub.viewer", ["user:b@example.com", "domain:Example.com"]),
        etag=b"old",
        version=3,
    )
    assert iam.normalized(messy) == policy(
        ("roles/pubsub.admin", ["user:a@example.com"]),
        ("roles/pubsub.viewer", ["allUsers", "domain:example.com", "user:b@example.com"]),
        version=1,
    )
    assert iam.normalized(policy(("roles/viewer", ["deleted:user:A@X.com?uid=7"]))).bindings[0].members == [
        "deleted:user:a@x.com?uid=7"
    ]
    assert iam.normalized(policy()) == policy(version=1)
    conditional = policy(("roles/pubsub.viewer", ["allUsers"]))
    conditional.bindings[0].condition.expression = "true"
    invalid(iam.normalized, conditional, match="conditions")  # merging would drop the condition


def test_etag() -> None:
    one = policy(("roles/pubsub.viewer", ["user:a@example.com", "user:b@example.com"]))
    same = policy(
        ("roles/pubsub.viewer", ["user:b@example.com"]), ("roles/pubsub.viewer", ["user:A@example.com"])
    )
    same.etag = b"whatever"
    assert len(iam.etag_of(one)) == 8
    assert iam.etag_of(one) == iam.etag_of(same) == iam.etag_of(iam.normalized(one))
    assert iam.etag_of(one) != iam.etag_of(policy(("roles/pubsub.viewer", ["user:a@example.com"])))
    assert iam.etag_of(one) != iam.etag_of(
        policy(("roles/pubsub.editor", ["user:a@example.com", "user:b@example.com"]))
    )
    assert iam.etag_of(policy()) != iam.etag_of(one)


def set_request(
    p: policy_pb2.Policy, resource: str = TOPIC, mask: list[str] | None = None
) -> iam_policy_pb2.SetIamPolicyRequest:
    request = iam_policy_pb2.SetIamPolicyRequest(resource=resource, policy=p)
    if mask is not None:
        request.update_mask.paths.extend(mask)
    return request


def test_apply_set_etags() -> None:
    first = iam.apply_set(None, set_request(policy(("roles/pubsub.viewer", ["allUsers"]))), "topics")
    assert first.etag == iam.etag_of(first) and first.version == 1
    # The etag GetIamPolicy returned: the write goes through.
    read = iam.for_get(first, None)
    read.bindings.add(role="roles/pubsub.publisher", members=["user:a@example.com"])
    second = iam.apply_set(first, set_request(read), "topics")
    assert [b.role for b in second.bindings] == ["roles/pubsub.publisher", "roles/pubsub.viewer"]
    # A stale etag (someone wrote in between): ABORTED, nothing to store.
    with pytest.raises(iam.Aborted) as info:
        iam.apply_set(second, set_request(read), "topics")
    assert info.value.code is Code.ABORTED
    assert "concurrent policy changes" in info.value.message
    # No etag: unconditional.
    third = iam.apply_set(second, set_request(policy(("roles/pubsub.editor", ["allUsers"]))), "topics")
    assert list(third.bindings) == list(policy(("roles/pubsub.editor", ["allUsers"])).bindings)
    assert third.etag == iam.etag_of(third) != second.etag
    # The etag of "no policy yet" is that of the empty policy GetIamPolicy shows.
    empty_etag = iam.for_get(None, None).etag
    iam.apply_set(None, set_request(policy(etag=empty_etag)), "topics")
    with pytest.raises(iam.Aborted):
        iam.apply_set(None, set_request(policy(etag=b"\x00" * 8)), "topics")


def test_apply_set_update_mask() -> None:
    current = iam.apply_set(None, set_request(policy(("roles/pubsub.viewer", ["allUsers"]))), "topics")
    stale = policy(("roles/pubsub.admin", ["allUsers"]), etag=b"stale")
    # Only the etag in the mask: the bindings stay; the stale etag still aborts.
    with pytest.raises(iam.Aborted):
        iam.apply_set(current, set_request(stale, mask=["etag"]), "topics")
    kept = iam.apply_set(
        current, set_request(policy(("roles/pubsub.admin", ["allUsers"])), mask=["etag"]), "topics"
    )
    assert kept == current
    # Bindings without etag in the mask: the request's etag is not compared.
    replaced = iam.apply_set(current, set_request(stale, mask=["bindings"]), "topics")
    assert [b.role for b in replaced.bindings] == ["roles/pubsub.admin"]
    assert iam.apply_set(current, set_request(stale, mask=["bindings", "version"]), "topics") == replaced
    invalid(
        iam.apply_set,
        current,
        set_request(stale, mask=["bindings", "members"]),
        "topics",
        match="update_mask",
    )
    invalid(iam.apply_set, current, set_request(policy(("roles/pubsub.publisher", ["allUsers"]))), "schemas")


def test_for_get() -> None:
    empty = iam.for_get(None, None)
    assert list(empty.bindings) == [] and empty.etag == iam.etag_of(policy())
    stored = iam.apply_set(None, set_request(policy(("roles/pubsub.viewer", ["allUsers"]))), "topics")
    for version in (0, 1, 3):
        assert iam.for_get(stored, options_pb2.GetPolicyOptions(requested_policy_version=version)) == stored
    for version in (2, 4, -3):
        invalid(iam.for_get, stored, options_pb2.GetPolicyOptions(requested_policy_version=version))


def test_python_client_round_trip() -> None:
    """What google-cloud-pubsub's system test test_managing_topic_iam_policy does."""
    got = iam.for_get(None, None)
    got.bindings.add(role="roles/pubsub.editor", members=["domain:google.com"])
    got.bindings.add(role="roles/pubsub.viewer", members=["group:cloud-logs@google.com"])
    new = iam.apply_set(None, set_request(got), "topics")
    again = iam.for_get(new, None)
    assert again.bindings == new.bindings and len(again.bindings) == 2
    assert {b.role: list(b.members) for b in again.bindings} == {
        "roles/pubsub.editor": ["domain:google.com"],
        "roles/pubsub.viewer": ["group:cloud-logs@google.com"],
    }


# --- TestIamPermissions --------------------------------------------------------------------------


def test_testable() -> None:
    iam.testable(
        "topics", ["pubsub.topics.publish", "pubsub.topics.attachSubscription", "pubsub.topics.getIamPolicy"]
    )
    iam.testable("subscriptions", ["pubsub.subscriptions.consume", "pubsub.subscriptions.setIamPolicy"])
    iam.testable("snapshots", ["pubsub.snapshots.seek"])
    iam.testable("schemas", ["pubsub.schemas.attach", "pubsub.schemas.commit"])
    iam.testable("topics", [])
    for kind, perms in tables.TESTABLE.items():
        iam.testable(kind, sorted(perms))
    invalid(iam.testable, "topics", ["pubsub.topics.*"], match="wildcards")
    invalid(iam.testable, "topics", ["*"], match="wildcards")
    invalid(iam.testable, "topics", ["pubsub.topics"], match="Invalid permission")
    invalid(iam.testable, "topics", ["pubsub topics publish"], match="Invalid permission")
    invalid(iam.testable, "topics", ["pubsub.topics.create"], match="not valid for this resource")
    invalid(iam.testable, "topics", ["pubsub.topics.list"], match="not valid for this resource")
    invalid(iam.testable, "topics", ["pubsub.subscriptions.consume"], match="not valid for this resource")
    invalid(iam.testable, "schemas", ["pubsub.schemas.validate"], match="not valid for this resource")
    invalid(iam.testable, "topics", ["storage.buckets.get"], match="not valid for this resource")


# --- The project policy file ---------------------------------------------------------------------


def test_load_project_policies() -> None:
    text = json.dumps(
        {
            "projects/p": {
                "bindings": [{"role": "roles/pubsub.publisher", "members": ["user:B@example.com"]}]
            },
            "projects/*": {
                "bindings": [
                    {"role": "roles/viewer", "members": ["allAuthenticatedUsers"]},
                    {"role": "roles/pubsub.editor", "members": []},
                ]
            },
            "projects/empty": {},
        }
    )
    loaded = iam.load_project_policies(text)
    assert loaded == {
        "projects/p": policy(("roles/pubsub.publisher", ["user:b@example.com"]), version=1),
        "projects/*": policy(("roles/viewer", ["allAuthenticatedUsers"]), version=1),
        "projects/empty": policy(version=1),
    }
    assert iam.load_project_policies("{}") == {}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "not valid JSON"),
        ("{", "not valid JSON"),
        ("[]", "JSON object"),
        ('{"p": {"bindings": []}}', "not a project name"),
        ('{"projects/p/topics/t": {"bindings": []}}', "not a project name"),
        ('{"projects/p": []}', "projects/p: the value must be an object"),
        ('{"projects/p": {"bindings": {}}}', "projects/p: the value must be an object"),
        ('{"projects/p": {"bindings": [], "etag": "x"}}', "projects/p: the value must be an object"),
        ('{"projects/p": {"bindings": ["roles/viewer"]}}', r"projects/p: bindings\[0\] must be an object"),
        ('{"projects/p": {"bindings": [{"role": "roles/viewer"}]}}', r"bindings\[0\] must have exactly"),
        (
            '{"projects/p": {"bindings": [{"role": "roles/viewer", "members": "allUsers"}]}}',
            "members a list of strings",
        ),
        (
            '{"projects/p": {"bindings": [{"role": 1, "members": []}]}}',
            "role must be a string",
        ),
        (
            '{"projects/p": {"bindings": [{"role": "roles/viewer", "members": [], "condition": {}}]}}',
            "conditions are not supported",
        ),
        (
            '{"projects/p": {"bindings": [{"role": "roles/storage.admin", "members": ["allUsers"]}]}}',
            "projects/p: Role 'roles/storage.admin'",
        ),
        (
            '{"projects/p": {"bindings": [{"role": "roles/viewer", "members": ["bob"]}]}}',
            "projects/p: Invalid member 'bob'",
        ),
        ('{"projects/p": {"bindings": []}, "projects/p": {"bindings": []}}', "appears twice"),
    ],
)
def test_load_project_policies_refuses(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        iam.load_project_policies(text)


# --- Properties ----------------------------------------------------------------------------------

roles = st.sampled_from(sorted(tables.ROLES))
emails = st.builds(
    "{}@{}.com".format,
    st.text(alphabet="abcXYZ.-", min_size=1, max_size=5),
    st.text(alphabet="abcdEF", min_size=1, max_size=4),
)
members = st.one_of(
    st.sampled_from(["allUsers", "allAuthenticatedUsers"]),
    st.builds("user:{}".format, emails),
    st.builds("serviceAccount:{}".format, emails),
    st.builds("group:{}".format, emails),
    st.builds("domain:{}.com".format, st.text(alphabet="abcD", min_size=1, max_size=4)),
)
bindings = st.lists(st.tuples(roles, st.lists(members, max_size=5)), max_size=6)
principals = st.one_of(
    st.none(), st.builds("user:{}".format, emails), st.builds("serviceAccount:{}".format, emails)
)
permissions = st.sampled_from(sorted(tables.PERMISSIONS))


@HYP
@given(bindings)
def test_normalized_is_idempotent_and_valid(raw: list[tuple[str, list[str]]]) -> None:
    p = policy(*raw)
    once = iam.normalized(p)
    assert iam.normalized(once) == once
    assert [b.role for b in once.bindings] == sorted({r for r, m in raw if m})
    for b in once.bindings:
        assert list(b.members) == sorted(set(b.members)) and b.members
    iam.validate_policy(once, tables.PROJECTS)


@HYP
@given(bindings, st.randoms(use_true_random=False))
def test_etag_ignores_order_and_duplicates(raw: list[tuple[str, list[str]]], rnd: random.Random) -> None:
    shuffled = [(role, list(ms)) for role, ms in raw]
    for _, ms in shuffled:
        rnd.shuffle(ms)
        ms.extend(ms[:1])
    rnd.shuffle(shuffled)
    # One binding split into one binding per member: the same policy.
    split = [(role, [m]) for role, ms in shuffled for m in ms]
    assert iam.etag_of(policy(*raw)) == iam.etag_of(policy(*shuffled)) == iam.etag_of(policy(*split))


@HYP
@given(bindings, principals, permissions)
def test_normalizing_keeps_every_grant(raw: list[tuple[str, list[str]]], who: str | None, what: str) -> None:
    p = policy(*raw)
    assert iam.granted(who, what, [p]) == iam.granted(who, what, [iam.normalized(p)])
