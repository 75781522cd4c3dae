"""The gRPC servicers of the early API: tech.pubsub.PublisherService and SubscriberService,
served on the gateway's gRPC server beside v1 (gateway/server.py).

Each handler names its resources in v1's form, is admitted by the same CallGuard as the v1 RPC
it corresponds to (so IAM asks the same permissions: docs/legacy-api.md has the table), calls
LegacyService (gateway/legacy/service.py) and translates the answer. `_served` turns core
errors into gRPC statuses as v1's `_guard` does.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from google.protobuf.descriptor import FieldDescriptor, ServiceDescriptor
from google.protobuf.message import Message

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as v1
from gateway._pb.proto2 import empty_pb2
from gateway._pb.tech.pubsub import pubsub_pb2 as lpb
from gateway.core.runner import Delivery
from gateway.errors import FailedPrecondition, GatewayError, InvalidArgument, Unavailable
from gateway.legacy.events import message_event, truncated_event
from gateway.legacy.service import DEFAULT_MAX_EVENTS, MAX_EVENTS, LegacyService
from gateway.translate import records
from gateway.wire.access import CallGuard, Context
from gateway.wire.grpc_api import PULL_DEADLINE_MARGIN, Undecodable, abort, decoded, register

log = logging.getLogger(__name__)
_V1_PUB, _V1_SUB = "/google.pubsub.v1.Publisher/", "/google.pubsub.v1.Subscriber/"
PUBLISHER: ServiceDescriptor = lpb.DESCRIPTOR.services_by_name["PublisherService"]
SUBSCRIBER: ServiceDescriptor = lpb.DESCRIPTOR.services_by_name["SubscriberService"]
# Their full names, for the gRPC health service's per-service status (gateway/observe).
SERVICES = (PUBLISHER.full_name, SUBSCRIBER.full_name)
S = TypeVar("S", bound="_Servicer")
M = TypeVar("M", bound=Message)
R = TypeVar("R")


class _Servicer:
    def __init__(self, guard: CallGuard, service: LegacyService) -> None:
        self._guard = guard
        self._service = service
        self._names = service.names

    async def _admit(self, v1_method: str, request: Message, context: Context) -> None:
        """Admit the call as the v1 RPC it corresponds to, with the v1 names it touches."""
        await self._guard.admit(v1_method, request, context)


def text_checked(request: M, path: str = "") -> M:
    """`request`, or INVALID_ARGUMENT if a string field in it is not UTF-8. proto2 does not
    check strings when parsing (protobuf's Python runtime then hands out bytes), so the early
    API checks them here, as proto3 parsing does for v1."""
    for field, value in request.ListFields():
        where = f"{path}{field.name}"
        items = value if field.is_repeated else [value]
        if field.type == FieldDescriptor.TYPE_STRING:
            if any(isinstance(v, bytes) for v in items):
                raise InvalidArgument(f"Invalid PROTO payload received: {where} is not valid UTF-8.")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            for v in items:
                text_checked(v, where + ".")
    return request


def _served(
    fn: Callable[[S, M, Context], Awaitable[R]],
) -> Callable[[S, M | Undecodable, Context], Awaitable[R]]:
    @functools.wraps(fn)
    async def wrapper(self: S, request: M | Undecodable, context: Context) -> R:
        try:
            return await fn(self, text_checked(decoded(request)), context)
        except GatewayError as err:
            await abort(context, err)
        except Exception:
            log.exception("tech.pubsub %s failed", fn.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"{fn.__name__} failed inside the gateway")
        raise AssertionError("unreachable")  # context.abort raises

    return wrapper


class LegacyPublisher(_Servicer):
    @_served
    async def CreateTopic(self, request: lpb.Topic, context: Context) -> lpb.Topic:
        name = self._names.topic(request.name)
        await self._admit(_V1_PUB + "CreateTopic", v1.Topic(name=name), context)
        await self._service.create_topic(name)
        return lpb.Topic(name=self._names.show(name, request.name))

    @_served
    async def Publish(self, request: lpb.PublishRequest, context: Context) -> empty_pb2.Empty:
        topic = self._names.topic(request.topic)
        await self._admit(_V1_PUB + "Publish", v1.PublishRequest(topic=topic), context)
        await self._service.publish(topic, [request.message], "message")
        return empty_pb2.Empty()

    @_served
    async def PublishBatch(
        self, request: lpb.PublishBatchRequest, context: Context
    ) -> lpb.PublishBatchResponse:
        topic = self._names.topic(request.topic)
        await self._admit(_V1_PUB + "Publish", v1.PublishRequest(topic=topic), context)
        ids = await self._service.publish(topic, list(request.messages), "messages")
        return lpb.PublishBatchResponse(message_ids=ids)

    @_served
    async def GetTopic(self, request: lpb.GetTopicRequest, context: Context) -> lpb.Topic:
        topic = self._names.topic(request.topic)
        await self._admit(_V1_PUB + "GetTopic", v1.GetTopicRequest(topic=topic), context)
        res = self._service.get_topic(topic)
        return lpb.Topic(name=self._names.show(res.name, request.topic))

    @_served
    async def ListTopics(self, request: lpb.ListTopicsRequest, context: Context) -> lpb.ListTopicsResponse:
        await self._admit(_V1_PUB + "ListTopics", v1.ListTopicsRequest(project=self._names.parent), context)
        found, token = self._service.list_topics(request.query, request.max_results, request.page_token)
        out = lpb.ListTopicsResponse(topic=[lpb.Topic(name=self._names.show(n)) for n in found])
        if token:
            out.next_page_token = token
        return out

    @_served
    async def DeleteTopic(self, request: lpb.DeleteTopicRequest, context: Context) -> empty_pb2.Empty:
        topic = self._names.topic(request.topic)
        await self._admit(_V1_PUB + "DeleteTopic", v1.DeleteTopicRequest(topic=topic), context)
        await self._service.delete_topic(topic)
        return empty_pb2.Empty()


class LegacySubscriber(_Servicer):
    @_served
    async def CreateSubscription(self, request: lpb.Subscription, context: Context) -> lpb.Subscription:
        name = self._service.subscription_name(request)
        topic = self._names.topic(request.topic)
        await self._admit(_V1_SUB + "CreateSubscription", v1.Subscription(name=name, topic=topic), context)
        res = await self._service.create_subscription(name, request)
        return self._service.view(res, request.name, request.topic)

    @_served
    async def GetSubscription(
        self, request: lpb.GetSubscriptionRequest, context: Context
    ) -> lpb.Subscription:
        name = self._names.subscription(request.subscription)
        await self._admit(_V1_SUB + "GetSubscription", v1.GetSubscriptionRequest(subscription=name), context)
        return self._service.view(self._service.get_subscription(name), request.subscription)

    @_served
    async def ListSubscriptions(
        self, request: lpb.ListSubscriptionsRequest, context: Context
    ) -> lpb.ListSubscriptionsResponse:
        project = self._names.parent
        await self._admit(
            _V1_SUB + "ListSubscriptions", v1.ListSubscriptionsRequest(project=project), context
        )
        found, token = self._service.list_subscriptions(
            request.query, request.max_results, request.page_token
        )
        out = lpb.ListSubscriptionsResponse(subscription=[self._service.view(r) for r in found])
        if token:
            out.next_page_token = token
        return out

    @_served
    async def DeleteSubscription(
        self, request: lpb.DeleteSubscriptionRequest, context: Context
    ) -> empty_pb2.Empty:
        name = self._names.subscription(request.subscription)
        await self._admit(
            _V1_SUB + "DeleteSubscription", v1.DeleteSubscriptionRequest(subscription=name), context
        )
        await self._service.delete_subscription(name)
        return empty_pb2.Empty()

    @_served
    async def TruncateSubscription(
        self, request: lpb.TruncateSubscriptionRequest, context: Context
    ) -> empty_pb2.Empty:
        name = self._names.subscription(request.subscription)
        await self._admit(_V1_SUB + "Seek", v1.SeekRequest(subscription=name), context)
        await self._service.truncate(name)
        return empty_pb2.Empty()

    @_served
    async def ModifyPushConfig(
        self, request: lpb.ModifyPushConfigRequest, context: Context
    ) -> empty_pb2.Empty:
        name = self._names.subscription(request.subscription)
        await self._admit(
            _V1_SUB + "ModifyPushConfig", v1.ModifyPushConfigRequest(subscription=name), context
        )
        await self._service.modify_push_config(name, request.push_config)
        return empty_pb2.Empty()

    async def _pull(
        self, subscription: str, return_immediately: bool, max_events: int, context: Context
    ) -> list[lpb.PullResponse]:
        """A pending truncation event first (docs/truncation.md), then up to `max_events` (<= 0:
        the default) messages less the event. When nothing came, an event raised meanwhile (the
        truncation policy dropped what was waited for) is delivered after all."""
        name = self._names.subscription(subscription)
        await self._admit(_V1_SUB + "Pull", v1.PullRequest(subscription=name), context)
        shown = self._names.show(name, subscription)
        out = await self._event(name, shown)
        max_events = min(max_events, MAX_EVENTS) if max_events > 0 else DEFAULT_MAX_EVENTS
        if max_events <= len(out):
            return out
        remaining = context.time_remaining()
        wait = 0.0 if return_immediately else 3600.0
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - PULL_DEADLINE_MARGIN))
        got = await self._service.pull(name, max_events - len(out), wait)
        out += [self._response(shown, d) for d in got]
        return out or await self._event(name, shown)

    async def _event(self, name: str, shown: str) -> list[lpb.PullResponse]:
        ack_id = await self._service.take_event(name)
        return (
            [] if ack_id is None else [lpb.PullResponse(ack_id=ack_id, pubsub_event=truncated_event(shown))]
        )

    def _response(self, shown: str, d: Delivery) -> lpb.PullResponse:
        return lpb.PullResponse(
            ack_id=d.ack_id, pubsub_event=message_event(shown, records.to_message(d.record))
        )

    @_served
    async def Pull(self, request: lpb.PullRequest, context: Context) -> lpb.PullResponse:
        """One event: a truncation event, else a message. Nothing at once with
        return_immediately: FAILED_PRECONDITION; nothing within the gateway's pull wait
        (--pull-max-wait-seconds): UNAVAILABLE, pull again."""
        got = await self._pull(request.subscription, request.return_immediately, 1, context)
        if not got:
            shown = self._names.show(self._names.subscription(request.subscription))
            if request.return_immediately:
                raise FailedPrecondition(f"No message is available in {shown} now.")
            raise Unavailable(f"No message arrived in {shown} in time; pull again.")
        return got[0]

    @_served
    async def PullBatch(self, request: lpb.PullBatchRequest, context: Context) -> lpb.PullBatchResponse:
        """A truncation event first, if one is pending, then messages: `max_events` in all."""
        got = await self._pull(request.subscription, request.return_immediately, request.max_events, context)
        return lpb.PullBatchResponse(pull_responses=got)

    @_served
    async def ModifyAckDeadline(
        self, request: lpb.ModifyAckDeadlineRequest, context: Context
    ) -> empty_pb2.Empty:
        name = self._names.subscription(request.subscription)
        await self._admit(
            _V1_SUB + "ModifyAckDeadline", v1.ModifyAckDeadlineRequest(subscription=name), context
        )
        if not request.ack_id:
            raise InvalidArgument("No ack ID given (ack_id).")
        await self._service.modify_ack_deadline(name, [request.ack_id], request.ack_deadline_seconds)
        return empty_pb2.Empty()

    @_served
    async def Acknowledge(self, request: lpb.AcknowledgeRequest, context: Context) -> empty_pb2.Empty:
        name = self._names.subscription(request.subscription)
        await self._admit(_V1_SUB + "Acknowledge", v1.AcknowledgeRequest(subscription=name), context)
        await self._service.acknowledge(name, list(request.ack_id))
        return empty_pb2.Empty()

    @_served
    async def Nack(self, request: lpb.NackRequest, context: Context) -> empty_pb2.Empty:
        """A deadline of 0, as v1's nack is."""
        name = self._names.subscription(request.subscription)
        await self._admit(
            _V1_SUB + "ModifyAckDeadline", v1.ModifyAckDeadlineRequest(subscription=name), context
        )
        await self._service.modify_ack_deadline(name, list(request.ack_id), 0)
        return empty_pb2.Empty()


def add_to_server(server: grpc.aio.Server, guard: CallGuard, service: LegacyService) -> None:
    """Serve PublisherService and SubscriberService of tech.pubsub."""
    register(server, PUBLISHER, LegacyPublisher(guard, service))
    register(server, SUBSCRIBER, LegacySubscriber(guard, service))
