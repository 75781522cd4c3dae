"""The gRPC wire: the Publisher, Subscriber and IAMPolicy servicers, and the registration of
every served service (SchemaService's servicer is in grpc_schemas.py).

Handlers only translate between protos and core calls. `_guard` runs each: it admits the call
(authentication and IAM, wire/access.py) and turns core errors into gRPC statuses, the one
place that does so.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import grpc
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2

from gateway._pb import _pool
from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway._pb.google.pubsub.v1 import pubsub_pb2_grpc as pb_grpc
from gateway._pb.google.pubsub.v1 import schema_pb2
from gateway.core import exactly_once
from gateway.core.access import AccessService
from gateway.core.delivery import DeliveryService
from gateway.core.snapshots import SnapshotService, check_seek_target
from gateway.core.streams import Confirmation, StreamSession, check_modacks
from gateway.core.subscriptions import SubscriptionService
from gateway.core.topic_schemas import SchemaMarks
from gateway.core.topics import TopicService
from gateway.errors import AckIdsFailed, GatewayError, InvalidArgument
from gateway.translate import limits
from gateway.translate.limits import outgoing_of
from gateway.wire import received
from gateway.wire.access import CALLER, FORWARDED, CallGuard, Context
from gateway.wire.peers import DETAILS_KEY

# Empty of the gateway's own descriptor pool: what the RPCs that answer nothing return.
_EMPTY = _pool.message_class("google.protobuf.Empty")

log = logging.getLogger(__name__)
S = TypeVar("S", bound="Servicer")
M = TypeVar("M", bound=Message)
R = TypeVar("R")
Handler = Callable[[S, M, Context], Awaitable[R]]  # a servicer method: (self, request, context)
PULL_DEADLINE_MARGIN = 0.5


def status_of(err: GatewayError) -> grpc.StatusCode:
    return grpc.StatusCode[err.code.name]


def details_of(err: GatewayError) -> tuple[tuple[str, bytes], ...]:
    """`grpc-status-details-bin`: a google.rpc.Status on every error (its code and message as the
    call's), with the per-id reasons of exactly-once acks as an ErrorInfo. Without one,
    google-cloud-pubsub takes any failed ack or modack it does not retry (a FAILED_PRECONDITION,
    a NOT_FOUND) as a success on an exactly-once subscription (docs/faults.md)."""
    status = status_pb2.Status(code=err.code.number, message=err.message)
    if isinstance(err, AckIdsFailed):
        info = error_details_pb2.ErrorInfo(
            reason="EXACTLY_ONCE_ACKID_FAILURE", domain="pubsub.googleapis.com", metadata=err.failures
        )
        status.details.add().Pack(info)
    return ((DETAILS_KEY, status.SerializeToString()),)


async def abort(context: Context, err: GatewayError) -> None:
    await context.abort(status_of(err), err.message, trailing_metadata=details_of(err))


def _forwarded(context: Context) -> bool:
    """Whether the call came forwarded by another gateway process (its mark was verified when
    the call was admitted: a call with a mark that is not valid never gets this far)."""
    return any(k == FORWARDED for k, _ in context.invocation_metadata() or ())


class Undecodable:
    """What a request that is not a valid protobuf of its method decodes to: the handler (`_guard`,
    or a stream's reader) answers INVALID_ARGUMENT with `message`. The deserializer itself cannot
    choose a status: grpc answers UNKNOWN, with a traceback at ERROR, for anything it raises."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def decoder(cls: type[Message]) -> Callable[[bytes], Message | Undecodable]:
    """The request deserializer of one method: the message, or `Undecodable` for bytes that are
    not one (corrupt wire format, invalid UTF-8 in a string field, nesting too deep)."""
    parse = cls.FromString

    def decode(data: bytes) -> Message | Undecodable:
        try:
            return parse(data)
        except DecodeError as exc:
            reason = str(exc).rpartition(": ")[2] or "not a valid message"
            return Undecodable(
                f"Invalid PROTO payload received: the request is not a valid "
                f"{cls.DESCRIPTOR.full_name} ({reason})."
            )

    return decode


def decoded(request: M | Undecodable) -> M:
    """`request`, or InvalidArgument if it could not be decoded."""
    if isinstance(request, Undecodable):
        raise InvalidArgument(request.message)
    return request


async def decoded_stream(requests: AsyncIterator[M | Undecodable]) -> AsyncIterator[M]:
    async for request in requests:
        yield decoded(request)


class Servicer:
    """What `_guard` needs of a servicer: its service's full name and the call guard."""

    SERVICE = ""

    def __init__(self, guard: CallGuard) -> None:
        self._guard = guard


def _guard(fn: Handler[S, M, R]) -> Callable[[S, M | Undecodable, Context], Awaitable[R]]:
    name = fn.__name__

    @functools.wraps(fn)
    async def wrapper(self: S, request: M | Undecodable, context: Context) -> R:
        try:
            request = decoded(request)
            await self._guard.admit(f"/{self.SERVICE}/{name}", request, context)
            return await fn(self, request, context)
        except GatewayError as err:
            await abort(context, err)
        except Exception:
            log.exception("%s failed", fn.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"{fn.__name__} failed inside the gateway")
        raise AssertionError("unreachable")  # context.abort raises

    return wrapper


def _mask(
    request: pb.UpdateTopicRequest | pb.UpdateSubscriptionRequest | pb.UpdateSnapshotRequest,
) -> list[str]:
    return list(request.update_mask.paths)


class Publisher(Servicer, pb_grpc.PublisherServicer):
    SERVICE = "google.pubsub.v1.Publisher"

    def __init__(
        self,
        guard: CallGuard,
        topics: TopicService,
        subscriptions: SubscriptionService,
        snapshots: SnapshotService,
    ) -> None:
        super().__init__(guard)
        self._topics = topics
        self._subs = subscriptions
        self._snapshots = snapshots

    @_guard
    async def CreateTopic(self, request: pb.Topic, context: Context) -> pb.Topic:
        return await self._topics.create(request)

    @_guard
    async def UpdateTopic(self, request: pb.UpdateTopicRequest, context: Context) -> pb.Topic:
        return await self._topics.update(request.topic, _mask(request))

    @_guard
    async def Publish(self, request: pb.PublishRequest, context: Context) -> pb.PublishResponse:
        messages = outgoing_of(request.messages)
        ids = await self._topics.publish(request.topic, messages)
        return pb.PublishResponse(message_ids=ids)

    @_guard
    async def GetTopic(self, request: pb.GetTopicRequest, context: Context) -> pb.Topic:
        return self._topics.get(request.topic).proto

    @_guard
    async def ListTopics(self, request: pb.ListTopicsRequest, context: Context) -> pb.ListTopicsResponse:
        topics, token = self._topics.list_page(request.project, request.page_size, request.page_token)
        return pb.ListTopicsResponse(topics=topics, next_page_token=token)

    @_guard
    async def ListTopicSubscriptions(
        self, request: pb.ListTopicSubscriptionsRequest, context: Context
    ) -> pb.ListTopicSubscriptionsResponse:
        subs, token = self._topics.subscriptions(request.topic, request.page_size, request.page_token)
        return pb.ListTopicSubscriptionsResponse(subscriptions=subs, next_page_token=token)

    @_guard
    async def ListTopicSnapshots(
        self, request: pb.ListTopicSnapshotsRequest, context: Context
    ) -> pb.ListTopicSnapshotsResponse:
        self._topics.get(request.topic)
        snaps, token = self._snapshots.for_topic(request.topic, request.page_size, request.page_token)
        return pb.ListTopicSnapshotsResponse(snapshots=snaps, next_page_token=token)

    @_guard
    async def DeleteTopic(self, request: pb.DeleteTopicRequest, context: Context) -> Message:
        await self._topics.delete(request.topic)
        return _EMPTY()

    @_guard
    async def DetachSubscription(
        self, request: pb.DetachSubscriptionRequest, context: Context
    ) -> pb.DetachSubscriptionResponse:
        await self._subs.detach(request.subscription)
        return pb.DetachSubscriptionResponse()


class Subscriber(Servicer, pb_grpc.SubscriberServicer):
    SERVICE = "google.pubsub.v1.Subscriber"

    def __init__(
        self,
        guard: CallGuard,
        subscriptions: SubscriptionService,
        delivery: DeliveryService,
        snapshots: SnapshotService,
        marks: SchemaMarks | None = None,
    ) -> None:
        super().__init__(guard)
        self._subs = subscriptions
        self._delivery = delivery
        self._snapshots = snapshots
        self._marks = marks

    @_guard
    async def CreateSubscription(self, request: pb.Subscription, context: Context) -> pb.Subscription:
        return await self._subs.create(request)

    @_guard
    async def GetSubscription(self, request: pb.GetSubscriptionRequest, context: Context) -> pb.Subscription:
        return self._subs.get(request.subscription).proto

    @_guard
    async def UpdateSubscription(
        self, request: pb.UpdateSubscriptionRequest, context: Context
    ) -> pb.Subscription:
        return await self._subs.update(request.subscription, _mask(request))

    @_guard
    async def ListSubscriptions(
        self, request: pb.ListSubscriptionsRequest, context: Context
    ) -> pb.ListSubscriptionsResponse:
        subs, token = self._subs.list_page(request.project, request.page_size, request.page_token)
        return pb.ListSubscriptionsResponse(subscriptions=subs, next_page_token=token)

    @_guard
    async def DeleteSubscription(self, request: pb.DeleteSubscriptionRequest, context: Context) -> Message:
        await self._subs.delete(request.subscription)
        return _EMPTY()

    @_guard
    async def ModifyAckDeadline(self, request: pb.ModifyAckDeadlineRequest, context: Context) -> Message:
        await self._delivery.modify_ack_deadline(
            request.subscription,
            list(request.ack_ids),
            request.ack_deadline_seconds,
            forwarded=_forwarded(context),
        )
        return _EMPTY()

    @_guard
    async def Acknowledge(self, request: pb.AcknowledgeRequest, context: Context) -> Message:
        await self._delivery.acknowledge(
            request.subscription, list(request.ack_ids), forwarded=_forwarded(context)
        )
        return _EMPTY()

    @_guard
    async def Pull(self, request: pb.PullRequest, context: Context) -> received.Encoded:
        remaining = context.time_remaining()
        wait = 0.0 if request.return_immediately else 3600.0
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - PULL_DEADLINE_MARGIN))
        got = await self._delivery.pull(request.subscription, request.max_messages, wait)
        return received.Encoded(pb.PullResponse(), received.encode(got, self._marks))

    async def StreamingPull(
        self, request_iterator: AsyncIterator[pb.StreamingPullRequest | Undecodable], context: Context
    ) -> AsyncIterator[received.Encoded]:
        requests = decoded_stream(aiter(request_iterator))
        try:
            first = await anext(requests, None)
            if first is None:
                return
            if not first.subscription:
                raise InvalidArgument("subscription is required in the first request.")
            await self._guard.admit(f"/{self.SERVICE}/StreamingPull", first, context)
            session = await self._delivery.open_stream(
                first.subscription,
                first.stream_ack_deadline_seconds,
                first.max_outstanding_messages,
                first.max_outstanding_bytes,
                client=True,
            )
            reader = asyncio.create_task(self._read_stream(session, first, requests))
            try:
                async for out in session.batches():
                    eod, ordered = self._delivery.properties(session.res.name)
                    response = pb.StreamingPullResponse(
                        subscription_properties=pb.StreamingPullResponse.SubscriptionProperties(
                            exactly_once_delivery_enabled=eod,
                            message_ordering_enabled=ordered,
                        ),
                    )
                    _confirm(response, out.confirmations)
                    yield received.Encoded(response, received.encode(out.deliveries, self._marks))
            finally:
                reader.cancel()
                session.release()
        except GatewayError as err:
            await abort(context, err)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("StreamingPull failed")
            await context.abort(grpc.StatusCode.INTERNAL, "StreamingPull failed inside the gateway")

    async def _read_stream(
        self,
        session: StreamSession,
        first: pb.StreamingPullRequest,
        requests: AsyncIterator[pb.StreamingPullRequest],
    ) -> None:
        """Apply the stream's acks, modacks and heartbeats; a bad request ends the stream."""
        sub = session.res.name
        try:
            await self._apply_stream_request(session, sub, first)
            async for req in requests:
                if req.subscription:
                    raise InvalidArgument("subscription may be set only in the first request.")
                if req.stream_ack_deadline_seconds:
                    session.set_deadline(req.stream_ack_deadline_seconds)
                await self._apply_stream_request(session, sub, req)
            session.close("The client closed its side of the stream.")
        except GatewayError as err:
            session.close(err.message, err)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("reading a StreamingPull request failed")
            session.close(str(exc))

    async def _apply_stream_request(
        self, session: StreamSession, sub: str, req: pb.StreamingPullRequest
    ) -> None:
        modack_ids, modack_secs = list(req.modify_deadline_ack_ids), list(req.modify_deadline_seconds)
        check_modacks(modack_ids, modack_secs)
        if req.ack_ids:
            ids = list(req.ack_ids)
            failures = await _outcome(self._delivery.acknowledge(sub, ids))
            session.confirm("ack", ids, failures)
        by_seconds: dict[int, list[str]] = {}
        for ack_id, seconds in zip(modack_ids, modack_secs, strict=True):
            by_seconds.setdefault(seconds, []).append(ack_id)
        for seconds, ids in by_seconds.items():
            failures = await _outcome(self._delivery.modify_ack_deadline(sub, ids, seconds))
            session.confirm("modack", ids, failures)
        if not req.ack_ids and not modack_ids:
            session.ping()

    @_guard
    async def ModifyPushConfig(self, request: pb.ModifyPushConfigRequest, context: Context) -> Message:
        await self._subs.modify_push_config(request.subscription, request.push_config)
        return _EMPTY()

    @_guard
    async def GetSnapshot(self, request: pb.GetSnapshotRequest, context: Context) -> pb.Snapshot:
        return self._snapshots.get(request.snapshot).proto

    @_guard
    async def ListSnapshots(
        self, request: pb.ListSnapshotsRequest, context: Context
    ) -> pb.ListSnapshotsResponse:
        snaps, token = self._snapshots.list_page(request.project, request.page_size, request.page_token)
        return pb.ListSnapshotsResponse(snapshots=snaps, next_page_token=token)

    @_guard
    async def CreateSnapshot(self, request: pb.CreateSnapshotRequest, context: Context) -> pb.Snapshot:
        return await self._snapshots.create(request.name, request.subscription, request.labels)

    @_guard
    async def UpdateSnapshot(self, request: pb.UpdateSnapshotRequest, context: Context) -> pb.Snapshot:
        return await self._snapshots.update(request.snapshot, _mask(request))

    @_guard
    async def DeleteSnapshot(self, request: pb.DeleteSnapshotRequest, context: Context) -> Message:
        await self._snapshots.delete(request.snapshot)
        return _EMPTY()

    @_guard
    async def Seek(self, request: pb.SeekRequest, context: Context) -> pb.SeekResponse:
        check_seek_target(request)
        if request.snapshot:
            await self._snapshots.seek_to_snapshot(request.subscription, request.snapshot)
        else:
            when = limits.seek_time_ms(request.time)
            await self._snapshots.seek_to_time(request.subscription, when)
        return pb.SeekResponse()


class IamPolicy(Servicer):
    """google.iam.v1.IAMPolicy for topics, subscriptions, snapshots and schemas: served beside
    Publisher and Subscriber, as Google serves it, so the official clients' get_iam_policy and
    the like work."""

    SERVICE = "google.iam.v1.IAMPolicy"

    def __init__(self, guard: CallGuard, access: AccessService) -> None:
        super().__init__(guard)
        self._access = access

    @_guard
    async def GetIamPolicy(
        self, request: iam_policy_pb2.GetIamPolicyRequest, context: Context
    ) -> policy_pb2.Policy:
        return self._access.get_policy(request)

    @_guard
    async def SetIamPolicy(
        self, request: iam_policy_pb2.SetIamPolicyRequest, context: Context
    ) -> policy_pb2.Policy:
        return await self._access.set_policy(request)

    @_guard
    async def TestIamPermissions(
        self, request: iam_policy_pb2.TestIamPermissionsRequest, context: Context
    ) -> iam_policy_pb2.TestIamPermissionsResponse:
        held = self._access.test_permissions(
            request.resource, list(request.permissions), CALLER.get() if self._guard.enforcing else None
        )
        return iam_policy_pb2.TestIamPermissionsResponse(permissions=held)


async def _outcome(call: Awaitable[None]) -> dict[str, str]:
    """Per-id failures of an exactly-once ack on a stream (the stream itself goes on)."""
    try:
        await call
    except AckIdsFailed as err:
        return err.failures
    return {}


def _confirm(response: pb.StreamingPullResponse, confirmations: list[Confirmation]) -> None:
    for kind, ids, failures in confirmations:
        target = (
            response.acknowledge_confirmation if kind == "ack" else response.modify_ack_deadline_confirmation
        )
        for ack_id in ids:
            reason = failures.get(ack_id)
            if reason is None or reason == exactly_once.SUCCEEDED_IN_FAILED_CALL:
                target.ack_ids.append(ack_id)
            elif reason.startswith("TRANSIENT_"):
                target.temporary_failed_ack_ids.append(ack_id)
            else:
                target.invalid_ack_ids.append(ack_id)


_KINDS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def _serialize(response: Message | received.Encoded) -> bytes:
    """A response's bytes; a Pull or StreamingPull response is `received.Encoded`."""
    return response.SerializeToString()


def register(server: grpc.aio.Server, desc: ServiceDescriptor, servicer: object) -> None:
    """What the generated `add_*Servicer_to_server` does, from the service's descriptor, with
    request deserializers that hand undecodable requests to the handler (`decoder`)."""
    handlers: dict[str, grpc.RpcMethodHandler[Message | Undecodable, Message | received.Encoded]] = {}
    for method in desc.methods:
        request = message_factory.GetMessageClass(method.input_type)
        kind = _KINDS[method.client_streaming, method.server_streaming]
        handlers[method.name] = kind(
            getattr(servicer, method.name),
            request_deserializer=decoder(request),
            response_serializer=_serialize,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(desc.full_name, handlers),))
    server.add_registered_method_handlers(desc.full_name, handlers)


IAM_SERVICE: ServiceDescriptor = iam_policy_pb2.DESCRIPTOR.services_by_name["IAMPolicy"]
SCHEMA_SERVICE: ServiceDescriptor = schema_pb2.DESCRIPTOR.services_by_name["SchemaService"]


def add_to_server(
    server: grpc.aio.Server, publisher: Publisher, subscriber: Subscriber, iam: IamPolicy, schemas: Servicer
) -> None:
    """Serve the four services; `schemas` is grpc_schemas.Schemas (which imports this module)."""
    register(server, pb.DESCRIPTOR.services_by_name["Publisher"], publisher)
    register(server, pb.DESCRIPTOR.services_by_name["Subscriber"], subscriber)
    register(server, IAM_SERVICE, iam)
    register(server, SCHEMA_SERVICE, schemas)
