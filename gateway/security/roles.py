"""Google's Pub/Sub roles and permissions, and what each RPC needs: the tables of IAM.

Facts from Google's documentation (sources next to each table); iam.py applies them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

KINDS: Final = ("topics", "subscriptions", "snapshots", "schemas")
PROJECTS: Final = "projects"  # the kind of a project: every known role is grantable on one
ALL_PROJECTS: Final = "projects/*"  # the key of the project policy that applies to every project


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
