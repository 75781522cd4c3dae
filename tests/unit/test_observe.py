"""The pure parts of metrics, health and logs: tallies, backlog, librdkafka statistics, the
RPC timing on both wires, readiness, JSON log lines (gateway/core/tally.py, gateway/observe)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from prometheus_client import CollectorRegistry

from gateway.core import tally
from gateway.core.tally import OTHER, Tallies, Tally, TopicTally, push_class
from gateway.kafka.stats import ClientStats, summarize
from gateway.leases.commands import Ack
from gateway.leases.state import PartitionState
from gateway.observe import backlog, health, logs, rpc
from gateway.settings import SettingsError
from gateway.translate import records
from gateway.translate.limits import OutgoingMessage, check_publish
from gateway.translate.records import Record
from gateway.wire.rest import Aborted, CallContext, Code
from tests.unit.test_settings import parse


def record(offset: int, data: bytes = b"x" * 10, published: int = 1_000) -> Record:
    return records.record(0, offset, published + offset, b"key", data, [("a", "bc")])


# -- tallies -------------------------------------------------------------------------------


def test_acks_are_counted_and_timed_from_their_delivery() -> None:
    t = Tally()
    t.on_delivered([(0, 1, 1, None), (0, 2, 1, None), (1, 7, 1, None)], now_ms=1_000)
    t.on_acked(0, [1], now_ms=1_004)  # 4 ms: the 5 ms bucket
    t.on_acked(1, [7], now_ms=1_004)
    t.on_acked(0, [99], now_ms=2_000)  # never delivered here (another process): counted, not timed
    t.on_acked(3, [5], now_ms=2_000)  # nor anything of its partition
    t.on_nacked(0, [2])
    t.on_dead_lettered(5, [5])
    assert (t.delivered, t.acked, t.nacked, t.dead_lettered) == (3, 4, 1, 1)
    assert t.ack_latency_buckets[0] == 2 and sum(t.ack_latency_buckets) == 2
    assert t.ack_latency_sum_ms == 8
    assert t.timed == 0 and not any(t.sent_ms.values())  # acks and nacks forget their deliveries
    t.on_delivered([(0, 3, 1, None)], now_ms=0)
    t.on_acked(0, [3], now_ms=700_000)  # past the last bound: the +Inf bucket
    assert t.ack_latency_buckets[-1] == 1


def test_a_delivery_across_partitions_is_timed_by_partition() -> None:
    t = Tally()
    t.on_delivered([(0, 1, 1, None), (0, 2, 1, None), (1, 1, 1, None), (0, 3, 1, None)], now_ms=10)
    assert t.sent_ms == {0: {1: 10, 2: 10, 3: 10}, 1: {1: 10}} and t.timed == 4
    t.on_delivered([(0, 1, 2, None)], now_ms=20)  # delivered again: timed from the new delivery
    assert t.timed == 4
    t.on_acked(0, [1, 3], now_ms=30)
    assert t.sent_ms == {0: {2: 10}, 1: {1: 10}} and t.timed == 2
    assert t.ack_latency_sum_ms == 10 + 20


def test_delivery_times_are_bounded_and_pruned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tally, "MAX_TIMED", 3)
    t = Tally()
    t.on_delivered([(0, o, 1, None) for o in range(3)], now_ms=0)
    t.on_delivered([(0, 3, 1, None)], now_ms=1)  # full, and nothing old enough to drop
    assert t.timed == 3 and t.delivered == 4 and 3 not in t.sent_ms[0]
    t.on_delivered([(0, 4, 1, None)], now_ms=tally.TIMED_FOR_MS + 10)  # the old ones go
    assert t.sent_ms == {0: {4: tally.TIMED_FOR_MS + 10}} and t.timed == 1


@pytest.mark.parametrize(
    ("ok", "detail", "refused", "cls"),
    [
        (True, "HTTP 200", False, "ack"),
        (False, "HTTP 404", False, "remote_server_4xx"),
        (False, "HTTP 503", False, "remote_server_5xx"),
        (False, "timeout", False, "deadline_exceeded"),
        (False, "ClientConnectorError: refused", False, "unreachable"),
        (False, "loopback addresses are refused", True, "invalid"),
    ],
)
def test_push_outcomes_are_classed_as_cloud_monitoring_does(
    ok: bool, detail: str, refused: bool, cls: str
) -> None:
    assert push_class(ok, detail, refused) == cls
    t = Tally()
    t.on_pushed(ok, detail, refused)
    assert t.push[cls] == 1 and sum(t.push.values()) == 1


def test_publish_bytes_count_data_attributes_and_ordering_key() -> None:
    t = TopicTally()
    size = check_publish([OutgoingMessage(b"abc", {"k": "vv"}, "ok"), OutgoingMessage(b"", {"é": ""}, "")])
    t.on_published(2, size)
    assert (t.requests, t.messages, t.bytes) == (1, 2, 3 + 3 + 2 + 2)  # é is 2 bytes in UTF-8


def test_names_past_the_cap_share_one_tally_labelled_other() -> None:
    tallies = Tallies(Tally, cap=2)
    a, b, c, d = (tallies.of(n) for n in "abcd")
    assert a is not b and c is d is tallies.other
    assert [tallies.label(n) for n in "abcde"] == ["a", "b", OTHER, OTHER, OTHER]
    assert [label for label, _ in tallies.items()] == ["a", "b", OTHER]
    tallies.forget(lambda name: name != "a")  # a and nothing else was deleted
    assert [label for label, _ in tallies.items()] == ["b", OTHER]
    assert tallies.of("e") is not tallies.other  # a's place went to the next name
    assert tallies.label("c") == OTHER  # c stays where its counts are
    tallies.forget(lambda name: name in "be")
    assert [label for label, _ in tallies.items()] == ["b", "e"]  # no name left in OTHER


def test_expiries_are_reported_however_they_are_found() -> None:
    expired: list[int] = []
    state: PartitionState[Record] = PartitionState(0, 0)
    state.on_expired = expired.append
    state.add_records((o, record(o)) for o in range(3))
    state.take(3, now_ms=0, deadline_ms=100)
    assert state.expire(50) == 0 and expired == []
    state.take(1, now_ms=200, deadline_ms=300)  # a take finds the expired leases first
    assert expired == [3]


# -- backlog -------------------------------------------------------------------------------


def test_backlog_of_a_partition() -> None:
    state: PartitionState[Record] = PartitionState(0, 10)
    state.add_records((o, record(o)) for o in range(10, 20))
    state.take(4, now_ms=0, deadline_ms=10_000)
    state.apply(Ack(0, ((10, 12), (15, 16))), now_ms=1)
    b = backlog.of(state, end=30)  # 10 more published, not fetched yet
    assert b.messages == 30 - 10 - 3
    assert b.leased == 2
    size = 10 + 3 + 1 + 2  # data, key, attribute name and value
    assert backlog.message_size(record(0)) == size
    assert b.bytes == b.messages * size  # all held messages are alike
    assert b.oldest_ms == record(12).timestamp_ms  # 10 and 11 are acked
    assert backlog.of(state, end=None).messages == 20 - 10 - 3  # what was fetched is the end
    empty = backlog.of(PartitionState(0, 5), end=5)
    assert (empty.messages, empty.bytes, empty.oldest_ms) == (0, 0, None)
    unfetched = backlog.of(PartitionState(0, 5), end=9)
    assert (unfetched.messages, unfetched.bytes, unfetched.oldest_ms) == (4, 0, None)


# -- librdkafka statistics -----------------------------------------------------------------

STATS = {
    "name": "rdkafka#producer-1",
    "msg_cnt": 12,
    "msg_size": 3400,
    "brokers": {
        "localhost:9092/1": {
            "name": "localhost:9092/1",
            "nodeid": 1,
            "state": "UP",
            "rtt": {"avg": 2500, "p99": 9000},
            "waitresp_cnt": 2,
            "outbuf_cnt": 1,
            "req_timeouts": 3,
            "connects": 1,
            "disconnects": 4,
            "txerrs": 5,
            "rxerrs": 6,
        },
        "GroupCoordinator": {"name": "GroupCoordinator", "nodeid": -1, "state": "UP"},
        "localhost:9093/2": {"name": "localhost:9093/2", "nodeid": 2, "state": "CONNECT"},
    },
}


def test_statistics_summary() -> None:
    s = summarize(json.dumps(STATS), taken_at=5.0)
    assert (s.client, s.queue_messages, s.queue_bytes, s.taken_at) == ("rdkafka#producer-1", 12, 3400, 5.0)
    assert [(b.name, b.up, b.state) for b in s.brokers] == [
        ("localhost:9092/1", True, "UP"),
        ("localhost:9093/2", False, "CONNECT"),
    ]
    first = s.brokers[0]
    assert (first.rtt_avg_s, first.rtt_p99_s) == (0.0025, 0.009)
    assert (first.in_flight, first.queued, first.request_timeouts, first.disconnects) == (2, 1, 3, 4)
    assert (first.tx_errors, first.rx_errors) == (5, 6)


def test_statistics_config_and_a_bad_document() -> None:
    assert ClientStats(0).config() == {}
    stats = ClientStats(2.5)
    config = stats.config()
    assert config["statistics.interval.ms"] == 2500 and config["stats_cb"] == stats.receive
    stats.receive("not json")
    assert stats.latest is None
    stats.receive(json.dumps(STATS))
    assert stats.latest is not None and len(stats.latest.brokers) == 2


# -- RPC timing ----------------------------------------------------------------------------


def _count(registry: CollectorRegistry, transport: str, method: str, code: str) -> float | None:
    labels = {"transport": transport, "method": method, "code": code}
    return registry.get_sample_value("pubsub_gateway_rpc_duration_seconds_count", labels)


class _Servicer:
    SERVICE = "test.Service"

    async def Fine(self, request: Any, context: CallContext) -> str:
        return "done"

    async def Refused(self, request: Any, context: CallContext) -> str:
        raise Aborted(Code.NOT_FOUND, "no such thing")


async def test_rest_calls_are_timed_under_their_grpc_names() -> None:
    registry = CollectorRegistry()
    metrics = rpc.RpcMetrics(registry)
    servicer = _Servicer()
    calls: dict[str, Any] = {"fine": servicer.Fine, "refused": servicer.Refused}
    rpc.wrap_rest_calls(calls, metrics)
    assert await calls["fine"](None, CallContext()) == "done"
    with pytest.raises(Aborted):
        await calls["refused"](None, CallContext())
    assert _count(registry, "rest", "/test.Service/Fine", "OK") == 1
    assert _count(registry, "rest", "/test.Service/Refused", "NOT_FOUND") == 1


async def test_grpc_calls_of_any_service_are_timed_by_method_and_code() -> None:
    registry = CollectorRegistry()
    server = grpc.aio.server(interceptors=[rpc.Interceptor(rpc.RpcMetrics(registry))])

    async def echo(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        if request == b"bad":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad")
        return request

    async def repeat(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        for _ in range(3):
            yield request

    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Repeat": grpc.unary_stream_rpc_method_handler(repeat),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("any.Thing", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert await channel.unary_unary("/any.Thing/Echo")(b"hi", timeout=5) == b"hi"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channel.unary_unary("/any.Thing/Echo")(b"bad", timeout=5)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            got = [m async for m in channel.unary_stream("/any.Thing/Repeat")(b"x", timeout=5)]
            assert got == [b"x"] * 3
            with pytest.raises(grpc.aio.AioRpcError):
                await channel.unary_unary("/any.Thing/Missing")(b"", timeout=5)
    finally:
        await server.stop(None)
    assert _count(registry, "grpc", "/any.Thing/Echo", "OK") == 1
    assert _count(registry, "grpc", "/any.Thing/Echo", "INVALID_ARGUMENT") == 1
    assert _count(registry, "grpc", "/any.Thing/Repeat", "OK") == 1
    assert _count(registry, "grpc", "/any.Thing/Missing", "UNIMPLEMENTED") is None  # no handler: not ours


# -- readiness -----------------------------------------------------------------------------


class _Admin:
    def __init__(self) -> None:
        self.error: Exception | None = None
        self.hang = False

    async def answers(self, name: str, wait: float) -> None:
        if self.hang:
            await asyncio.sleep(60)
        if self.error is not None:
            raise self.error


async def _status(h: health.Health, service: str = "") -> int:
    response = await h.servicer.Check(health_pb2.HealthCheckRequest(service=service), None)
    return int(response.status)


async def test_ready_once_started_and_while_kafka_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _Admin()
    h = health.Health(admin, "t", ["svc.A"])  # type: ignore[arg-type]
    await h._publish()
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    assert h.reason == health.STARTING and await _status(h) == not_serving
    await h.serving()
    assert h.ready and await _status(h) == serving and await _status(h, "svc.A") == serving
    admin.error = RuntimeError("broker gone")
    await h._probe()
    assert h.reason == "Kafka unreachable: Kafka: broker gone" and await _status(h, "svc.A") == not_serving
    admin.error, admin.hang = None, True
    monkeypatch.setattr(health, "PROBE_TIMEOUT", 0.05)
    await h._probe()
    assert h.reason is not None and "did not answer" in h.reason
    admin.hang = False
    await h._probe()
    assert h.ready
    await h.stop()
    assert h.reason == health.STOPPING and await _status(h) == not_serving
    await h._probe()
    assert h.reason == health.STOPPING  # for good


async def test_after_a_failed_probe_the_next_comes_sooner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ready again within RETRY_SECONDS of Kafka answering, not a whole PROBE_SECONDS later."""
    monkeypatch.setattr(health, "PROBE_SECONDS", 30.0)
    monkeypatch.setattr(health, "RETRY_SECONDS", 0.01)
    admin = _Admin()
    h = health.Health(admin, "t", [])  # type: ignore[arg-type]
    await h.serving()
    admin.error = RuntimeError("broker gone")
    await h._probe()
    assert not h.ready
    admin.error = None
    loop = asyncio.create_task(h._probe_loop())
    try:
        for _ in range(200):  # 2 s at most
            if h.ready:
                break
            await asyncio.sleep(0.01)
        assert h.ready
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


# -- logs and settings ---------------------------------------------------------------------


def test_json_log_lines() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    log = logging.getLogger("tests.unit.test_observe.json")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("a %s line", "formatted")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["level"] == "WARNING" and first["message"] == "a formatted line"
    assert first["logger"] == "tests.unit.test_observe.json" and first["time"].endswith("Z")
    assert "exception" not in first
    assert second["message"] == "failed" and "ValueError: boom" in second["exception"]


def test_observability_settings() -> None:
    s = parse([])
    assert (s.log_format, s.metrics_open, s.kafka_statistics_seconds) == ("text", False, 15.0)
    assert (s.metrics_max_subscriptions, s.metrics_max_topics) == (1000, 1000)
    assert parse(["--log-format", "JSON"]).log_format == "json"
    for argv in (
        ["--log-format", "xml"],
        ["--metrics-max-subscriptions", "0"],
        ["--metrics-max-topics", "0"],
        ["--kafka-statistics-seconds", "-1"],
        ["--metrics-open", "maybe"],
    ):
        with pytest.raises(SettingsError):
            parse(argv)


# -- tracing -------------------------------------------------------------------------------

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"


def _recorded(mode: str = "log") -> tuple[Any, Any]:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gateway.observe.tracing import Tracing

    tracing = Tracing(mode)
    memory = InMemorySpanExporter()
    tracing.provider.add_span_processor(SimpleSpanProcessor(memory))
    return tracing, memory


def test_publish_and_delivery_spans_link_the_messages_contexts() -> None:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
    from gateway.observe.tracing import PUBLISH, PULL, STREAMING_PULL, context_of

    assert context_of({"googclient_traceparent": "garbage"}) is None
    assert context_of({}) is None
    tracing, memory = _recorded()
    request = pb.PublishRequest(
        topic="projects/p/topics/t",
        messages=[
            pb.PubsubMessage(data=b"a", attributes={"googclient_traceparent": PARENT}),
            pb.PubsubMessage(),
        ],
    )
    tracing.unary(PUBLISH, request, pb.PublishResponse(message_ids=["1", "2"]), 1, "OK")
    received = pb.ReceivedMessage(
        message=pb.PubsubMessage(message_id="1", attributes={"googclient_traceparent": PARENT})
    )
    pulled = pb.PullResponse(received_messages=[received])
    tracing.unary(PULL, pb.PullRequest(subscription="projects/p/subscriptions/s"), pulled, 1, "OK")
    tracing.unary(PULL, pb.PullRequest(subscription="projects/p/subscriptions/s"), pb.PullResponse(), 1, "OK")
    tracing.streamed(
        STREAMING_PULL,
        "projects/p/subscriptions/s",
        pb.StreamingPullResponse(received_messages=[received]),
        1,
    )
    tracing.unary(PUBLISH, request, None, 1, "NOT_FOUND")
    tracing.unary("/google.pubsub.v1.Publisher/GetTopic", pb.GetTopicRequest(), pb.Topic(), 1, "OK")
    spans = memory.get_finished_spans()
    assert [s.name for s in spans] == [
        "publish projects/p/topics/t",
        "deliver projects/p/subscriptions/s",
        "deliver projects/p/subscriptions/s",
        "publish projects/p/topics/t",
    ]  # an empty pull and other methods make none
    first = spans[0]
    assert first.attributes is not None and first.attributes["messaging.batch.message_count"] == 2
    assert [f"{link.context.trace_id:032x}" for link in first.links] == [TRACE_ID]
    assert first.links[0].attributes == {"messaging.message.id": "1"}
    assert all(f"{s.links[0].context.trace_id:032x}" == TRACE_ID for s in spans)
    assert spans[-1].status.status_code.name == "ERROR"
    tracing.shutdown()


async def test_streaming_pull_spans_know_the_stream_subscription() -> None:
    import types

    calls: list[tuple[str, str, Any]] = []

    class Spans:
        def unary(self, method: str, request: Any, response: Any, start_ns: int, code: str) -> None:
            calls.append(("unary", method, response))

        def streamed(self, method: str, subscription: str, response: Any, start_ns: int) -> None:
            calls.append(("streamed", subscription, response))

    async def pulls(requests: Any, context: Any) -> Any:
        async for request in requests:
            yield request.subscription.encode()

    server = grpc.aio.server(interceptors=[rpc.Interceptor(rpc.RpcMetrics(CollectorRegistry()), Spans())])
    handler = grpc.stream_stream_rpc_method_handler(
        pulls, request_deserializer=lambda b: types.SimpleNamespace(subscription=b.decode())
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("google.pubsub.v1.Subscriber", {"StreamingPull": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = channel.stream_stream("/google.pubsub.v1.Subscriber/StreamingPull")
            got = [m async for m in stream(iter([b"projects/p/subscriptions/s", b""]), timeout=5)]
    finally:
        await server.stop(None)
    assert got == [b"projects/p/subscriptions/s", b""]
    assert calls == [
        ("streamed", "projects/p/subscriptions/s", got[0]),
        ("streamed", "projects/p/subscriptions/s", got[1]),
    ]


def test_tracing_setting() -> None:
    assert parse([]).tracing == "off"
    assert parse(["--tracing", "OTLP"]).tracing == "otlp"
    with pytest.raises(SettingsError):
        parse(["--tracing", "zipkin"])
