"""Session fixtures: one real Kafka broker for the whole run, and gateway processes on it.

The broker is, in order of preference:
- an existing cluster named by PUBSUB_GATEWAY_TEST_KAFKA (HOST:PORT);
- a testcontainers Kafka when PUBSUB_GATEWAY_TEST_TESTCONTAINERS=1 (needs a Docker engine);
- otherwise the embedded broker with Kafka's stock settings, fetched from Maven Central on first
  use (PUBSUB_GATEWAY_TEST_KAFKA_VERSION picks the version).
Integration tests never skip for lack of a broker: if none can be had, the run fails.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.gateways import GatewayProcess, kafka_version


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("PUBSUB_GATEWAY_TEST_KAFKA")
    if external:
        yield external
        return
    if os.environ.get("PUBSUB_GATEWAY_TEST_TESTCONTAINERS") == "1":
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    from gateway.kafka.local import STOCK, LocalKafka

    # Kafka's stock settings (topics auto-created on metadata requests, a 3 s initial rebalance
    # delay, a 6 s minimum session timeout): the gateway meets brokers as users run them.
    # PUBSUB_GATEWAY_TEST_KAFKA_VERSION runs another version (make test-kafka-versions).
    with LocalKafka(
        data_dir=tmp_path_factory.mktemp("kafka"), heap_mb=512, profile=STOCK, version=kafka_version()
    ) as kafka:
        yield kafka.bootstrap


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway-logs")


GatewayFactory = Callable[..., GatewayProcess]


@pytest.fixture
def start_gateway(kafka_bootstrap: str, log_dir: Path) -> Iterator[GatewayFactory]:
    """Start gateway processes for one test; all are stopped after it."""
    started: list[GatewayProcess] = []

    def start(*extra: str, prefix: str | None = None) -> GatewayProcess:
        gw = GatewayProcess(kafka_bootstrap, prefix or f"t{uuid.uuid4().hex[:8]}", log_dir, *extra)
        started.append(gw.start())
        return gw

    yield start
    for gw in started:
        gw.kill()


@pytest.fixture(scope="session")
def shared_gateway(kafka_bootstrap: str, log_dir: Path) -> Iterator[GatewayProcess]:
    """One gateway for the tests that need nothing special (they use unique resource names)."""
    gw = GatewayProcess(kafka_bootstrap, "shared", log_dir).start()
    yield gw
    gw.terminate()


@pytest.fixture
def names() -> Callable[[str], str]:
    """Unique resource names per test: names('topics') -> projects/test-project/topics/t-<uid>."""
    uid = uuid.uuid4().hex[:10]

    def make(collection: str, suffix: str = "") -> str:
        return f"projects/test-project/{collection}/{collection[:3]}-{uid}{suffix}"

    return make
