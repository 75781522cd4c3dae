"""The gRPC wire: Publisher, Subscriber (and SchemaService, unimplemented) servicers.

Handlers only translate between protos and core calls; core errors become gRPC statuses in
`_guard`, the one place that does so.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import empty_pb2

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway._pb.google.pubsub.v1 import pubsub_pb2_grpc as pb_grpc
from gateway.core.delivery import Delivery, DeliveryService
from gateway.core.subscriptions import SubscriptionService
from gateway.core.topics import TopicService
from gateway.errors import GatewayError, Unimplemented
from gateway.translate import records
from gateway.translate.limits import OutgoingMessage

log = logging.getLogger(__name__)
R = TypeVar("R")
Context = grpc.aio.ServicerContext[Any, Any]
Handler = Callable[[Any, Any, Context], Awaitable[R]]
PULL_DEADLINE_MARGIN = 0.5


def status_of(err: GatewayError) -> grpc.StatusCode:
    return grpc.StatusCode[err.code.name]


def _guard(fn: Handler[R]) -> Handler[R]:
    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: Context) -> R:
        try:
            return await fn(self, request, context)
        except GatewayError as err:
            await context.abort(status_of(err), err.message)
        except Exception:
            log.exception("%s failed", fn.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"{fn.__name__} failed inside the gateway")
        raise AssertionError("unreachable")  # context.abort raises

    return wrapper


def received_message(d: Delivery) -> Any:
    view = records.to_message(d.record)
    msg = pb.PubsubMessage(
        data=view.data, attributes=view.attributes, message_id=view.message_id,
        ordering_key=view.ordering_key,
    )
    msg.publish_time.FromMilliseconds(view.publish_time_ms)
    return pb.ReceivedMessage(ack_id=d.ack_id, message=msg, delivery_attempt=d.attempt)


def _mask(request: Any) -> list[str]:
    return list(request.update_mask.paths)


class Publisher(pb_grpc.PublisherServicer):
    def __init__(self, topics: TopicService, subscriptions: SubscriptionService) -> None:
        self._topics = topics
        self._subs = subscriptions

    @_guard
    async def CreateTopic(self, request: Any, context: Any) -> Any:
        return await self._topics.create(request)

    @_guard
    async def UpdateTopic(self, request: Any, context: Any) -> Any:
        return await self._topics.update(request.topic, _mask(request))

    @_guard
    async def Publish(self, request: Any, context: Any) -> Any:
        messages = [OutgoingMessage(m.data, m.attributes, m.ordering_key) for m in request.messages]
        ids = await self._topics.publish(request.topic, messages)
        return pb.PublishResponse(message_ids=ids)

    @_guard
    async def GetTopic(self, request: Any, context: Any) -> Any:
        return self._topics.get(request.topic).proto

    @_guard
    async def ListTopics(self, request: Any, context: Any) -> Any:
        topics, token = self._topics.list_page(request.project, request.page_size, request.page_token)
        return pb.ListTopicsResponse(topics=topics, next_page_token=token)

    @_guard
    async def ListTopicSubscriptions(self, request: Any, context: Any) -> Any:
        subs, token = self._topics.subscriptions(request.topic, request.page_size, request.page_token)
        return pb.ListTopicSubscriptionsResponse(subscriptions=subs, next_page_token=token)

    @_guard
    async def ListTopicSnapshots(self, request: Any, context: Any) -> Any:
        self._topics.get(request.topic)
        return pb.ListTopicSnapshotsResponse()

    @_guard
    async def DeleteTopic(self, request: Any, context: Any) -> Any:
        await self._topics.delete(request.topic)
        return empty_pb2.Empty()

    @_guard
    async def DetachSubscription(self, request: Any, context: Any) -> Any:
        await self._subs.detach(request.subscription)
        return pb.DetachSubscriptionResponse()


class Subscriber(pb_grpc.SubscriberServicer):
    def __init__(self, subscriptions: SubscriptionService, delivery: DeliveryService) -> None:
        self._subs = subscriptions
        self._delivery = delivery

    @_guard
    async def CreateSubscription(self, request: Any, context: Any) -> Any:
        return await self._subs.create(request)

    @_guard
    async def GetSubscription(self, request: Any, context: Any) -> Any:
        return self._subs.get(request.subscription).proto

    @_guard
    async def UpdateSubscription(self, request: Any, context: Any) -> Any:
        return await self._subs.update(request.subscription, _mask(request))

    @_guard
    async def ListSubscriptions(self, request: Any, context: Any) -> Any:
        subs, token = self._subs.list_page(request.project, request.page_size, request.page_token)
        return pb.ListSubscriptionsResponse(subscriptions=subs, next_page_token=token)

    @_guard
    async def DeleteSubscription(self, request: Any, context: Any) -> Any:
        await self._subs.delete(request.subscription)
        return empty_pb2.Empty()

    @_guard
    async def ModifyAckDeadline(self, request: Any, context: Any) -> Any:
        await self._delivery.modify_ack_deadline(
            request.subscription, list(request.ack_ids), request.ack_deadline_seconds
        )
        return empty_pb2.Empty()

    @_guard
    async def Acknowledge(self, request: Any, context: Any) -> Any:
        await self._delivery.acknowledge(request.subscription, list(request.ack_ids))
        return empty_pb2.Empty()

    @_guard
    async def Pull(self, request: Any, context: Any) -> Any:
        remaining = context.time_remaining()
        wait = 0.0 if request.return_immediately else 3600.0
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - PULL_DEADLINE_MARGIN))
        got = await self._delivery.pull(request.subscription, request.max_messages, wait)
        return pb.PullResponse(received_messages=[received_message(d) for d in got])

    @_guard
    async def ModifyPushConfig(self, request: Any, context: Any) -> Any:
        await self._subs.modify_push_config(request.subscription, request.push_config)
        return empty_pb2.Empty()

    @_guard
    async def GetSnapshot(self, request: Any, context: Any) -> Any:
        raise Unimplemented("Snapshots are not implemented yet.")

    @_guard
    async def ListSnapshots(self, request: Any, context: Any) -> Any:
        raise Unimplemented("Snapshots are not implemented yet.")

    @_guard
    async def CreateSnapshot(self, request: Any, context: Any) -> Any:
        raise Unimplemented("Snapshots are not implemented yet.")

    @_guard
    async def UpdateSnapshot(self, request: Any, context: Any) -> Any:
        raise Unimplemented("Snapshots are not implemented yet.")

    @_guard
    async def DeleteSnapshot(self, request: Any, context: Any) -> Any:
        raise Unimplemented("Snapshots are not implemented yet.")

    @_guard
    async def Seek(self, request: Any, context: Any) -> Any:
        raise Unimplemented("Seek is not implemented yet.")


def add_to_server(server: grpc.aio.Server, publisher: Publisher, subscriber: Subscriber) -> None:
    pb_grpc.add_PublisherServicer_to_server(publisher, server)
    pb_grpc.add_SubscriberServicer_to_server(subscriber, server)
