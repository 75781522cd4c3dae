"""pytest plugin of `pubsub-kafka-gateway[testing]`: a Pub/Sub gateway for your tests.

Registered by the `pytest11` entry point, so installing the extra is enough. It only declares
fixtures and three ini options; nothing starts unless a test asks for a fixture by name:

- `pubsub_gateway` (session): a `pubsub-gateway serve` subprocess on an embedded Kafka broker
  (Java 17+), PUBSUB_EMULATOR_HOST set to it while the session runs (the previous value, or its
  absence, restored after). The official clients made after that reach it. Its value has
  `address`, `rest_address`, `kafka_bootstrap`, `project`, `topic(name)`, `subscription(name)`.
- `pubsub_project` (session): the project id for your resources (ini `pubsub_gateway_project`,
  default `test-project`).

Ini options (pytest.ini, pyproject.toml's [tool.pytest.ini_options]):
- `pubsub_gateway_args`: more flags of `pubsub-gateway serve`, e.g. `--kafka-bootstrap
  localhost:9092` to run on your own broker instead of an embedded one;
- `pubsub_gateway_address`: a gateway already running (HOST:PORT); nothing is started;
- `pubsub_gateway_project`.

`pytest -p no:pubsub_kafka_gateway` turns the plugin off.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

import pytest

from gateway.testing.server import GatewayServer


@dataclasses.dataclass(frozen=True, slots=True)
class PubSubGateway:
    address: str  # gRPC and REST, HOST:PORT: what PUBSUB_EMULATOR_HOST is set to
    rest_address: str
    kafka_bootstrap: str  # the broker the gateway uses ("" for a gateway given by address)
    project: str

    def topic(self, name: str) -> str:
        return f"projects/{self.project}/topics/{name}"

    def subscription(self, name: str) -> str:
        return f"projects/{self.project}/subscriptions/{name}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "pubsub_gateway_args",
        "more flags of `pubsub-gateway serve` for the pubsub_gateway fixture",
        type="args",
        default=[],
    )
    parser.addini(
        "pubsub_gateway_address", "use this running gateway (HOST:PORT) instead of starting one", default=""
    )
    parser.addini(
        "pubsub_gateway_project", "the project of the pubsub_project fixture", default="test-project"
    )


@pytest.fixture(scope="session")
def pubsub_project(pytestconfig: pytest.Config) -> str:
    return str(pytestconfig.getini("pubsub_gateway_project"))


@pytest.fixture(scope="session")
def pubsub_gateway(
    pytestconfig: pytest.Config, pubsub_project: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PubSubGateway]:
    given = str(pytestconfig.getini("pubsub_gateway_address"))
    server: GatewayServer | None = None
    if given:
        gateway = PubSubGateway(given, given, "", pubsub_project)
    else:
        log_file = tmp_path_factory.mktemp("pubsub-gateway") / "gateway.log"
        server = GatewayServer(list(pytestconfig.getini("pubsub_gateway_args")), log_file=log_file).start()
        gateway = PubSubGateway(server.address, server.rest_address, server.kafka_bootstrap, pubsub_project)
    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = gateway.address
    try:
        yield gateway
    finally:
        if previous is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = previous
        if server is not None:
            server.stop()
