"""IAM for Pub/Sub resources: what a request needs, and the allow policies stored with topics,
subscriptions, snapshots and schemas. Google's roles and permissions, and the table of what
each RPC needs, are in roles.py.

Pure code on values (no I/O). The wire asks `required` which (permission, resource) pairs a
request needs, fetches the policies that apply to each resource (the resource's own, then its
project's from the --iam-policy-file, see `project_policies`) and lets `authorize` refuse the
first pair no binding grants. The IAMPolicy RPCs use `for_get`, `apply_set` and `testable`.

What this gateway does not do, on purpose:
- IAM Conditions: a conditional binding is refused when set and grants nothing if met.
- `group:` members are stored but never match: the gateway has no group directory.
  `principalSet://` and `deleted:` members are stored but never match either.
- Only the permissions the Pub/Sub API checks are known: not the tag permissions
  (`pubsub.*.createTagBinding`, `listEffectiveTags`, ..., `pubsub.topics.updateTag`) nor
  `pubsub.messageTransforms.validate`, which Google's roles also carry.
- Custom roles: a policy may grant the roles/pubsub.* roles and the basic roles only.
- Project policies come from a file and are read-only; GetIamPolicy on a project is refused,
  as Google's Pub/Sub API refuses it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

# google.iam.v1 ships .pyi stubs but no py.typed marker, so mypy will not read them.
from google.iam.v1 import iam_policy_pb2, options_pb2, policy_pb2
from google.protobuf.message import Message

from gateway.errors import Aborted, InvalidArgument, PermissionDenied, quote
from gateway.security.roles import ALL_PROJECTS, CHECKS, GRANTABLE, KINDS, PROJECTS, ROLES, TESTABLE
from gateway.translate import names

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


_ALL_KINDS = frozenset({*KINDS, PROJECTS})
_VERSIONS = frozenset({0, 1, 3})
MAX_MEMBERS: Final = 1500  # principals a policy may refer to, counted once per role (policy.proto)
_MEMBER_CHARS = 1024
_DOMAIN = r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"
_EMAIL = rf"[^\s@:?/]+@{_DOMAIN}"
# Member forms of google.iam.v1.Binding.members (policy.proto) and of IAM principal identifiers
# (https://docs.cloud.google.com/iam/docs/principal-identifiers).
_MEMBER = re.compile(
    rf"allUsers|allAuthenticatedUsers|(?:user|serviceAccount|group):{_EMAIL}|domain:{_DOMAIN}"
    rf"|deleted:(?:user|serviceAccount|group):{_EMAIL}\?uid=[0-9]+|principal(?:Set)?://[!-~]+"
)
_LOWERED = ("user:", "serviceAccount:", "group:", "domain:", "deleted:")
_NO_CONDITIONS = (
    "IAM conditions are not supported by this gateway for Pub/Sub resources; remove the binding's condition."
)


def _canonical(member: str) -> str:
    """Emails and domains in lower case (as Google stores them), so that one principal is one member."""
    for prefix in _LOWERED:
        if member.startswith(prefix):
            rest = member[len(prefix) :]
            if prefix == "deleted:":
                kind, _, rest = rest.partition(":")
                email, sep, uid = rest.partition("?")
                return f"deleted:{kind}:{email.lower()}{sep}{uid}"
            return prefix + rest.lower()
    return member


def _check_member(member: str) -> None:
    if len(member) > _MEMBER_CHARS or not _MEMBER.fullmatch(member):
        raise InvalidArgument(
            f"Invalid member {quote(member, 100)!r}: members are user:EMAIL, serviceAccount:EMAIL, "
            "group:EMAIL, domain:DOMAIN, allUsers, allAuthenticatedUsers, principal://..., "
            "principalSet://... or deleted:{user,serviceAccount,group}:EMAIL?uid=ID."
        )


def validate_policy(policy: policy_pb2.Policy, kind: str) -> None:
    """InvalidArgument unless `policy` may be set on a resource of `kind` (one of KINDS, or
    PROJECTS for the project policy file): a known role grantable there, well-formed members, no
    conditions, no audit_configs, a valid version, at most MAX_MEMBERS principals. A binding
    without members is accepted and dropped by `normalized`."""
    if kind not in _ALL_KINDS:
        raise ValueError(f"unknown kind of resource {kind!r}")
    if policy.version not in _VERSIONS:
        raise InvalidArgument(f"Invalid policy version {policy.version}: valid values are 0, 1 and 3.")
    if len(policy.audit_configs):
        raise InvalidArgument("Audit configs (audit_configs) are not supported by this gateway.")
    members: dict[str, set[str]] = {}
    for binding in policy.bindings:
        if binding.HasField("condition"):
            raise InvalidArgument(_NO_CONDITIONS)
        grantable = GRANTABLE.get(binding.role)
        if grantable is None:
            raise InvalidArgument(
                f"Role {quote(binding.role, 100)!r} is not one this gateway grants: it knows "
                f"{', '.join(sorted(ROLES))}."
            )
        if kind not in grantable:
            raise InvalidArgument(f"Role {binding.role} is not supported for this resource.")
        for member in binding.members:
            _check_member(member)
        members.setdefault(binding.role, set()).update(_canonical(m) for m in binding.members)
    count = sum(len(m) for m in members.values())
    if count > MAX_MEMBERS:
        raise InvalidArgument(f"The policy refers to {count} principals; at most {MAX_MEMBERS} are allowed.")


def normalized(policy: policy_pb2.Policy) -> policy_pb2.Policy:
    """`policy` as stored: one binding per role (sorted by role), its members canonical,
    de-duplicated and sorted, empty bindings dropped, version 1, no etag, no audit configs.
    InvalidArgument for a conditional binding (merging would lose the condition)."""
    merged: dict[str, set[str]] = {}
    for binding in policy.bindings:
        if binding.HasField("condition"):
            raise InvalidArgument(_NO_CONDITIONS)
        merged.setdefault(binding.role, set()).update(_canonical(m) for m in binding.members)
    out = policy_pb2.Policy(version=1)
    for role in sorted(merged):
        if merged[role]:
            out.bindings.add(role=role, members=sorted(merged[role]))
    return out


def etag_of(policy: policy_pb2.Policy) -> bytes:
    """8 bytes that change when the normalized content (version, bindings) does and only then."""
    norm = normalized(policy)
    content = [norm.version, [[b.role, list(b.members)] for b in norm.bindings]]
    return hashlib.sha256(json.dumps(content, separators=(",", ":")).encode()).digest()[:8]


def _stamped(policy: policy_pb2.Policy) -> policy_pb2.Policy:
    out = normalized(policy)
    out.etag = etag_of(out)
    return out


# SetIamPolicyRequest.update_mask: "Only the fields in the mask will be modified. If no mask is
# provided, the following default mask is used: paths: "bindings, etag"" (iam_policy.proto).
_DEFAULT_MASK = ("bindings", "etag")
_MASKABLE = frozenset({"bindings", "etag", "version", "audit_configs"})
_CONCURRENT = (
    "There were concurrent policy changes. Please retry the whole read-modify-write with exponential backoff."
)


def apply_set(
    current: policy_pb2.Policy | None, request: iam_policy_pb2.SetIamPolicyRequest, kind: str
) -> policy_pb2.Policy:
    """The policy to store for SetIamPolicy on a resource of `kind` whose policy is `current`
    (None: it has none), normalized and with its etag. Fields outside the request's update_mask
    keep their current value; `version` in the mask is accepted, and the stored version is always
    1. With `etag` in the mask and a non-empty etag in the request's policy, ABORTED unless it is
    the current policy's etag; an empty etag writes unconditionally."""
    paths = list(request.update_mask.paths) or list(_DEFAULT_MASK)
    for path in paths:
        if path not in _MASKABLE:
            valid = ", ".join(sorted(_MASKABLE))
            raise InvalidArgument(f"Invalid update_mask path {quote(path, 100)!r}: valid paths are {valid}.")
    validate_policy(request.policy, kind)
    base = current if current is not None else policy_pb2.Policy()
    if "etag" in paths and request.policy.etag and request.policy.etag != etag_of(base):
        raise Aborted(_CONCURRENT)
    result = policy_pb2.Policy()
    result.bindings.extend(request.policy.bindings if "bindings" in paths else base.bindings)
    return _stamped(result)


def for_get(
    stored: policy_pb2.Policy | None, options: options_pb2.GetPolicyOptions | None
) -> policy_pb2.Policy:
    """What GetIamPolicy returns: the stored policy (an empty one when there is none) with its
    etag. InvalidArgument for a requested_policy_version other than 0, 1 or 3; the answer is
    version 1 whatever was asked, as Google answers for policies without conditions."""
    version = options.requested_policy_version if options is not None else 0
    if version not in _VERSIONS:
        raise InvalidArgument(f"Invalid requested_policy_version {version}: valid values are 0, 1 and 3.")
    return _stamped(stored if stored is not None else policy_pb2.Policy())


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


def project_policies(policies: Mapping[str, policy_pb2.Policy], resource: str) -> list[policy_pb2.Policy]:
    """The policies of the project file that apply to `resource` (or project): its project's, then
    the one for every project."""
    return [p for key in (project_of(resource), ALL_PROJECTS) if (p := policies.get(key)) is not None]


_PERMISSION = re.compile(r"[a-z][A-Za-z0-9]*\.[a-z][A-Za-z0-9]*\.[a-z][A-Za-z0-9]*")


def testable(kind: str, permissions: Sequence[str]) -> None:
    """InvalidArgument unless every permission may be tested on a resource of `kind`: no
    wildcards (iam_policy.proto), no malformed names, none checked only on the project
    (pubsub.topics.create, ...) or on another kind of resource."""
    allowed = TESTABLE[kind]
    for permission in permissions:
        if "*" in permission:
            raise InvalidArgument(
                "Permissions with wildcards (such as '*' or 'pubsub.*') are not allowed: "
                f"{quote(permission, 100)!r}."
            )
        if not _PERMISSION.fullmatch(permission):
            raise InvalidArgument(
                f"Invalid permission {quote(permission, 100)!r}: expected service.resource.verb."
            )
        if permission not in allowed:
            raise InvalidArgument(f"Permission {permission} is not valid for this resource.")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(
            f"a key appears twice in one object: {sorted({k for k in keys if keys.count(k) > 1})}"
        )
    return dict(pairs)


def _binding(project: str, index: int, value: object) -> policy_pb2.Binding:
    where = f"{project}: bindings[{index}]"
    if not isinstance(value, dict):
        raise ValueError(f'{where} must be an object {{"role": ..., "members": [...]}}')
    if "condition" in value:
        raise ValueError(f"{where}: {_NO_CONDITIONS}")
    if set(value) != {"role", "members"}:
        raise ValueError(f'{where} must have exactly the keys "role" and "members", got {sorted(value)}')
    role, members = value["role"], value["members"]
    if (
        not isinstance(role, str)
        or not isinstance(members, list)
        or not all(isinstance(m, str) for m in members)
    ):
        raise ValueError(f"{where}: role must be a string and members a list of strings")
    return policy_pb2.Binding(role=role, members=members)


def load_project_policies(text: str) -> dict[str, policy_pb2.Policy]:
    """Parse the --iam-policy-file: a JSON object whose keys are `projects/ID` or `projects/*`
    (every project) and whose values are `{"bindings": [{"role": ..., "members": [...]}]}`.
    Returns normalized policies; ValueError that says what and where for anything else."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError('the file must hold a JSON object: {"projects/ID": {"bindings": [...]}, ...}')
    out: dict[str, policy_pb2.Policy] = {}
    for project, value in data.items():
        if project != ALL_PROJECTS:
            try:
                names.project_name(project)
            except InvalidArgument:
                raise ValueError(
                    f"{project!r} is not a project name: use projects/ID or projects/*"
                ) from None
        if (
            not isinstance(value, dict)
            or set(value) - {"bindings"}
            or not isinstance(value.get("bindings", []), list)
        ):
            raise ValueError(f'{project}: the value must be an object {{"bindings": [...]}} and nothing else')
        policy = policy_pb2.Policy(
            bindings=[_binding(project, i, b) for i, b in enumerate(value.get("bindings", []))]
        )
        try:
            validate_policy(policy, PROJECTS)
        except InvalidArgument as exc:
            raise ValueError(f"{project}: {exc.message}") from None
        out[project] = normalized(policy)
    return out
