"""What can be checked of gateway/testing without a broker or a Docker engine."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.testing import containers, pytest_plugin
from gateway.testing.server import GatewayServer


def test_the_plugin_is_cheap_to_load_and_starts_nothing_by_itself() -> None:
    """Loaded in every pytest run where the package is installed: it may import pytest and the
    standard library, not grpc, Kafka's client or the server, and no fixture is autouse."""
    code = (
        "import sys, gateway.testing.pytest_plugin; "
        "print(sorted(m for m in ('grpc', 'confluent_kafka', 'gateway.server', 'gateway.kafka') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    for name in ("pubsub_gateway", "pubsub_project"):
        marker = getattr(pytest_plugin, name)._fixture_function_marker
        assert marker.scope == "session" and not marker.autouse


def test_the_server_runs_serve_on_loopback_and_a_free_port() -> None:
    server = GatewayServer(["--kafka-bootstrap", "broker:9092"])
    cmd = server.command()
    assert cmd[1:4] == ["-m", "gateway", "serve"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "0"
    assert cmd[-2:] == ["--kafka-bootstrap", "broker:9092"]
    assert not server.running
    server.stop()  # idempotent, also before a start


def test_the_containers_kafka_is_one_kraft_node_the_gateway_reaches_by_alias() -> None:
    env = containers.kafka_environment()
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka:9093"
    assert containers.gateway_environment()["PUBSUB_GATEWAY_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert containers.KAFKA_IMAGE.startswith("apache/kafka:")


# docker-py leaves the socket of its failed connection to the collector: not ours to close.
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_container_class_without_a_docker_engine_fails_at_start_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No engine runs on our machines (an engine-less one is made sure of): this is all of
    PubSubKafkaContainer that the suite can run."""
    docker_errors = pytest.importorskip("docker.errors")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    pubsub = containers.PubSubKafkaContainer(gateway_args=("--log-level", "DEBUG"))  # touches no engine
    with pytest.raises(docker_errors.DockerException):
        pubsub.start()
    assert pubsub.gateway is None and pubsub.kafka is None
    with pytest.raises(RuntimeError, match="not started"):
        pubsub.get_emulator_host()
    pubsub.stop()
    gc.collect()  # the unclosed socket is reported now, inside this test's filters
