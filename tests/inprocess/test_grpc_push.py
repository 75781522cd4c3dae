"""gRPC push of the seed's early API (gateway/push/grpc_push.py) from the in-process gateway to a
real PushEndpointService served by this test process (grpc, from the generated servicer).

The legacy services that create such subscriptions live elsewhere: a subscription is created
through the v1 core and given `legacy_push_endpoint` in its stored meta, as they do; the
PushManager gets a converter of this test's own as its `message_event`.
"""

from __future__ import annotations

import base64
import dataclasses
import http.server
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import ClassVar

import grpc
import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway._pb.proto2 import empty_pb2
from gateway._pb.tech.pubsub import pubsub_pb2 as tech
from gateway._pb.tech.pubsub import pubsub_pb2_grpc
from gateway.translate.limits import OutgoingMessage
from gateway.translate.records import MessageView
from tests.inprocess.conftest import InProcessGateway, settings_for, wait_for

Names = Callable[..., str]
Code = grpc.StatusCode


def _event(subscription: str, message: MessageView) -> tech.PubsubEvent:
    """The test's stand-in for gateway.legacy.events.message_event."""
    return tech.PubsubEvent(
        subscription=subscription,
        message=tech.PubsubMessage(data=message.data, message_id=message.message_id),
    )


@dataclasses.dataclass
class Seen:
    at: float
    event: tech.PubsubEvent
    code: Code


class Endpoint(pubsub_pb2_grpc.PushEndpointServiceServicer):
    """Answers each event with the code `answer(event, times seen before)` gives."""

    def __init__(self) -> None:
        self.answer: Callable[[tech.PubsubEvent, int], Code] = lambda _, __: Code.OK
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._counts: dict[bytes, int] = {}

    def HandlePubsubEvent(self, request: tech.PubsubEvent, context: grpc.ServicerContext) -> empty_pb2.Empty:
        with self._lock:
            key = request.message.data
            before = self._counts.get(key, 0)
            self._counts[key] = before + 1
            code = self.answer(request, before)
            self.seen.append(Seen(time.monotonic(), request, code))
        if code != Code.OK:
            context.abort(code, f"answered {code.name}")
        return empty_pb2.Empty()

    def messages(self, sub: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.event.subscription == sub and s.event.HasField("message")]

    def acked(self, sub: str) -> list[bytes]:
        return [s.event.message.data for s in self.messages(sub) if s.code == Code.OK]


@pytest.fixture(scope="module")
def endpoint(gw: InProcessGateway) -> Iterator[tuple[Endpoint, str]]:
    servicer = Endpoint()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    pubsub_pb2_grpc.add_PushEndpointServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    gw.gateway.push.message_event = _event
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        gw.gateway.push.message_event = None
        server.stop(0)


def _setup(gw: InProcessGateway, names: Names, address: str) -> tuple[str, str]:
    topic, sub = names("topics"), names("subscriptions")
    gw.run(gw.gateway.topics.create(pb.Topic(name=topic)))
    gw.run(gw.gateway.subscriptions.create(pb.Subscription(name=sub, topic=topic, ack_deadline_seconds=10)))
    _set_endpoint(gw, sub, address)
    return topic, sub


def _set_endpoint(gw: InProcessGateway, sub: str, address: str) -> None:
    """What the legacy API's CreateSubscription and ModifyPushConfig do."""
    gw.run(
        gw.gateway.store.change_subscription(
            sub, lambda meta: dataclasses.replace(meta, legacy_push_endpoint=address)
        )
    )


def _publish(gw: InProcessGateway, topic: str, texts: list[str]) -> None:
    gw.run(gw.gateway.topics.publish(topic, [OutgoingMessage(t.encode(), {}, "") for t in texts]))


def test_ok_acks_aborted_and_other_codes_are_delivered_again(
    gw: InProcessGateway, names: Names, endpoint: tuple[Endpoint, str]
) -> None:
    server, address = endpoint
    first = {"ok": Code.OK, "abort": Code.ABORTED, "busy": Code.UNAVAILABLE, "boom": Code.INTERNAL}
    server.answer = lambda e, before: first[e.message.data.decode().split("-")[0]] if before == 0 else Code.OK
    topic, sub = _setup(gw, names, address)
    texts = [f"{kind}-{i}" for kind in first for i in range(5)]
    _publish(gw, topic, texts)
    wait_for("every message acked", lambda: sorted(server.acked(sub)) == sorted(t.encode() for t in texts))
    time.sleep(1.5)  # nothing more comes: the acks were written
    seen = server.messages(sub)
    by_text: dict[bytes, list[Code]] = {}
    for s in seen:
        by_text.setdefault(s.event.message.data, []).append(s.code)
    for text in texts:
        expected = [Code.OK] if text.startswith("ok") else [first[text.split("-")[0]], Code.OK]
        assert by_text[text.encode()] == expected, text
    assert all(s.event.subscription == sub and s.event.message.message_id for s in seen)
    gw.run(gw.gateway.subscriptions.delete(sub))


def test_unavailable_slows_the_pushes_down(
    gw: InProcessGateway, names: Names, endpoint: tuple[Endpoint, str]
) -> None:
    server, address = endpoint
    started: list[float] = []

    def answer(e: tech.PubsubEvent, before: int) -> Code:
        if not started:
            started.append(time.monotonic())
        return Code.UNAVAILABLE if time.monotonic() - started[0] < 3.0 else Code.OK

    server.answer = answer
    topic, sub = _setup(gw, names, address)
    texts = [f"m{i}" for i in range(200)]
    _publish(gw, topic, texts)
    wait_for("all 200 acked", lambda: len(set(server.acked(sub))) == 200, 90)
    seen = server.messages(sub)
    t0 = started[0]
    pushed_back = [s for s in seen if 1.0 <= s.at - t0 < 3.0]
    # Nacked messages are ready again at once: without the rate control the window's pushes
    # (tens at a time, never halved by a push-back) would come back hundreds of times a second.
    assert len(pushed_back) <= 12, f"{len(pushed_back)} calls in the 2 s after the first second of push-back"
    assert all(s.code == Code.UNAVAILABLE for s in pushed_back)
    first_ok = min(s.at for s in seen if s.code == Code.OK)
    recovery = max(s.at for s in seen) - first_ok
    assert recovery < 60, "the rate grows back once the endpoint answers OK"
    gw.run(gw.gateway.subscriptions.delete(sub))


def test_pausing_keeps_messages_and_resuming_pushes_them(
    gw: InProcessGateway, names: Names, endpoint: tuple[Endpoint, str]
) -> None:
    server, address = endpoint
    server.answer = lambda _, __: Code.OK
    topic, sub = _setup(gw, names, address)
    _publish(gw, topic, ["before"])
    wait_for("the first push", lambda: server.acked(sub) == [b"before"])
    _set_endpoint(gw, sub, "")  # ModifyPushConfig with an empty config
    time.sleep(1.0)
    _publish(gw, topic, [f"paused-{i}" for i in range(5)])
    time.sleep(3.0)
    assert server.acked(sub) == [b"before"], "nothing is pushed while paused"
    _set_endpoint(gw, sub, address)
    wait_for("the paused messages", lambda: len(server.acked(sub)) == 6)
    assert sorted(server.acked(sub)[1:]) == [f"paused-{i}".encode() for i in range(5)]
    gw.run(gw.gateway.subscriptions.delete(sub))


def test_deleting_the_subscription_sends_one_deleted_event(
    gw: InProcessGateway, names: Names, endpoint: tuple[Endpoint, str]
) -> None:
    server, address = endpoint
    server.answer = lambda _, __: Code.OK
    topic, sub = _setup(gw, names, address)
    _publish(gw, topic, ["x"])
    wait_for("the push", lambda: server.acked(sub) == [b"x"])
    gw.run(gw.gateway.subscriptions.delete(sub))

    def deleted() -> list[Seen]:
        return [s for s in server.seen if s.event.subscription == sub and s.event.deleted]

    wait_for("the deleted event", lambda: len(deleted()) == 1, 15)
    time.sleep(1.0)
    assert len(deleted()) == 1
    assert not deleted()[0].event.HasField("message")


def test_the_truncation_event_is_pushed_first_and_retried_until_acked(
    gw: InProcessGateway, names: Names, endpoint: tuple[Endpoint, str]
) -> None:
    """TruncateSubscription's event reaches the endpoint before the messages published after it;
    UNAVAILABLE leaves it pending (pushed again), OK acks it (docs/push.md)."""
    server, address = endpoint
    topic, sub = _setup(gw, names, "")  # paused: the backlog stays
    events: list[int] = []  # (the endpoint's counts are by data, shared with the deleted events)

    def answer(e: tech.PubsubEvent, _: int) -> Code:
        if e.subscription == sub and e.truncated:
            events.append(1)
            return Code.UNAVAILABLE if len(events) == 1 else Code.OK
        return Code.OK

    server.answer = answer
    _publish(gw, topic, ["old"])
    gw.run(gw.gateway.truncation.truncate(sub))
    _publish(gw, topic, ["new"])
    _set_endpoint(gw, sub, address)
    wait_for("the new message", lambda: server.acked(sub) == [b"new"])
    kinds = [(s.event.WhichOneof("type"), s.code) for s in server.seen if s.event.subscription == sub]
    assert kinds == [("truncated", Code.UNAVAILABLE), ("truncated", Code.OK), ("message", Code.OK)]
    assert gw.gateway.truncation.pending(sub) == 0
    gw.run(gw.gateway.subscriptions.delete(sub))


def test_push_destinations_public_refuses_loopback_endpoints(
    gw: InProcessGateway, names: Names, endpoint: tuple[Endpoint, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, address = endpoint
    server.answer = lambda _, __: Code.OK
    port = address.rsplit(":", 1)[1]
    prefix = f"{gw.settings.internal_prefix}_public"  # a store of its own: gw does not push these
    other = InProcessGateway(
        settings_for(gw.settings.kafka_bootstrap or "", prefix, push_destinations="public")
    )
    other.start()
    caplog.set_level(logging.WARNING, logger="gateway.push")
    try:
        other.gateway.push.message_event = _event
        topic, by_name = _setup(other, names, f"localhost:{port}")  # a name resolving to loopback
        literal = names("subscriptions", "-literal")
        other.run(other.gateway.subscriptions.create(pb.Subscription(name=literal, topic=topic)))
        _set_endpoint(other, literal, f"127.0.0.1:{port}")  # a loopback address itself
        _publish(other, topic, ["a", "b", "c"])

        def refused(sub: str) -> bool:
            return any(
                r.getMessage().startswith(f"{sub}: ") and "push destination policy" in r.getMessage()
                for r in caplog.records
            )

        wait_for("both pushes refused", lambda: refused(by_name) and refused(literal), 60)
        text = " ".join(r.getMessage() for r in caplog.records)
        assert "localhost resolves to 127.0.0.1" in text and "loopback" in text
        for sub in (by_name, literal):
            assert [s for s in server.seen if s.event.subscription == sub] == [], (
                "nothing reached the endpoint"
            )
            _set_endpoint(other, sub, "")
        time.sleep(1.0)
        for sub in (by_name, literal):
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < 3 and time.monotonic() < deadline:
                got += [d.record.value for d in other.run(other.gateway.delivery.pull(sub, 3, 2.0))]
            assert sorted(got) == [b"a", b"b", b"c"], "the refused messages stayed in the subscription"
    finally:
        other.stop()


class _HttpEndpoint(http.server.BaseHTTPRequestHandler):
    """A v1 push endpoint: records each message's data and answers 200."""

    received: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append(base64.b64decode(body["message"]["data"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_subscription_moves_between_http_and_grpc_push(
    gw: InProcessGateway, names: Names, endpoint: tuple[Endpoint, str]
) -> None:
    server, address = endpoint
    server.answer = lambda _, __: Code.OK
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HttpEndpoint)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{web.server_address[1]}/push"
        topic, sub = names("topics"), names("subscriptions")
        gw.run(gw.gateway.topics.create(pb.Topic(name=topic)))
        gw.run(
            gw.gateway.subscriptions.create(
                pb.Subscription(name=sub, topic=topic, push_config=pb.PushConfig(push_endpoint=url))
            )
        )
        _publish(gw, topic, ["http-1"])
        wait_for("the HTTP push", lambda: b"http-1" in _HttpEndpoint.received)
        _set_endpoint(gw, sub, address)  # the legacy endpoint wins over the v1 one
        time.sleep(1.0)
        _publish(gw, topic, ["grpc-1"])
        wait_for("the gRPC push", lambda: server.acked(sub) == [b"grpc-1"])
        _set_endpoint(gw, sub, "")  # back to the v1 push config
        time.sleep(1.0)
        _publish(gw, topic, ["http-2"])
        wait_for("the second HTTP push", lambda: b"http-2" in _HttpEndpoint.received)
        assert b"grpc-1" not in _HttpEndpoint.received and server.acked(sub) == [b"grpc-1"]
        gw.run(gw.gateway.subscriptions.delete(sub))
    finally:
        web.shutdown()
        web.server_close()
