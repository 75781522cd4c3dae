"""Who is calling, and may they: asked of every call on both wires before it runs.

`CallGuard.admit` takes what a call carries (its `authorization` metadata or header, the
client certificate TLS verified, the peer mark of a forwarded ack) and returns the caller's
IAM member, or None when authentication is off. It raises Unauthenticated or PermissionDenied
(the wire turns them into UNAUTHENTICATED / 401 and PERMISSION_DENIED / 403). The caller is
also kept in `CALLER` for the call's task: TestIamPermissions answers for it.

A call marked as forwarded by another gateway process (wire/peers.py) must carry a valid
peer token for its subscription (security/peer.py); it then needs no credentials of its own,
the process that took it from the client checked those. A mark without a valid token is
refused: a client cannot set it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn, Protocol

import grpc
from google.protobuf.message import Message

from gateway.core.access import AccessService
from gateway.errors import PermissionDenied
from gateway.security.authn import Principal
from gateway.security.peer import PeerTokens

FORWARDED = "x-pubsub-gateway-forwarded"
PEER = "gateway:peer"  # the caller of a verified forwarded call
CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("pubsub_gateway_caller", default=None)


class Context(Protocol):
    """What the servicers and the guard use of a call's context, on either wire: a gRPC call's
    grpc.aio.ServicerContext, or a REST call's rest.CallContext."""

    def invocation_metadata(self) -> Iterable[tuple[str, str | bytes]] | None: ...

    def time_remaining(self) -> float | None: ...

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str | bytes]] = (),
    ) -> NoReturn: ...


class Authenticator(Protocol):
    async def authenticate(self, authorization: str | None, peer_certificate: bytes | None) -> Principal:
        """The caller's Principal (its `member`); Unauthenticated when nothing valid came."""


def metadata_value(context: Context, key: str) -> str | None:
    for k, v in context.invocation_metadata() or ():
        if k == key:
            return v.decode(errors="replace") if isinstance(v, bytes) else str(v)
    return None


def peer_certificate(context: Any) -> bytes | None:
    """The client certificate TLS verified: PEM from a gRPC call's auth context, or what a
    REST call's context (rest.CallContext) was given."""
    own = getattr(context, "peer_certificate", None)
    if callable(own):
        cert: bytes | None = own()
        return cert
    try:
        certs = context.auth_context().get("x509_pem_cert")
    except (AttributeError, ValueError):
        return None
    return certs[0] if certs else None


class CallGuard:
    def __init__(
        self, access: AccessService, authenticator: Authenticator | None, peers: PeerTokens | None
    ) -> None:
        self._access = access
        self._authenticator = authenticator
        self._peers = peers

    @property
    def enforcing(self) -> bool:
        return self._authenticator is not None

    async def admit(self, method: str, request: Message, context: Context) -> str | None:
        """The caller's IAM member (None without authentication), once it may make this call."""
        caller = await self._caller(method, request, context)
        CALLER.set(caller)
        return caller

    async def _caller(self, method: str, request: Message, context: Context) -> str | None:
        mark = metadata_value(context, FORWARDED)
        if mark is not None:
            subscription = str(getattr(request, "subscription", ""))
            if self._peers is None or not self._peers.verify(mark, subscription):
                raise PermissionDenied(
                    f"The {FORWARDED} mark is for gateway processes only, and this one is not valid."
                )
            return PEER
        if self._authenticator is None:
            return None
        principal = await self._authenticator.authenticate(
            metadata_value(context, "authorization"), peer_certificate(context)
        )
        member = str(principal.member)
        self._access.check(member, method, request)
        return member
