"""gRPC push, the seed's early API: a PubsubEvent per message to a PushEndpointService.

A subscription whose stored meta has `legacy_push_endpoint` ("host:port", set by the legacy
API's CreateSubscription and ModifyPushConfig) is pushed by a Dispatcher (dispatcher.py) with a
`GrpcPusher`: each message becomes a `tech.pubsub.PubsubEvent` (made by the legacy API's
converter, passed in as `MessageEvent`) sent by a unary call of
`/tech.pubsub.PushEndpointService/HandlePubsubEvent`, whose timeout is what is left of the
message's ack deadline. The answer is judged by `outcome_of`:

- OK acks; ABORTED nacks (retried later, nothing slows down); UNAVAILABLE nacks and pushes back
  (window.PushRate halves the push rate);
- any other code, no answer within the deadline, or no connection is a failure, as a failed
  HTTP push: nack, smaller window, push backoff. UNAVAILABLE that grpc reports itself because
  the connection failed is such a failure, not a push-back: a call is only made on a channel
  that is connected, and grpc's own transport errors are recognised by their details.

The subscription's truncation events (core/truncation.py, docs/truncation.md) are pushed too,
before further messages: `TruncationEvents` gives the dispatcher the pending event, sends it as
`PubsubEvent{subscription, truncated: true}` and acks (OK) or nacks it, judged as a message's
answer.

`GrpcPushClient` keeps one grpc.aio channel per endpoint for the whole process, plaintext (the
seed's endpoints are plain `host:port`). It resolves names itself (every RESOLVE_SECONDS) and
checks every address against the push destination policy (`--push-destinations`,
translate/endpoints.py) as the HTTP sender does; the channel then connects to those addresses
only (an `ipv4:`/`ipv6:` target with the name as its authority), so a name cannot resolve to one
address when checked and to another when connected to.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from google.protobuf.message import Message
from grpc import aio

from gateway._pb.proto2 import empty_pb2
from gateway._pb.tech.pubsub import pubsub_pb2
from gateway.push.sender import Outcome
from gateway.translate import endpoints
from gateway.translate.records import MessageView, to_message

if TYPE_CHECKING:
    from gateway.core.resources import StoredSubscription
    from gateway.core.runner import Delivery
    from gateway.core.topic_schemas import SchemaMarks
    from gateway.core.truncation import TruncationService

log = logging.getLogger(__name__)

# The legacy API's converter: (subscription name, message) -> the event that pushes it. The
# gateway passes gateway.legacy.events.message_event (gateway/server.py builds the PushManager).
MessageEvent = Callable[[str, MessageView], pubsub_pb2.PubsubEvent]
Resolve = Callable[[str, int], Awaitable[list[str]]]  # (host, port) -> addresses

METHOD = "/tech.pubsub.PushEndpointService/HandlePubsubEvent"
RESOLVE_SECONDS = 60.0  # names are resolved (and their addresses checked) again this often
IDLE_SECONDS = 300.0  # a channel unused this long is closed
RETIRE_GRACE = 600.0  # calls on a channel replaced after a new resolution may finish (max deadline)
MIN_TIMEOUT = 0.05
DELETED_TIMEOUT = 10.0  # the most the deleted event waits for an answer
# Details grpc gives its own UNAVAILABLE when the connection, not the endpoint, failed.
_TRANSPORT = (
    "failed to connect",
    "connection refused",
    "connection reset",
    "socket closed",
    "broken pipe",
    "stream removed",
    "goaway",
    "connection attempt timed out",
    "no route to host",
)
_EMPTY_VIEW = MessageView(b"", {}, "", "", 0)


def outcome_of(code: grpc.StatusCode, details: str) -> Outcome:
    """What the answer `code` (with its `details`) to HandlePubsubEvent means for the message."""
    shown = f"{code.name}: {details}" if details else code.name
    if code == grpc.StatusCode.OK:
        return Outcome(True, "OK")
    if code == grpc.StatusCode.ABORTED:
        return Outcome(False, shown, aborted=True)
    if code == grpc.StatusCode.UNAVAILABLE and not any(t in details.lower() for t in _TRANSPORT):
        return Outcome(False, shown, push_back=True)
    return Outcome(False, shown)


def channel_target(addresses: list[str], port: int) -> str:
    """The grpc target that connects to `addresses` (IPv4 ones if there are any) and no other."""
    v4 = [a for a in addresses if ipaddress.ip_address(a).version == 4]
    if v4:
        return "ipv4:" + ",".join(f"{a}:{port}" for a in v4)
    return "ipv6:" + ",".join(f"[{a}]:{port}" for a in addresses)


async def _resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for family, *_, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            seen[str(sockaddr[0]).split("%")[0]] = None
    return list(seen)


@dataclasses.dataclass(slots=True)
class _Channel:
    channel: aio.Channel
    call: aio.UnaryUnaryMultiCallable[Message, empty_pb2.Empty]
    addresses: list[str]
    resolved_at: float
    used_at: float


def push_credentials(tls: str) -> grpc.ChannelCredentials | None:
    """The channel credentials of --grpc-push-tls: None for `off` (plaintext); for `system` the
    CA bundle Python's ssl trusts (SSL_CERT_FILE, else the system's, as HTTP push trusts),
    gRPC's own roots if there is none; else the PEM CA file named. Read once, at start."""
    if tls == "off":
        return None
    if tls == "system":
        cafile = ssl.get_default_verify_paths().cafile  # None when that file does not exist
        roots = Path(cafile).read_bytes() if cafile else None
    else:
        roots = Path(tls).read_bytes()
    return grpc.ssl_channel_credentials(root_certificates=roots)


class GrpcPushClient:
    """The process's gRPC push channels: one per endpoint, shared by its subscriptions; over TLS
    when given `credentials` (the endpoint's host name is what its certificate must name)."""

    def __init__(
        self,
        destinations: endpoints.Policy = endpoints.DEFAULT_POLICY,
        resolve: Resolve = _resolve,
        credentials: grpc.ChannelCredentials | None = None,
    ):
        self.destinations = destinations
        self._credentials = credentials
        self._resolve = resolve
        self._channels: dict[str, _Channel] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._swept_at = time.monotonic()

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for task in self._closing:
            task.cancel()
        await asyncio.gather(*(c.channel.close() for c in channels), *self._closing, return_exceptions=True)

    async def call(self, endpoint: str, event: pubsub_pb2.PubsubEvent, time_left: float) -> Outcome:
        """Send `event` to `endpoint`, waiting `time_left` seconds at most for a connection and the
        answer."""
        loop = asyncio.get_running_loop()
        ends = loop.time() + max(MIN_TIMEOUT, time_left)
        try:
            held = await self._channel(endpoint)
        except ValueError as exc:  # not host:port: a failure like an unreachable endpoint
            return Outcome(False, str(exc))
        except OSError as exc:
            return Outcome(False, f"cannot resolve {endpoint}: {exc}")
        if isinstance(held, Outcome):
            return held
        held.used_at = time.monotonic()
        if not await _connected(held.channel, ends - loop.time()):
            return Outcome(False, f"cannot connect to {endpoint}")
        try:
            await held.call(event, timeout=max(MIN_TIMEOUT, ends - loop.time()))
        except aio.AioRpcError as err:
            return outcome_of(err.code(), err.details() or "")
        return outcome_of(grpc.StatusCode.OK, "")

    async def _channel(self, endpoint: str) -> _Channel | Outcome:
        """The channel to `endpoint`, resolved and checked again when due; an Outcome when the
        destination policy refuses it. ValueError for an endpoint that is not host:port."""
        now = time.monotonic()
        held = self._channels.get(endpoint)
        if held is not None and now - held.resolved_at < RESOLVE_SECONDS:
            return held
        lock = self._locks.setdefault(endpoint, asyncio.Lock())
        async with lock:
            held = self._channels.get(endpoint)
            if held is not None and now - held.resolved_at < RESOLVE_SECONDS:
                return held
            host, port = endpoints.host_port(endpoint)
            literal = endpoints.host_address(host)
            addresses = [str(literal)] if literal is not None else await self._resolve(host, port)
            if not addresses:
                raise OSError("no address")
            for address in addresses:
                why = endpoints.refusal(ipaddress.ip_address(address), self.destinations)
                if why is not None:
                    self._drop(endpoint)
                    if literal is not None:
                        return Outcome(False, f"{address} is {why}", refused=True)
                    return Outcome(False, f"{host} resolves to {address}, which is {why}", refused=True)
            if held is not None and held.addresses == addresses:
                held.resolved_at = now
                return held
            self._drop(endpoint)
            self._sweep(now)
            target = channel_target(addresses, port)
            options: list[tuple[str, str]] = [("grpc.default_authority", endpoint)]
            if self._credentials is None:
                channel = aio.insecure_channel(target, options=options)
            else:  # dialled at the addresses checked above, verified as the host it names
                options.append(("grpc.ssl_target_name_override", host))
                channel = aio.secure_channel(target, self._credentials, options=options)
            call = channel.unary_unary(
                METHOD,
                request_serializer=pubsub_pb2.PubsubEvent.SerializeToString,
                response_deserializer=empty_pb2.Empty.FromString,
            )
            held = self._channels[endpoint] = _Channel(channel, call, addresses, now, now)
            return held

    def _drop(self, endpoint: str, grace: float = RETIRE_GRACE) -> None:
        """Close the channel to `endpoint`, if any, letting its calls finish for `grace` seconds."""
        held = self._channels.pop(endpoint, None)
        if held is not None:
            task = asyncio.get_running_loop().create_task(held.channel.close(grace))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _sweep(self, now: float) -> None:
        if now - self._swept_at < IDLE_SECONDS:
            return
        self._swept_at = now
        for endpoint, held in list(self._channels.items()):
            if now - held.used_at > IDLE_SECONDS:
                self._drop(endpoint)
                self._locks.pop(endpoint, None)


async def _connected(channel: aio.Channel, seconds: float) -> bool:
    """Whether `channel` is (or gets within `seconds`) connected; False at once when its last
    attempt failed (grpc retries in the background, with its own backoff)."""
    state = channel.get_state(try_to_connect=True)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, seconds)):
            while state not in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE):
                if state == grpc.ChannelConnectivity.SHUTDOWN:
                    return False
                await channel.wait_for_state_change(state)
                state = channel.get_state(try_to_connect=True)
    return state == grpc.ChannelConnectivity.READY


class GrpcPusher:
    """Pushes of one subscription to its PushEndpointService (http_push.Pusher)."""

    kind = "grpc"

    def __init__(
        self,
        res: StoredSubscription,
        client: GrpcPushClient,
        message_event: MessageEvent,
        marks: SchemaMarks | None = None,
    ) -> None:
        self.name = res.name
        self._client = client
        self._event = message_event
        self._marks = marks
        self.update(res)

    def update(self, res: StoredSubscription) -> None:
        self.address = res.meta.legacy_push_endpoint

    def endpoint(self) -> str:
        return self.address

    async def push(self, d: Delivery, time_left: float) -> Outcome:
        if not self.address:
            return Outcome(False, "push delivery is paused")
        message = to_message(d.record)
        if self._marks is not None:
            self._marks.apply(message.attributes)
        return await self._client.call(self.address, self._event(self.name, message), time_left)

    async def push_truncated(self, time_left: float) -> Outcome:
        """Push the subscription's truncation event (its ack id stays with the gateway)."""
        if not self.address:
            return Outcome(False, "push delivery is paused")
        event = self._event(self.name, _EMPTY_VIEW)  # the name spelled as the messages' events
        event.truncated = True  # clears the oneof's (empty) message
        return await self._client.call(self.address, event, time_left)

    async def send_deleted(self, time_left: float = DELETED_TIMEOUT) -> Outcome:
        """Tell the endpoint the subscription was deleted: one try, `time_left` seconds at most."""
        # Made by the same converter as the messages' events, so that its subscription name is
        # spelled as theirs; setting `deleted` clears the oneof's (empty) message.
        event = self._event(self.name, _EMPTY_VIEW)
        event.deleted = True
        return await self._client.call(self.address, event, time_left)


class TruncationEvents:
    """The truncation events of one gRPC push subscription, for its Dispatcher
    (dispatcher.Events): taken and settled through the core's TruncationService, pushed by the
    subscription's GrpcPusher."""

    def __init__(self, truncation: TruncationService, pusher: GrpcPusher) -> None:
        self._truncation = truncation
        self._pusher = pusher

    async def take(self, deadline_s: int) -> str | None:
        return await self._truncation.take_event(self._pusher.name, deadline_s)

    async def push(self, time_left: float) -> Outcome:
        return await self._pusher.push_truncated(time_left)

    async def settle(self, ack_id: str, ok: bool) -> None:
        await self._truncation.settle(self._pusher.name, [ack_id], None if ok else 0)
