# mypy: disable-error-code="type-arg"
from gateway._pb.proto2 import empty_pb2 as _empty_pb2
from gateway._pb.tech.label import label_pb2 as _label_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Topic(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PubsubMessage(_message.Message):
    __slots__ = ("data", "label", "message_id")
    DATA_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    label: _containers.RepeatedCompositeFieldContainer[_label_pb2.Label]
    message_id: str
    def __init__(self, data: _Optional[bytes] = ..., label: _Optional[_Iterable[_Union[_label_pb2.Label, _Mapping]]] = ..., message_id: _Optional[str] = ...) -> None: ...

class GetTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("topic", "message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message: PubsubMessage
    def __init__(self, topic: _Optional[str] = ..., message: _Optional[_Union[PubsubMessage, _Mapping]] = ...) -> None: ...

class PublishBatchRequest(_message.Message):
    __slots__ = ("topic", "messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    messages: _containers.RepeatedCompositeFieldContainer[PubsubMessage]
    def __init__(self, topic: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[PubsubMessage, _Mapping]]] = ...) -> None: ...

class PublishBatchResponse(_message.Message):
    __slots__ = ("message_ids",)
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("query", "max_results", "page_token")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    query: str
    max_results: int
    page_token: str
    def __init__(self, query: _Optional[str] = ..., max_results: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topic", "next_page_token")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    topic: _containers.RepeatedCompositeFieldContainer[Topic]
    next_page_token: str
    def __init__(self, topic: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("name", "topic", "query", "truncation_policy", "push_config", "ack_deadline_seconds", "garbage_collect_seconds")
    class TruncationPolicy(_message.Message):
        __slots__ = ("max_bytes", "max_age_seconds")
        MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
        MAX_AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
        max_bytes: int
        max_age_seconds: int
        def __init__(self, max_bytes: _Optional[int] = ..., max_age_seconds: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_POLICY_FIELD_NUMBER: _ClassVar[int]
    PUSH_CONFIG_FIELD_NUMBER: _ClassVar[int]
    ACK_DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GARBAGE_COLLECT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic: str
    query: str
    truncation_policy: Subscription.TruncationPolicy
    push_config: PushConfig
    ack_deadline_seconds: int
    garbage_collect_seconds: int
    def __init__(self, name: _Optional[str] = ..., topic: _Optional[str] = ..., query: _Optional[str] = ..., truncation_policy: _Optional[_Union[Subscription.TruncationPolicy, _Mapping]] = ..., push_config: _Optional[_Union[PushConfig, _Mapping]] = ..., ack_deadline_seconds: _Optional[int] = ..., garbage_collect_seconds: _Optional[int] = ...) -> None: ...

class PushConfig(_message.Message):
    __slots__ = ("push_endpoint",)
    PUSH_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    push_endpoint: str
    def __init__(self, push_endpoint: _Optional[str] = ...) -> None: ...

class PubsubEvent(_message.Message):
    __slots__ = ("subscription", "message", "truncated", "deleted")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    message: PubsubMessage
    truncated: bool
    deleted: bool
    def __init__(self, subscription: _Optional[str] = ..., message: _Optional[_Union[PubsubMessage, _Mapping]] = ..., truncated: _Optional[bool] = ..., deleted: _Optional[bool] = ...) -> None: ...

class GetSubscriptionRequest(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    def __init__(self, subscription: _Optional[str] = ...) -> None: ...

class ListSubscriptionsRequest(_message.Message):
    __slots__ = ("query", "max_results", "page_token")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    query: str
    max_results: int
    page_token: str
    def __init__(self, query: _Optional[str] = ..., max_results: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSubscriptionsResponse(_message.Message):
    __slots__ = ("subscription", "next_page_token")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    subscription: _containers.RepeatedCompositeFieldContainer[Subscription]
    next_page_token: str
    def __init__(self, subscription: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class TruncateSubscriptionRequest(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    def __init__(self, subscription: _Optional[str] = ...) -> None: ...

class DeleteSubscriptionRequest(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    def __init__(self, subscription: _Optional[str] = ...) -> None: ...

class ModifyPushConfigRequest(_message.Message):
    __slots__ = ("subscription", "push_config")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PUSH_CONFIG_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    push_config: PushConfig
    def __init__(self, subscription: _Optional[str] = ..., push_config: _Optional[_Union[PushConfig, _Mapping]] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("subscription", "return_immediately")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    RETURN_IMMEDIATELY_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    return_immediately: bool
    def __init__(self, subscription: _Optional[str] = ..., return_immediately: _Optional[bool] = ...) -> None: ...

class PullResponse(_message.Message):
    __slots__ = ("ack_id", "pubsub_event")
    ACK_ID_FIELD_NUMBER: _ClassVar[int]
    PUBSUB_EVENT_FIELD_NUMBER: _ClassVar[int]
    ack_id: str
    pubsub_event: PubsubEvent
    def __init__(self, ack_id: _Optional[str] = ..., pubsub_event: _Optional[_Union[PubsubEvent, _Mapping]] = ...) -> None: ...

class PullBatchRequest(_message.Message):
    __slots__ = ("subscription", "return_immediately", "max_events")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    RETURN_IMMEDIATELY_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    return_immediately: bool
    max_events: int
    def __init__(self, subscription: _Optional[str] = ..., return_immediately: _Optional[bool] = ..., max_events: _Optional[int] = ...) -> None: ...

class PullBatchResponse(_message.Message):
    __slots__ = ("pull_responses",)
    PULL_RESPONSES_FIELD_NUMBER: _ClassVar[int]
    pull_responses: _containers.RepeatedCompositeFieldContainer[PullResponse]
    def __init__(self, pull_responses: _Optional[_Iterable[_Union[PullResponse, _Mapping]]] = ...) -> None: ...

class ModifyAckDeadlineRequest(_message.Message):
    __slots__ = ("subscription", "ack_id", "ack_deadline_seconds")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACK_ID_FIELD_NUMBER: _ClassVar[int]
    ACK_DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    ack_id: str
    ack_deadline_seconds: int
    def __init__(self, subscription: _Optional[str] = ..., ack_id: _Optional[str] = ..., ack_deadline_seconds: _Optional[int] = ...) -> None: ...

class AcknowledgeRequest(_message.Message):
    __slots__ = ("subscription", "ack_id")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACK_ID_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    ack_id: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subscription: _Optional[str] = ..., ack_id: _Optional[_Iterable[str]] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("subscription", "ack_id")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACK_ID_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    ack_id: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subscription: _Optional[str] = ..., ack_id: _Optional[_Iterable[str]] = ...) -> None: ...
