"""IAM for Pub/Sub resources: Google's roles and permissions, and what each RPC needs.

Pure code on values (no I/O). The wire asks `required` which (permission, resource) pairs a
request needs, fetches the policies that apply to each resource (the resource's own, then its
project's) and lets `authorize` refuse the first pair no binding grants.

What this gateway does not do, on purpose:
- IAM Conditions: a conditional binding grants nothing.
- `group:` members never match: the gateway has no group directory. `principalSet://` and
  `deleted:` members never match either.
- Only the permissions the Pub/Sub API checks are known: not the tag permissions
  (`pubsub.*.createTagBinding`, `listEffectiveTags`, ..., `pubsub.topics.updateTag`) nor
  `pubsub.messageTransforms.validate`, which Google's roles also carry.
- Custom roles: only the roles/pubsub.* roles and the basic roles grant anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

# google.iam.v1 ships .pyi stubs but no py.typed marker, so mypy will not read them.
from google.iam.v1 import policy_pb2  # type: ignore[import-untyped]
from google.protobuf.message import Message

from gateway.errors import InvalidArgument, PermissionDenied, quote
from gateway.translate import names

KINDS: Final = ("topics", "subscriptions", "snapshots", "schemas")
PROJECTS: Final = "projects"  # the kind of a project: every known role is grantable on one


def _perms(kind: str, verbs: str) -> frozenset[str]:
    return frozenset(f"pubsub.{kind}.{verb}" for verb in verbs.split())


_IAM_VERBS = ("getIamPolicy", "setIamPolicy")

# The permissions of Pub/Sub's four kinds of resource, as Google's roles name them.
# Source: https://docs.cloud.google.com/pubsub/docs/access-control ("Available Pub/Sub roles",
# roles/pubsub.admin) and https://docs.cloud.google.com/iam/docs/roles-permissions/pubsub.
_BY_KIND: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        kind: _perms(kind, verbs + " getIamPolicy setIamPolicy")
        for kind, verbs in {
            "topics": "attachSubscription create delete detachSubscription get list publish update",
            "subscriptions": "consume create delete get list update",
            "snapshots": "create delete get list seek update",
            "schemas": "attach commit create delete get list listRevisions rollback validate",
        }.items()
    }
)
PERMISSIONS: Final[frozenset[str]] = frozenset().union(*_BY_KIND.values())

# Checked on the project that contains a resource (access-control page), so never testable on a
# resource: TestIamPermissions on a topic lists no pubsub.topics.create (the same page's
# `gcloud iam list-testable-permissions` example).
_PROJECT_LEVEL: Final = frozenset(
    {f"pubsub.{kind}.{verb}" for kind in KINDS for verb in ("create", "list")} | {"pubsub.schemas.validate"}
)
TESTABLE: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {kind: perms - _PROJECT_LEVEL for kind, perms in _BY_KIND.items()}
)

_PUBSUB_EDITOR = PERMISSIONS - frozenset(p for p in PERMISSIONS if p.endswith(_IAM_VERBS))
_PUBSUB_VIEWER = (
    _perms("topics", "get list")
    | _perms("subscriptions", "get list")
    | _perms("snapshots", "get list")
    | _perms("schemas", "get list listRevisions validate")
)

# Role -> its pubsub.* permissions.
# Predefined roles: https://docs.cloud.google.com/pubsub/docs/access-control ("Available Pub/Sub
# roles"). Basic roles, restricted to pubsub.*: https://docs.cloud.google.com/iam/docs/roles-overview#basic
# with the lists `gcloud iam roles describe roles/viewer` (editor, owner) prints, as recorded by
# https://github.com/iann0036/iam-dataset (gcp/roles/viewer.json, editor.json, owner.json).
# roles/owner holds every permission of roles/editor and the IAM ones: all of them.
ROLES: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        "roles/pubsub.admin": PERMISSIONS,
        "roles/pubsub.editor": _PUBSUB_EDITOR,
        "roles/pubsub.publisher": frozenset({"pubsub.topics.publish"}),
        "roles/pubsub.subscriber": frozenset(
            {"pubsub.topics.attachSubscription", "pubsub.subscriptions.consume", "pubsub.snapshots.seek"}
        ),
        "roles/pubsub.viewer": _PUBSUB_VIEWER,
        "roles/owner": PERMISSIONS,
        "roles/editor": _PUBSUB_EDITOR | {"pubsub.schemas.getIamPolicy"},
        "roles/viewer": _PUBSUB_VIEWER
        | {"pubsub.schemas.attach", "pubsub.schemas.getIamPolicy", "pubsub.snapshots.seek"},
    }
)

# Where each role may be granted ("Lowest-level resources where you can grant this role" on the
# access-control page); the basic roles on every Pub/Sub resource; any role on a project.
GRANTABLE: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        role: frozenset({PROJECTS, *kinds})
        for role, kinds in {
            "roles/pubsub.admin": KINDS,
            "roles/pubsub.editor": KINDS,
            "roles/pubsub.publisher": ("topics",),
            "roles/pubsub.subscriber": ("topics", "subscriptions", "snapshots"),
            "roles/pubsub.viewer": KINDS,
            "roles/owner": KINDS,
            "roles/editor": KINDS,
            "roles/viewer": KINDS,
        }.items()
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One permission a request needs on the resource one of its fields names."""

    permission: str  # "{kind}" stands for the resource's kind: "pubsub.{kind}.getIamPolicy"
    field: str  # the request field holding the name; dotted into sub-messages ("topic.name")
    on_project: bool = False  # on the project that contains the named resource (or is named)
    optional: bool = False  # skipped when the field is empty (Seek's snapshot)
    attached: bool = False  # on the topic the named subscription is attached to (`topic_of`)
    masked: str = ""  # only when the request's update_mask names this field


def _c(permission: str, field: str, **options: Any) -> Check:
    return Check(permission, field, **options)


_PUB, _SUB, _SCHEMA = (
    "/google.pubsub.v1.Publisher/",
    "/google.pubsub.v1.Subscriber/",
    "/google.pubsub.v1.SchemaService/",
)
_IAM = "/google.iam.v1.IAMPolicy/"
_CONSUME = (_c("pubsub.subscriptions.consume", "subscription"),)

# gRPC method -> what it needs. Source: https://docs.cloud.google.com/pubsub/docs/access-control
# ("Required permissions for topics / subscriptions / schemas / snapshots"). Not in those tables,
# decided here: ListTopicSubscriptions and ListTopicSnapshots read the topic (pubsub.topics.get);
# a topic's schema needs pubsub.schemas.attach ("Attach schema to topic",
# https://docs.cloud.google.com/pubsub/docs/associate-schema-topic).
CHECKS: Final[Mapping[str, tuple[Check, ...]]] = MappingProxyType(
    {
        _PUB + "CreateTopic": (
            _c("pubsub.topics.create", "name", on_project=True),
            _c("pubsub.schemas.attach", "schema_settings.schema", optional=True),
        ),
        _PUB + "UpdateTopic": (
            _c("pubsub.topics.update", "topic.name"),
            _c(
                "pubsub.schemas.attach",
                "topic.schema_settings.schema",
                optional=True,
                masked="schema_settings",
            ),
        ),
        _PUB + "Publish": (_c("pubsub.topics.publish", "topic"),),
        _PUB + "GetTopic": (_c("pubsub.topics.get", "topic"),),
        _PUB + "ListTopics": (_c("pubsub.topics.list", "project", on_project=True),),
        _PUB + "ListTopicSubscriptions": (_c("pubsub.topics.get", "topic"),),
        _PUB + "ListTopicSnapshots": (_c("pubsub.topics.get", "topic"),),
        _PUB + "DeleteTopic": (_c("pubsub.topics.delete", "topic"),),
        _PUB + "DetachSubscription": (_c("pubsub.topics.detachSubscription", "subscription", attached=True),),
        _SUB + "CreateSubscription": (
            _c("pubsub.subscriptions.create", "name", on_project=True),
            _c("pubsub.topics.attachSubscription", "topic"),
        ),
        _SUB + "GetSubscription": (_c("pubsub.subscriptions.get", "subscription"),),
        _SUB + "UpdateSubscription": (_c("pubsub.subscriptions.update", "subscription.name"),),
        _SUB + "ListSubscriptions": (_c("pubsub.subscriptions.list", "project", on_project=True),),
        _SUB + "DeleteSubscription": (_c("pubsub.subscriptions.delete", "subscription"),),
        _SUB + "ModifyAckDeadline": _CONSUME,
        _SUB + "Acknowledge": _CONSUME,
        _SUB + "Pull": _CONSUME,
        _SUB + "StreamingPull": _CONSUME,  # checked on the stream's first request
        _SUB + "ModifyPushConfig": (_c("pubsub.subscriptions.update", "subscription"),),
        _SUB + "GetSnapshot": (_c("pubsub.snapshots.get", "snapshot"),),
        _SUB + "ListSnapshots": (_c("pubsub.snapshots.list", "project", on_project=True),),
        _SUB + "CreateSnapshot": (
            _c("pubsub.snapshots.create", "name", on_project=True),
            _c("pubsub.subscriptions.consume", "subscription"),
        ),
        _SUB + "UpdateSnapshot": (_c("pubsub.snapshots.update", "snapshot.name"),),
        _SUB + "DeleteSnapshot": (_c("pubsub.snapshots.delete", "snapshot"),),
        _SUB + "Seek": (*_CONSUME, _c("pubsub.snapshots.seek", "snapshot", optional=True)),
        _SCHEMA + "CreateSchema": (_c("pubsub.schemas.create", "parent", on_project=True),),
        _SCHEMA + "GetSchema": (_c("pubsub.schemas.get", "name"),),
        _SCHEMA + "ListSchemas": (_c("pubsub.schemas.list", "parent", on_project=True),),
        _SCHEMA + "ListSchemaRevisions": (_c("pubsub.schemas.listRevisions", "name"),),
        _SCHEMA + "CommitSchema": (_c("pubsub.schemas.commit", "name"),),
        _SCHEMA + "RollbackSchema": (_c("pubsub.schemas.rollback", "name"),),
        _SCHEMA + "DeleteSchemaRevision": (_c("pubsub.schemas.delete", "name"),),
        _SCHEMA + "DeleteSchema": (_c("pubsub.schemas.delete", "name"),),
        _SCHEMA + "ValidateSchema": (_c("pubsub.schemas.validate", "parent", on_project=True),),
        _SCHEMA + "ValidateMessage": (_c("pubsub.schemas.validate", "parent", on_project=True),),
        _IAM + "GetIamPolicy": (_c("pubsub.{kind}.getIamPolicy", "resource"),),
        _IAM + "SetIamPolicy": (_c("pubsub.{kind}.setIamPolicy", "resource"),),
        _IAM + "TestIamPermissions": (),
    }
)

# Names Pub/Sub puts where a deleted resource was: never something to check a permission on.
_SENTINELS = frozenset({names.DELETED_TOPIC, "_deleted-schema_"})


class Denied(PermissionDenied):
    """IAM refused the caller a permission on a resource."""

    def __init__(self, permission: str, resource: str) -> None:
        super().__init__(
            f"Permission '{permission}' denied on resource '{quote(resource)}' (or it may not exist)."
        )
        self.permission = permission
        self.resource = resource


def denial(permission: str, resource: str) -> PermissionDenied:
    """The error for a caller that lacks `permission` on `resource` (the wording Google's APIs use;
    it does not tell whether the resource exists)."""
    return Denied(permission, resource)


def _split(resource: str) -> tuple[str, str]:
    """(kind, canonical name) of a Pub/Sub resource name; a schema revision
    (`projects/p/schemas/s@rev`) names its schema."""
    parts = resource.split("/")
    if len(parts) == 4 and parts[0] == "projects" and parts[2] in KINDS:
        kind = parts[2]
        name = resource.partition("@")[0] if kind == "schemas" else resource
        names.parse(name, kind)
        return kind, name
    raise InvalidArgument(f"Invalid resource name given (name={quote(resource)}).")


def kind_of(resource: str) -> str:
    """The kind of a resource name (one of KINDS); InvalidArgument for any other name."""
    return _split(resource)[0]


def project_of(name: str) -> str:
    """`projects/P` from a resource name or a project name; InvalidArgument for anything else."""
    if name.count("/") == 1:
        return f"projects/{names.project_name(name)}"
    return "projects/" + _split(name)[1].split("/")[1]


def _field(request: Message, path: str) -> str:
    value: object = request
    for part in path.split("."):
        value = getattr(value, part)
    if not isinstance(value, str):
        raise TypeError(f"{path} of {type(request).__name__} is not a string field")
    return value


_MASK_FIELD = "update_mask"
_PROJECT_FIELDS = ("project", "parent")  # the fields that name a project, not a resource in one


def _masks(request: Message, field: str) -> bool:
    paths: Iterable[str] = getattr(request, _MASK_FIELD).paths
    return any(p == field or p.startswith(field + ".") for p in paths)


def required(
    method: str, request: Message, *, topic_of: Callable[[str], str | None] | None = None
) -> list[tuple[str, str]]:
    """The (permission, resource name) pairs `request` to the gRPC `method`
    ("/google.pubsub.v1.Publisher/Publish") needs, in CHECKS' order. InvalidArgument for a
    malformed name or one of the wrong kind. `topic_of(subscription)` is the topic a
    subscription is attached to (None when unknown or deleted: the subscription itself is
    checked then); DetachSubscription needs it. LookupError for a method CHECKS does not know:
    the caller must refuse it."""
    checks = CHECKS.get(method)
    if checks is None:
        raise LookupError(f"no IAM checks are defined for {method}")
    needs: list[tuple[str, str]] = []
    for check in checks:
        if check.masked and not _masks(request, check.masked):
            continue
        value = _field(request, check.field)
        if check.optional and (not value or value in _SENTINELS):
            continue
        if check.field in _PROJECT_FIELDS:
            needs.append((check.permission, f"projects/{names.project_name(value)}"))
            continue
        kind, resource = _split(value)
        if "{kind}" in check.permission:
            needs.append((check.permission.format(kind=kind), resource))
            continue
        if kind != ("subscriptions" if check.attached else check.permission.split(".")[1]):
            raise InvalidArgument(f"Invalid resource name given (name={quote(value)}).")
        if check.on_project:
            resource = project_of(resource)
        elif check.attached:
            if topic_of is None:
                raise ValueError(f"{method} needs topic_of to find the subscription's topic")
            topic = topic_of(resource)
            if topic and topic not in _SENTINELS:
                resource = _split(topic)[1]
        needs.append((check.permission, resource))
    return needs


def matches(member: str, principal: str | None) -> bool:
    """Whether a binding's `member` covers the caller `principal` (an IAM member such as
    `user:a@example.com`, `serviceAccount:...` or `principal://...`; None when anonymous).
    Emails and domains compare case-insensitively; `domain:D` covers user and service account
    emails at D. `group:`, `principalSet://` and `deleted:` members never match (no directory)."""
    if member == "allUsers":
        return True
    if principal is None:
        return False
    if member == "allAuthenticatedUsers":
        return True
    if member.startswith("principal://"):
        return member == principal
    kind, _, value = member.partition(":")
    p_kind, _, p_value = principal.partition(":")
    if kind in ("user", "serviceAccount"):
        return p_kind == kind and p_value.lower() == value.lower()
    if kind == "domain":
        return p_kind in ("user", "serviceAccount") and p_value.rpartition("@")[2].lower() == value.lower()
    return False


def granted(principal: str | None, permission: str, policies: Sequence[policy_pb2.Policy]) -> bool:
    """Whether any binding of `policies` (a resource's, its project's) grants `principal` a role
    that holds `permission`. Unknown roles and conditional bindings grant nothing."""
    for policy in policies:
        for binding in policy.bindings:
            if binding.HasField("condition") or permission not in ROLES.get(binding.role, ()):
                continue
            if any(matches(member, principal) for member in binding.members):
                return True
    return False


def authorize(
    principal: str | None,
    needs: Iterable[tuple[str, str]],
    policies_of: Callable[[str], Sequence[policy_pb2.Policy]],
) -> None:
    """Raise `denial` for the first (permission, resource) of `needs` that the policies
    `policies_of(resource)` do not grant `principal`."""
    for permission, resource in needs:
        if not granted(principal, permission, policies_of(resource)):
            raise denial(permission, resource)
