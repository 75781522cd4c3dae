"""docker/compose.yaml brought up as docker/README.md says, on ports of its own: the official
client publishes and pulls through them; `docker compose stop` and `down` then `up` keep the
resources, every unacknowledged message and every acknowledgement; the spark profile writes
Parquet for a subscription and acknowledges it."""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from tests.containers.conftest import LOCAL, ROOT, record, run
from tests.doc_examples import example
from tests.gateways import emulator_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
COMPOSE = "docker compose -f docker/compose.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stack:
    def __init__(self, engine: dict[str, str]) -> None:
        self.port = _free_port()
        self.env = {
            **os.environ,
            **engine,
            **LOCAL,
            "COMPOSE_PROJECT_NAME": f"pgw-{uuid.uuid4().hex[:8]}",
            "GATEWAY_HOST_PORT": str(self.port),
            "KAFKA_HOST_PORT": str(_free_port()),
            "EXPORT_TRIGGER_SECONDS": "5",
            "GATEWAY_BOOTSTRAP": "local,declared:declared-worker",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        self.address = f"localhost:{self.port}"
        # what compose-up's `export` line left in the reader's shell, for the commands after it
        self.env["PUBSUB_EMULATOR_HOST"] = self.address

    def sh(self, script: str, timeout: float = 900) -> str:
        """A doc's commands, on this stack's port."""
        script = script.replace("localhost:8085", self.address)
        return run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=self.env, timeout=timeout).stdout

    def compose(self, *args: str, timeout: float = 600) -> str:
        return self.sh(" ".join([COMPOSE, *args]), timeout)

    def healthy(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            status = self.compose("ps", "--format", "'{{.Service}} {{.Health}}'")
            if "gateway healthy" in status:
                return
            assert time.monotonic() < deadline, status + self.compose("logs", "--tail", "50")
            time.sleep(1)

    def clients(self) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]:
        with emulator_env(self.address):
            return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()


@pytest.fixture(scope="module")
def stack(engine: dict[str, str]) -> Iterator[Stack]:
    one = Stack(engine)
    started = time.monotonic()
    one.sh(example("docker/README.md", "compose-up"))
    one.healthy()
    record("compose_up_build_seconds", round(time.monotonic() - started, 1))
    yield one
    one.sh(example("docker/README.md", "compose-down"))
    assert one.env["COMPOSE_PROJECT_NAME"] not in run(["docker", "volume", "ls"], env=one.env).stdout


def _pull(
    sub: pubsub_v1.SubscriberClient, subscription: str, want: int, ack: bool, seconds: float = 60
) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        batch = sub.pull(subscription=subscription, max_messages=min(100, want - len(got)), timeout=10)
        got += [m.message.data for m in batch.received_messages]
        if ack and batch.received_messages:
            sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in batch.received_messages])
    return got


def _nothing(sub: pubsub_v1.SubscriberClient, subscription: str, seconds: float = 8) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += [
            m.message.data
            for m in sub.pull(subscription=subscription, max_messages=100, timeout=10).received_messages
        ]
    return got


def test_the_stack_keeps_messages_and_acks_across_stop_and_down(stack: Stack) -> None:
    pub, sub = stack.clients()
    # declared in GATEWAY_BOOTSTRAP: there once the gateway is healthy
    declared = sub.get_subscription(subscription="projects/local/subscriptions/declared-worker")
    assert declared.topic == "projects/local/topics/declared"
    topic, subscription = "projects/local/topics/orders", "projects/local/subscriptions/orders-audit"
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=10)
    sent = [f"order {i}".encode() for i in range(100)]
    for future in [pub.publish(topic, data, source="compose") for data in sent]:
        future.result(timeout=30)
    acked = _pull(sub, subscription, 40, ack=True)
    assert len(set(acked)) == 40
    leased = _pull(sub, subscription, 20, ack=False)  # held, not acknowledged, when the stack stops
    assert len(leased) == 20 and not set(leased) & set(acked)

    started = time.monotonic()
    stack.compose("stop")
    stack.compose("start")
    stack.healthy()
    record("compose_stop_start_seconds", round(time.monotonic() - started, 1))
    pub, sub = stack.clients()
    rest = _pull(sub, subscription, 60, ack=True, seconds=120)
    assert sorted(rest) == sorted(set(sent) - set(acked)), "after stop: every unacked message, no acked one"
    late = [f"late {i}".encode() for i in range(10)]
    for future in [pub.publish(topic, data) for data in late]:
        future.result(timeout=30)

    stack.compose("down")  # not -v: the volumes stay
    stack.compose("up", "-d")
    stack.healthy()
    pub, sub = stack.clients()
    assert pub.get_topic(topic=topic).name == topic
    assert sub.get_subscription(subscription=subscription).ack_deadline_seconds == 10
    after = _pull(sub, subscription, 10, ack=True, seconds=120)
    assert sorted(after) == sorted(late), "after down and up: the unacked ones, and nothing acknowledged"
    assert _nothing(sub, subscription) == []


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # py4j's sockets, as in tests/spark
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_spark_profile_exports_a_subscription_to_parquet(stack: Stack, tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    started = time.monotonic()
    stack.sh(example("docker/README.md", "compose-export"), timeout=1800)
    record("spark_export_up_seconds", round(time.monotonic() - started, 1))
    pub, sub = stack.clients()
    topic, subscription = "projects/local/topics/events", "projects/local/subscriptions/export"
    sent = {f"event {i}".encode() for i in range(200)}
    for future in [pub.publish(topic, data, kind="test") for data in sent]:
        future.result(timeout=30)
    deadline = time.monotonic() + 420
    found = ""
    while ".parquet" not in found:
        assert time.monotonic() < deadline, stack.compose(
            "--profile", "spark", "logs", "--tail", "80", "spark-export"
        )
        time.sleep(5)
        found = stack.compose(
            "--profile",
            "spark",
            "exec",
            "-T",
            "spark-export",
            "sh",
            "-c",
            "'find /export/data -name \"*.parquet\" 2>/dev/null || true'",
        )
    record("spark_export_first_file_seconds", round(time.monotonic() - started, 1))
    # the job acknowledges what it committed: the subscription empties
    deadline = time.monotonic() + 180
    spark = SparkSession.builder.master("local[1]").appName("read-export").getOrCreate()
    try:
        for attempt in range(1000):
            copy = tmp_path / f"copy-{attempt}"
            stack.compose("--profile", "spark", "cp", "spark-export:/export/data", str(copy))
            rows = {bytes(r.data) for r in spark.read.parquet(str(copy)).select("data").collect()}
            if rows >= sent or time.monotonic() > deadline:
                break
            time.sleep(10)
    finally:
        spark.stop()
    assert rows == sent
    assert _nothing(sub, subscription) == [], "the export job acknowledged what it wrote"
