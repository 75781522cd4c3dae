"""/metrics, /healthz, /readyz and the gRPC health service, seen from outside a gateway process
driven by the official client (docs/metrics.md, docs/health.md)."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from google.api_core.exceptions import NotFound
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from gateway.kafka.local import LocalKafka
from tests.conftest import GatewayFactory
from tests.e2e.clients import clients, pull_until, topic_and_subscription
from tests.gateways import GatewayProcess, kafka_version

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def http_get(gw: GatewayProcess, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{gw.rest_address}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def scrape(gw: GatewayProcess) -> Samples:
    status, text = http_get(gw, "/metrics")
    assert status == 200, text
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name, frozenset(sample.labels.items())] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def wait_for(gw: GatewayProcess, check: Callable[[Samples], bool], timeout: float = 30.0) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(gw)
        if check(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.25)


def health(gw: GatewayProcess, service: str = "") -> int:
    with grpc.insecure_channel(gw.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status)


def test_metrics_follow_publish_pull_ack_and_nack(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway("--kafka-statistics-seconds", "1")
    pub, sub, topic, subscription = topic_and_subscription(gw, names, ack_deadline_seconds=30)
    for f in [pub.publish(topic, b"x" * 100, k="v") for _ in range(10)]:
        f.result(timeout=30)
    got = pull_until(sub, subscription, 10)
    assert len(got) == 10

    samples = wait_for(
        gw,
        lambda m: value(m, "pubsub_subscription_num_undelivered_messages", subscription=subscription) == 10,
    )
    assert value(samples, "pubsub_subscription_num_undelivered_messages", subscription=subscription) == 10
    assert value(samples, "pubsub_subscription_sent_message_count_total", subscription=subscription) == 10
    assert value(samples, "pubsub_gateway_subscription_outstanding_leases", subscription=subscription) == 10
    # Each message is 100 bytes of data and an attribute k=v: 102 bytes as Pub/Sub counts it.
    assert value(samples, "pubsub_subscription_backlog_bytes", subscription=subscription) == 1020
    age = value(samples, "pubsub_subscription_oldest_unacked_message_age_seconds", subscription=subscription)
    assert age is not None and 0 <= age < 120
    assert value(samples, "pubsub_topic_send_message_operation_count_total", topic=topic) == 10
    assert value(samples, "pubsub_topic_message_sizes_bytes_total", topic=topic) == 1020
    requests = value(samples, "pubsub_topic_send_request_count_total", topic=topic)
    assert requests is not None and 1 <= requests <= 10

    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got[:6]])
    sub.modify_ack_deadline(
        subscription=subscription, ack_ids=[m.ack_id for m in got[6:8]], ack_deadline_seconds=0
    )
    # The last two: a deadline of 1 s that runs out.
    sub.modify_ack_deadline(
        subscription=subscription, ack_ids=[m.ack_id for m in got[8:]], ack_deadline_seconds=1
    )
    samples = wait_for(
        gw,
        lambda m: (
            value(m, "pubsub_subscription_expired_ack_deadlines_count_total", subscription=subscription) == 2
        ),
    )
    assert value(samples, "pubsub_subscription_ack_message_count_total", subscription=subscription) == 6
    assert value(samples, "pubsub_subscription_nack_requests_total", subscription=subscription) == 2
    assert (
        value(samples, "pubsub_subscription_expired_ack_deadlines_count_total", subscription=subscription)
        == 2
    )
    assert value(samples, "pubsub_subscription_ack_latencies_seconds_count", subscription=subscription) == 6
    assert (
        value(
            samples, "pubsub_subscription_ack_latencies_seconds_bucket", subscription=subscription, le="+Inf"
        )
        == 6
    )
    assert value(samples, "pubsub_subscription_num_undelivered_messages", subscription=subscription) == 4
    assert value(samples, "pubsub_gateway_subscription_outstanding_leases", subscription=subscription) == 0
    assert (
        value(samples, "pubsub_subscription_dead_letter_message_count_total", subscription=subscription) == 0
    )

    # Per RPC, by method and code, on both wires.
    with pytest.raises(NotFound):
        pub.get_topic(topic=names("topics", "-missing"))
    status, _ = http_get(gw, f"/v1/{topic}")
    assert status == 200
    samples = scrape(gw)

    def calls(method: str, code: str, transport: str = "grpc") -> float | None:
        return value(
            samples,
            "pubsub_gateway_rpc_duration_seconds_count",
            transport=transport,
            method=f"/google.pubsub.v1.{method}",
            code=code,
        )

    assert (calls("Publisher/Publish", "OK") or 0) >= 1
    assert calls("Subscriber/Acknowledge", "OK") == 1
    assert calls("Subscriber/ModifyAckDeadline", "OK") == 2
    assert calls("Publisher/GetTopic", "NOT_FOUND") == 1
    assert calls("Publisher/GetTopic", "OK", transport="rest") == 1

    # librdkafka's statistics of the producer: every broker it talks to is up.
    samples = wait_for(gw, lambda m: any(k[0] == "pubsub_gateway_kafka_broker_up" for k in m))
    up = [v for (name, _), v in samples.items() if name == "pubsub_gateway_kafka_broker_up"]
    assert up and all(v == 1 for v in up)
    assert value(samples, "pubsub_gateway_kafka_producer_queue_messages") is not None
    assert value(samples, "process_resident_memory_bytes") is not None
    assert (value(samples, "python_gc_collections_total", generation="0") or 0) >= 1

    # An open StreamingPull stream of the official subscriber.
    streaming = sub.subscribe(subscription, callback=lambda m: m.ack())
    try:
        samples = wait_for(
            gw,
            lambda m: (
                value(m, "pubsub_subscription_open_streaming_pulls", subscription=subscription) is not None
            ),
        )
        streams = value(samples, "pubsub_subscription_open_streaming_pulls", subscription=subscription)
        assert streams is not None and streams >= 1
    finally:
        streaming.cancel()


def test_a_dead_lettered_message_is_counted(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway()
    pub, sub = clients(gw)
    topic, dead, subscription = names("topics"), names("topics", "-dead"), names("subscriptions")
    pub.create_topic(name=topic)
    pub.create_topic(name=dead)
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "ack_deadline_seconds": 30,
            "dead_letter_policy": {"dead_letter_topic": dead, "max_delivery_attempts": 5},
        }
    )
    pub.publish(topic, b"poison").result(timeout=30)
    for _ in range(5):
        got = pull_until(sub, subscription, 1)
        assert len(got) == 1
        sub.modify_ack_deadline(subscription=subscription, ack_ids=[got[0].ack_id], ack_deadline_seconds=0)
    samples = wait_for(
        gw,
        lambda m: (
            value(m, "pubsub_subscription_dead_letter_message_count_total", subscription=subscription) == 1
        ),
    )
    assert (
        value(samples, "pubsub_subscription_dead_letter_message_count_total", subscription=subscription) == 1
    )
    assert value(samples, "pubsub_subscription_nack_requests_total", subscription=subscription) == 5
    assert value(samples, "pubsub_subscription_sent_message_count_total", subscription=subscription) == 5
    assert value(samples, "pubsub_subscription_ack_message_count_total", subscription=subscription) == 0


def test_past_the_cap_subscriptions_are_summed_as_other(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway("--metrics-max-subscriptions", "1")
    pub, sub = clients(gw)
    topic = names("topics")
    pub.create_topic(name=topic)
    subscriptions = [names("subscriptions", f"-{i}") for i in range(3)]
    for name in subscriptions:
        sub.create_subscription(name=name, topic=topic)
    pub.publish(topic, b"m").result(timeout=30)
    for name in subscriptions:
        assert len(pull_until(sub, name, 1)) == 1
    samples = scrape(gw)
    labels = {
        dict(k[1])["subscription"] for k in samples if k[0] == "pubsub_subscription_sent_message_count_total"
    }
    assert len(labels) == 2 and "_other" in labels
    assert value(samples, "pubsub_subscription_sent_message_count_total", subscription="_other") == 2
    assert value(samples, "pubsub_subscription_num_undelivered_messages", subscription="_other") == 2


def test_health_of_a_serving_gateway(shared_gateway: GatewayProcess) -> None:
    assert http_get(shared_gateway, "/healthz") == (200, "ok\n")
    assert http_get(shared_gateway, "/readyz") == (200, "ready\n")
    serving = health_pb2.HealthCheckResponse.SERVING
    assert health(shared_gateway) == serving
    assert health(shared_gateway, "google.pubsub.v1.Publisher") == serving
    assert health(shared_gateway, "google.pubsub.v1.Subscriber") == serving


def test_metrics_need_a_credential_when_callers_must_authenticate(
    start_gateway: GatewayFactory, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret user:ops@example.com\n")
    gw = start_gateway("--auth-token-file", str(tokens))
    status, _ = http_get(gw, "/metrics")
    assert status == 401
    status, text = http_get(gw, "/metrics", {"Authorization": "Bearer s3cret"})
    assert status == 200 and "pubsub_gateway_rpc_duration_seconds" in text
    assert http_get(gw, "/readyz") == (200, "ready\n")  # health stays open
    opened = start_gateway("--auth-token-file", str(tokens), "--metrics-open", "true")
    assert http_get(opened, "/metrics")[0] == 200


def test_json_log_lines(start_gateway: GatewayFactory) -> None:
    gw = start_gateway("--log-format", "json")
    lines = [line for line in gw.log_paths[-1].read_text().splitlines() if line.startswith("{")]
    assert lines
    first = json.loads(lines[0])
    assert {"time", "level", "logger", "message"} <= first.keys()
    assert any("serving the Pub/Sub API" in json.loads(line)["message"] for line in lines)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_not_ready_while_kafka_is_down(tmp_path: Path, log_dir: Path) -> None:
    kafka = LocalKafka(data_dir=tmp_path / "kafka", port=_free_port(), heap_mb=256, version=kafka_version())
    bootstrap = kafka.start()
    gw = GatewayProcess(bootstrap, f"rd{uuid.uuid4().hex[:6]}", log_dir).start()
    try:
        assert http_get(gw, "/readyz") == (200, "ready\n")
        kafka.stop()
        deadline = time.monotonic() + 30
        while (status := http_get(gw, "/readyz"))[0] == 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert status[0] == 503 and "Kafka unreachable" in status[1]
        assert http_get(gw, "/healthz")[0] == 200  # alive all the same
        assert health(gw) == health_pb2.HealthCheckResponse.NOT_SERVING
        kafka.start()
        deadline = time.monotonic() + 60
        while http_get(gw, "/readyz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert http_get(gw, "/readyz") == (200, "ready\n")
        assert health(gw) == health_pb2.HealthCheckResponse.SERVING
    finally:
        gw.kill()
        kafka.stop()


def test_spans_of_publish_and_delivery_link_the_clients_trace(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway("--tracing", "log")
    pub, sub, topic, subscription = topic_and_subscription(gw, names)
    # What the official clients put in a message when their tracing is on.
    trace_id = uuid.uuid4().hex
    pub.publish(topic, b"traced", googclient_traceparent=f"00-{trace_id}-b7ad6b7169203331-01").result(
        timeout=30
    )
    got = pull_until(sub, subscription, 1)
    assert len(got) == 1
    sub.acknowledge(subscription=subscription, ack_ids=[got[0].ack_id])

    def spans() -> list[dict[str, object]]:
        out = []
        for line in gw.log_paths[-1].read_text().splitlines():
            if "gateway.observe.tracing: {" in line:
                out.append(json.loads(line.split("gateway.observe.tracing: ", 1)[1]))
        return out

    deadline = time.monotonic() + 15
    while True:
        linked = {str(s["span"]) for s in spans() if any(lk["trace_id"] == trace_id for lk in s["links"])}  # type: ignore[attr-defined]
        if linked >= {f"publish {topic}", f"deliver {subscription}"} or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert linked == {f"publish {topic}", f"deliver {subscription}"}


def test_push_outcomes_and_window(start_gateway: GatewayFactory, names: Callable[[str], str]) -> None:
    from tests.e2e.test_push import Endpoint

    statuses = iter([503, 404, 200])
    with Endpoint(lambda _: (next(statuses, 200), 0.0)) as endpoint:
        gw = start_gateway()
        pub, _, topic, subscription = topic_and_subscription(
            gw, names, push_config={"push_endpoint": endpoint.url()}
        )
        pub.publish(topic, b"pushed").result(timeout=30)
        assert endpoint.wait(lambda rs: len(rs) >= 3, 30)

        def outcome(cls: str) -> float | None:
            return value(
                samples,
                "pubsub_subscription_push_request_count_total",
                subscription=subscription,
                response_class=cls,
            )

        samples = wait_for(
            gw,
            lambda m: value(m, "pubsub_subscription_ack_message_count_total", subscription=subscription) == 1,
        )
        assert (outcome("remote_server_5xx"), outcome("remote_server_4xx"), outcome("ack")) == (1, 1, 1)
        assert outcome("unreachable") == outcome("deadline_exceeded") == outcome("invalid") == 0
        assert value(samples, "pubsub_subscription_sent_message_count_total", subscription=subscription) == 3
        assert value(samples, "pubsub_subscription_nack_requests_total", subscription=subscription) == 2
        window = value(samples, "pubsub_gateway_push_window", subscription=subscription)
        assert window is not None and window >= 1
        assert value(samples, "pubsub_subscription_num_outstanding_messages", subscription=subscription) == 0
