"""Names of the early API <-> v1 resource names (pure).

The early API names topics and subscriptions without a project: `foo` is the topic
`projects/<legacy project>/topics/foo` (--legacy-project), and likewise for subscriptions. A
full v1 name is taken as it is. Names are checked with v1's rules (translate/names.py), and
shown back in the short form for resources of the legacy project, in full for any other.
"""

from __future__ import annotations

import dataclasses
import uuid

from gateway.errors import InvalidArgument, quote
from gateway.translate import endpoints, names

PROJECTS = "projects/"


@dataclasses.dataclass(frozen=True, slots=True)
class LegacyNames:
    project: str  # --legacy-project

    @property
    def parent(self) -> str:
        return PROJECTS + self.project

    def topic(self, name: str) -> str:
        """The v1 name of the topic `name` (INVALID_ARGUMENT for a bad one)."""
        return names.topic(self._full(name, "topics"))

    def subscription(self, name: str) -> str:
        return names.subscription(self._full(name, "subscriptions"))

    def _full(self, name: str, collection: str) -> str:
        if name.startswith(PROJECTS):
            return name
        if not name:
            raise InvalidArgument(f"A {collection[:-1]} name is required.")
        if "/" in name:
            raise InvalidArgument(f"Invalid resource name given (name={quote(name)}).")
        return f"{self.parent}/{collection}/{name}"

    def show(self, v1: str, given: str = "") -> str:
        """`v1` as the early API shows it: short when it is of the legacy project, unless the
        client gave the full name (`given`); other projects' names in full."""
        if given.startswith(PROJECTS) or v1 == names.DELETED_TOPIC:
            return v1
        parts = v1.split("/")
        if len(parts) == 4 and parts[1] == self.project:
            return parts[3]
        return v1


def assigned_subscription(topic: str) -> str:
    """A new subscription's name when CreateSubscription gives none: in the topic's project."""
    project = names.parse(topic, "topics")[0]
    return f"{PROJECTS}{project}/subscriptions/sub-{uuid.uuid4().hex}"


def push_endpoint(text: str, destinations: endpoints.Policy) -> str:
    """A PushConfig.push_endpoint of the early API: `host:port` of a gRPC PushEndpointService
    (a host name, an IPv4 address or a bracketed IPv6 one; port 1..65535), not an address the
    gateway's --push-destinations refuses (the same check as when pushing: push/grpc_push.py).
    INVALID_ARGUMENT otherwise; the endpoint as kept (the port without leading zeros)."""
    problem = endpoints.grpc_problem(text, destinations)
    if problem is not None:
        raise InvalidArgument(
            f"Invalid push_config.push_endpoint {quote(text)}: {problem}. It must be host:port of a "
            "gRPC PushEndpointService."
        )
    host, port = endpoints.host_port(text)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
