"""IAM policies of topics, subscriptions, snapshots and schemas, and the checks of every call.

A resource's policy is stored with the resource itself, in its record of the resource log
(`meta["iam_policy"]`: the serialized google.iam.v1.Policy, base64), so every process has it
as soon as it has the resource, and deleting the resource deletes its policy. A schema's is in
the schema's own record (not its revisions'); a revision's name (`.../schemas/S@R`) names its
schema's policy. SetIamPolicy is
a compare-and-set against the record it read (`ResourceStore.replace`): two concurrent changes
cannot both succeed, in one process or several. Project-level bindings come from the file of
`--iam-policy-file`, read at start.

`check` is asked before a call runs, only when authentication is on: the caller must hold each
permission the method needs (security/roles.py says which, and on what) through a binding of the
resource's own policy or of its project's. Without authentication nothing is enforced, but
policies are still stored and returned (as Google's own client tests expect of an emulator).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence

from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.protobuf.message import Message

from gateway.core.resources import AnyResource, ResourceStore
from gateway.errors import NotFound
from gateway.security import iam
from gateway.translate.meta import Kind

log = logging.getLogger(__name__)
META_KEY = "iam_policy"
_KINDS: dict[str, Kind] = {
    "topics": "topic",
    "subscriptions": "subscription",
    "snapshots": "snapshot",
    "schemas": "schema",
}


def stored_policy(res: AnyResource) -> policy_pb2.Policy | None:
    raw = res.meta.iam_policy
    return policy_pb2.Policy.FromString(base64.b64decode(raw)) if raw else None


def _own(name: str) -> str:
    """The name of the record that holds `name`'s policy: a schema revision's is its schema's."""
    return name.partition("@")[0]


class AccessService:
    def __init__(self, store: ResourceStore, project_policies: Mapping[str, policy_pb2.Policy]) -> None:
        self._store = store
        self._projects = dict(project_policies)

    # -- the IAMPolicy RPCs ------------------------------------------------------------------

    def _resource(self, name: str) -> tuple[str, AnyResource]:
        kind = iam.kind_of(name)
        stored = _KINDS.get(kind)
        res = self._store.get(stored, _own(name)) if stored is not None else None
        if res is None:
            raise NotFound(f"Resource not found (resource={name}).")
        return kind, res

    def get_policy(self, request: iam_policy_pb2.GetIamPolicyRequest) -> policy_pb2.Policy:
        _, res = self._resource(request.resource)
        options = request.options if request.HasField("options") else None
        return iam.for_get(stored_policy(res), options)

    async def set_policy(self, request: iam_policy_pb2.SetIamPolicyRequest) -> policy_pb2.Policy:
        kind, res = self._resource(request.resource)
        current = stored_policy(res) or policy_pb2.Policy()
        policy = iam.apply_set(current, request, kind)
        stored = iam.normalized(policy)
        encoded = base64.b64encode(stored.SerializeToString()).decode()
        await self._store.replace(res.with_iam_policy(encoded), res.op)
        log.info("%s: IAM policy set (%d bindings)", res.name, len(stored.bindings))
        return policy

    def test_permissions(self, resource: str, permissions: Sequence[str], principal: str | None) -> list[str]:
        """The requested permissions the caller holds on `resource` (all of them, when
        `principal` is None: authentication is off and nothing is enforced)."""
        kind, res = self._resource(resource)
        iam.testable(kind, permissions)
        if principal is None:
            return list(permissions)
        policies = self._policies(resource, res)
        return [p for p in permissions if iam.granted(principal, p, policies)]

    # -- checking calls ----------------------------------------------------------------------

    def check(self, principal: str, method: str, request: Message) -> None:
        """PermissionDenied naming the first permission `principal` lacks for this call."""
        iam.authorize(principal, iam.required(method, request, topic_of=self._topic_of), self._policies)

    def _topic_of(self, subscription: str) -> str | None:
        res = self._store.get("subscription", subscription)
        return str(res.proto.topic) if res is not None else None

    def _policies(self, name: str, res: AnyResource | None = None) -> list[policy_pb2.Policy]:
        """The policies that may grant a permission on `name`: its project's (from the file),
        those of every project (`projects/*`), and its own when it is a stored resource."""
        project = iam.project_of(name)
        out = iam.project_policies(self._projects, name)
        if res is None and name != project:
            kind = _KINDS.get(iam.kind_of(name))
            res = self._store.get(kind, _own(name)) if kind is not None else None
        if res is not None:
            own = stored_policy(res)
            if own is not None:
                out.append(own)
        return out
