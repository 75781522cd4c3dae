"""The two images, built as docker/README.md says, and the gateway's run as it says: against a
broker, serving the official client, healthy by /readyz, as user 10001, the admin CLI inside,
and a clean exit on SIGTERM."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from google.cloud import pubsub_v1

from gateway.testing.containers import kafka_environment
from tests.containers.conftest import KAFKA_IMAGE, PYTHON_BASE, ROOT, image_mb, record, run
from tests.doc_examples import example
from tests.gateways import emulator_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def _local_build(command: str) -> str:
    """The documented `docker build` on the local base, with the host's network for pip."""
    return command.replace(
        "docker build ", f"docker build --build-arg PYTHON_IMAGE={PYTHON_BASE} --network host ", 1
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _build(command: str, tag: str, figure: str) -> None:
    started = time.monotonic()
    run(["bash", "-c", _local_build(command)], cwd=ROOT, timeout=1800)
    record(f"{figure}_image_build_seconds", round(time.monotonic() - started, 1))
    record(f"{figure}_image_mb", image_mb(tag))


@pytest.fixture(scope="module")
def images(engine: dict[str, str]) -> None:
    _build(example("docker/README.md", "docker-build"), "pubsub-kafka-gateway:latest", "gateway")
    _build(
        example("docker/README.md", "docker-build-spark"), "pubsub-kafka-gateway-spark:latest", "spark_export"
    )
    record("python_base_image_mb", image_mb(PYTHON_BASE))
    record("kafka_image_mb", image_mb(KAFKA_IMAGE))


@pytest.fixture
def broker(engine: dict[str, str]) -> Iterator[str]:
    """A Kafka container that others on its network reach as broker:9092; yields the network."""
    network, name = f"pgw-{uuid.uuid4().hex[:8]}", f"broker-{uuid.uuid4().hex[:8]}"
    run(["docker", "network", "create", network])
    env = [f"--env={k}={v}" for k, v in kafka_environment("broker").items()]
    run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--network",
            network,
            "--network-alias",
            "broker",
            "--env=KAFKA_HEAP_OPTS=-Xms256m -Xmx256m",
            *env,
            KAFKA_IMAGE,
        ]
    )
    deadline = time.monotonic() + 120
    while "Kafka Server started" not in run(["docker", "logs", name], check=False).stdout:
        assert time.monotonic() < deadline, run(["docker", "logs", name], check=False).stdout[-3000:]
        time.sleep(1)
    yield network
    run(["docker", "rm", "-f", name], check=False)
    run(["docker", "network", "rm", network], check=False)


def _state(name: str, field: str) -> str:
    return run(["docker", "inspect", name, "--format", "{{" + field + "}}"], check=False).stdout.strip()


def test_the_gateway_image_runs_as_documented(images: None, broker: str) -> None:
    port, name = _free_port(), f"gw-{uuid.uuid4().hex[:8]}"
    command = example("docker/README.md", "docker-run").strip()
    command = command.replace("docker run ", f"docker run --name {name} --network {broker} ", 1)
    command = command.replace("127.0.0.1:8085:8085", f"127.0.0.1:{port}:8085")
    started = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while _state(name, ".State.Health.Status") != "healthy":
            assert proc.poll() is None and time.monotonic() < deadline, run(
                ["docker", "logs", name], check=False
            )
            time.sleep(0.5)
        record("gateway_container_healthy_seconds", round(time.monotonic() - started, 1))
        assert run(["docker", "exec", name, "id", "-u"]).stdout.strip() == "10001"

        with emulator_env(f"localhost:{port}"):
            pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        topic, subscription = "projects/p/topics/in-docker", "projects/p/subscriptions/in-docker"
        pub.create_topic(name=topic)
        sub.create_subscription(name=subscription, topic=topic)
        sent = {f"m{i}".encode() for i in range(100)}
        for future in [pub.publish(topic, data, origin="docker") for data in sent]:
            future.result(timeout=30)
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while got != sent and time.monotonic() < deadline:
            batch = sub.pull(subscription=subscription, max_messages=100, timeout=10).received_messages
            got |= {m.message.data for m in batch}
            if batch:
                sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in batch])
        assert got == sent

        cli = example("docker/README.md", "docker-cli").replace("localhost:8085", f"localhost:{port}")
        assert topic in run(["bash", "-c", cli]).stdout

        run(["docker", "kill", "--signal", "TERM", name])
        assert proc.wait(60) == 0, "the container's exit status on SIGTERM"
    finally:
        run(["docker", "rm", "-f", name], check=False)
        if proc.poll() is None:
            proc.kill()
