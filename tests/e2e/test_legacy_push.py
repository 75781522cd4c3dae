"""gRPC push of the seed's early API end to end: a gateway subprocess pushes to a real
PushEndpointService served by this test process (grpc, from the generated servicer); the
subscriptions are made and changed through the early API's own client (docs/push.md, "gRPC push
(the seed's early API)"; docs/truncation.md for the truncation event)."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from gateway._pb.proto2 import empty_pb2
from gateway._pb.tech.label.label_pb2 import Label
from gateway._pb.tech.pubsub import pubsub_pb2 as lpb
from gateway._pb.tech.pubsub import pubsub_pb2_grpc as lgrpc
from tests.e2e.clients import clients
from tests.gateways import GatewayProcess

PROJECT = "legacy-push"
Code = grpc.StatusCode
Answer = Callable[[lpb.PubsubEvent, int], Code]  # (event, copies seen before) -> the answer
Stubs = tuple[lgrpc.PublisherServiceStub, lgrpc.SubscriberServiceStub]


@dataclasses.dataclass
class Seen:
    at: float
    event: lpb.PubsubEvent
    code: Code

    @property
    def kind(self) -> str:
        return self.event.WhichOneof("type") or ""


class Endpoint(lgrpc.PushEndpointServiceServicer):
    """Answers each event as its subscription's `answers` entry says (OK by default) and records
    every call."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self._seen: list[Seen] = []
        self._counts: dict[tuple[str, str, bytes], int] = {}
        self._lock = threading.Lock()

    def HandlePubsubEvent(self, request: lpb.PubsubEvent, context: grpc.ServicerContext) -> empty_pb2.Empty:
        with self._lock:
            key = (request.subscription, request.WhichOneof("type") or "", request.message.data)
            before = self._counts.get(key, 0)
            self._counts[key] = before + 1
            answer = self.answers.get(request.subscription, lambda _, __: Code.OK)
            code = answer(request, before)
            self._seen.append(Seen(time.monotonic(), request, code))
        if code != Code.OK:
            context.abort(code, f"answered {code.name}")
        return empty_pb2.Empty()

    def seen(self, subscription: str) -> list[Seen]:
        with self._lock:
            return [s for s in self._seen if s.event.subscription == subscription]

    def acked(self, subscription: str) -> list[bytes]:
        return [
            s.event.message.data for s in self.seen(subscription) if s.kind == "message" and s.code == Code.OK
        ]


@pytest.fixture(scope="module")
def gw(kafka_bootstrap: str, log_dir: Path) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(
        kafka_bootstrap, f"lpush{uuid.uuid4().hex[:6]}", log_dir, "--legacy-project", PROJECT
    ).start()
    yield gateway
    gateway.kill()


@pytest.fixture(scope="module")
def stubs(gw: GatewayProcess) -> Iterator[Stubs]:
    with grpc.insecure_channel(gw.address) as channel:
        yield lgrpc.PublisherServiceStub(channel), lgrpc.SubscriberServiceStub(channel)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[Endpoint, str]]:
    servicer = Endpoint()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    lgrpc.add_PushEndpointServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


@pytest.fixture
def uid() -> Callable[[str], str]:
    tag = uuid.uuid4().hex[:8]
    return lambda kind: f"{kind}-{tag}"


def push_sub(stubs: Stubs, uid: Callable[[str], str], address: str, tag: str = "") -> tuple[str, str]:
    pub, sub = stubs
    topic, name = uid("top" + tag), uid("sub" + tag)
    pub.CreateTopic(lpb.Topic(name=topic))
    config = lpb.PushConfig(push_endpoint=address) if address else None
    sub.CreateSubscription(lpb.Subscription(name=name, topic=topic, push_config=config))
    return topic, name


def publish(stubs: Stubs, topic: str, *texts: str, **labels: str | int) -> None:
    messages = []
    for text in texts:
        m = lpb.PubsubMessage(data=text.encode())
        for k, v in labels.items():
            m.label.append(Label(key=k, num_value=v) if isinstance(v, int) else Label(key=k, str_value=v))
        messages.append(m)
    stubs[0].PublishBatch(lpb.PublishBatchRequest(topic=topic, messages=messages))


def set_endpoint(stubs: Stubs, name: str, address: str) -> None:
    config = lpb.PushConfig(push_endpoint=address) if address else None
    stubs[1].ModifyPushConfig(lpb.ModifyPushConfigRequest(subscription=name, push_config=config))


def wait_for(what: str, done: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds} s: {what}")
        time.sleep(0.05)


def test_messages_are_pushed_with_labels_and_the_early_apis_names(
    gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str], endpoint: tuple[Endpoint, str]
) -> None:
    server, address = endpoint
    topic, name = push_sub(stubs, uid, address)
    publish(stubs, topic, "a", "b", kind="x", n=-7)
    wait_for("both pushed", lambda: sorted(server.acked(name)) == [b"a", b"b"])
    for s in server.seen(name):
        assert s.event.subscription == name  # short, as the early API names it
        assert s.event.message.message_id
        labels = {lb.key: getattr(lb, lb.WhichOneof("value") or "str_value") for lb in s.event.message.label}
        assert labels == {"kind": "x", "n": -7}
    # Cross-API: what the official v1 client publishes is pushed too, its attributes as labels.
    v1_pub, _ = clients(gw)
    v1_pub.publish(f"projects/{PROJECT}/topics/{topic}", b"from-v1", a="1").result(timeout=30)
    wait_for("the v1 message pushed", lambda: b"from-v1" in server.acked(name))
    pushed = next(s for s in server.seen(name) if s.event.message.data == b"from-v1")
    assert [(lb.key, lb.str_value) for lb in pushed.event.message.label] == [("a", "1")]
    assert len(server.acked(name)) == 3  # each once: OK acked them


def test_aborted_is_pushed_again_and_unavailable_slows_down(
    stubs: Stubs, uid: Callable[[str], str], endpoint: tuple[Endpoint, str]
) -> None:
    server, address = endpoint
    topic, aborted = push_sub(stubs, uid, address)
    server.answers[aborted] = lambda e, before: Code.ABORTED if before == 0 else Code.OK
    publish(stubs, topic, "x", "y")
    wait_for("both acked after an ABORTED each", lambda: sorted(server.acked(aborted)) == [b"x", b"y"])
    codes = sorted((s.event.message.data, s.code.name) for s in server.seen(aborted))
    assert codes == [(b"x", "ABORTED"), (b"x", "OK"), (b"y", "ABORTED"), (b"y", "OK")]

    started: list[float] = []

    def pushing_back(e: lpb.PubsubEvent, before: int) -> Code:
        if not started:
            started.append(time.monotonic())
        return Code.UNAVAILABLE if time.monotonic() - started[0] < 3.0 else Code.OK

    topic, slowed = push_sub(stubs, uid, "", "slow")
    server.answers[slowed] = pushing_back
    publish(stubs, topic, *(f"m{i}" for i in range(30)))
    set_endpoint(stubs, slowed, address)  # the backlog is there when pushing starts
    wait_for("all 30 acked", lambda: len(set(server.acked(slowed))) == 30, 40)
    seen = server.seen(slowed)
    late = [s for s in seen if 1.0 <= s.at - started[0] < 3.0]
    # Nacked messages are ready again at once: without the push rate they would come back
    # hundreds of times a second.
    assert len(late) <= 12, f"{len(late)} calls in the 2 s after the first second of push-back"
    assert all(s.code == Code.UNAVAILABLE for s in late)


def test_the_truncation_event_is_pushed_before_further_messages(
    stubs: Stubs, uid: Callable[[str], str], endpoint: tuple[Endpoint, str]
) -> None:
    server, address = endpoint
    _, sub = stubs
    topic, name = push_sub(stubs, uid, "")  # paused: the backlog accumulates
    declined = {0: Code.ABORTED, 2: Code.INTERNAL}  # the first event once, the second once

    def answer(e: lpb.PubsubEvent, before: int) -> Code:
        return declined.get(before, Code.OK) if e.WhichOneof("type") == "truncated" else Code.OK

    server.answers[name] = answer
    publish(stubs, topic, "old0", "old1")
    sub.TruncateSubscription(lpb.TruncateSubscriptionRequest(subscription=name))
    publish(stubs, topic, "new0")
    set_endpoint(stubs, name, address)
    wait_for("the new message pushed", lambda: server.acked(name) == [b"new0"])
    kinds = [(s.kind, s.code) for s in server.seen(name)]
    # The event first: declined once (ABORTED leaves it pending), then acked; nothing of the backlog.
    assert kinds == [("truncated", Code.ABORTED), ("truncated", Code.OK), ("message", Code.OK)], kinds
    assert all(s.event.subscription == name for s in server.seen(name))
    # A later truncation reaches the endpoint while the subscription is idle; a failure (INTERNAL)
    # leaves it pending, pushed again after the backoff.
    truncated_at = time.monotonic()
    sub.TruncateSubscription(lpb.TruncateSubscriptionRequest(subscription=name))
    wait_for("the second event", lambda: [s.kind for s in server.seen(name)].count("truncated") == 4, 10)
    events = [(s.code, s.at) for s in server.seen(name) if s.kind == "truncated"][2:]
    assert [code for code, _ in events] == [Code.INTERNAL, Code.OK]
    assert events[0][1] - truncated_at < 5
    publish(stubs, topic, "new1")
    wait_for("the next message", lambda: server.acked(name) == [b"new0", b"new1"])
    assert [s.kind for s in server.seen(name)].count("truncated") == 4  # acked: not pushed again


def test_pausing_and_deleting(
    stubs: Stubs, uid: Callable[[str], str], endpoint: tuple[Endpoint, str]
) -> None:
    server, address = endpoint
    _, sub = stubs
    topic, name = push_sub(stubs, uid, address)
    publish(stubs, topic, "before")
    wait_for("the first push", lambda: server.acked(name) == [b"before"])
    set_endpoint(stubs, name, "")  # an empty push config pauses
    time.sleep(1.5)  # every process stops pushing within about a second
    publish(stubs, topic, *(f"paused{i}" for i in range(3)))
    time.sleep(2.0)
    assert server.acked(name) == [b"before"], "nothing is pushed while paused"
    set_endpoint(stubs, name, address)
    wait_for("the paused messages", lambda: len(server.acked(name)) == 4)
    assert sorted(server.acked(name)[1:]) == [b"paused0", b"paused1", b"paused2"]
    sub.DeleteSubscription(lpb.DeleteSubscriptionRequest(subscription=name))
    wait_for("the deleted event", lambda: any(s.kind == "deleted" for s in server.seen(name)), 15)
    time.sleep(1.0)
    deleted = [s for s in server.seen(name) if s.kind == "deleted"]
    assert len(deleted) == 1 and deleted[0].event.subscription == name
