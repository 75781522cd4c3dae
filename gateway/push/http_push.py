"""How a dispatcher sends one message: the sender seam, and its HTTP flavour.

A `Dispatcher` (dispatcher.py) does what every push flavour shares: sessions on the core, the
window, the backoff and the push rate, ordering keys, acks and nacks. What one push is, it asks a
`Pusher`: `HttpPusher` here POSTs the v1 request (body.py, with a JWT from auth.py when the
subscription asks for one); `GrpcPusher` (grpc_push.py) calls a PushEndpointService of the seed's
early API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gateway.push import body, sender
from gateway.push.auth import TokenSigner
from gateway.translate import endpoints
from gateway.translate.records import to_message

if TYPE_CHECKING:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2
    from gateway.core.resources import StoredSubscription
    from gateway.core.runner import Delivery
    from gateway.core.topic_schemas import SchemaMarks


class Pusher(Protocol):
    """One subscription's way of pushing a message."""

    kind: str  # "http" or "grpc": a subscription that changes flavour gets a new dispatcher

    def update(self, res: StoredSubscription) -> None:
        """The subscription changed: take its new endpoint and settings."""

    def endpoint(self) -> str:
        """Where pushes go, fit for a log line."""

    async def push(self, d: Delivery, time_left: float) -> sender.Outcome:
        """Push `d`, giving up after `time_left` seconds (what is left of its lease)."""


def target_of(proto: pubsub_pb2.Subscription) -> body.PushTarget:
    """The PushTarget of a Subscription proto."""
    pc = proto.push_config
    return body.PushTarget(
        endpoint=pc.push_endpoint,
        no_wrapper=pc.HasField("no_wrapper"),
        write_metadata=pc.no_wrapper.write_metadata,
        oidc_email=pc.oidc_token.service_account_email,
        oidc_audience=pc.oidc_token.audience,
    )


class HttpPusher:
    """v1 push: a POST to push_config.push_endpoint over the process's PushClient."""

    kind = "http"

    def __init__(
        self,
        res: StoredSubscription,
        http: sender.PushClient,
        signer: TokenSigner,
        marks: SchemaMarks | None = None,
    ) -> None:
        self.name = res.name
        self._http = http
        self._signer = signer
        self._marks = marks
        self.update(res)

    def update(self, res: StoredSubscription) -> None:
        self.target = target_of(res.proto)
        self.counted = res.proto.HasField("dead_letter_policy")

    def endpoint(self) -> str:
        return endpoints.mask(self.target.endpoint)

    async def push(self, d: Delivery, time_left: float) -> sender.Outcome:
        url, request, token, refused = self.request(d)
        if refused is not None:
            return refused
        return await self._http.post(url, request, time_left, token)

    def request(self, d: Delivery) -> tuple[str, body.PushRequest, str | None, sender.Outcome | None]:
        """(endpoint, request, token, None) pushing `d`, or (..., outcome) when it cannot be sent."""
        target = self.target
        url = target.endpoint
        message = to_message(d.record)
        if self._marks is not None:
            self._marks.apply(message.attributes)
        request = body.build(self.name, message, d.attempt if self.counted else 0, target)
        if not url:
            return url, request, None, sender.Outcome(False, "push delivery is paused")
        if not target.oidc_email:
            return url, request, None, None
        try:
            return url, request, self._signer.token(target.audience, target.oidc_email), None
        except LookupError as exc:
            return url, request, None, sender.Outcome(False, str(exc))
