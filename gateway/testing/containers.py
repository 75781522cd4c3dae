"""`PubSubKafkaContainer`: the gateway's image and Apache Kafka's, in Docker, for tests.

    with PubSubKafkaContainer() as pubsub:
        os.environ["PUBSUB_EMULATOR_HOST"] = pubsub.get_emulator_host()

Needs a Docker engine and the `testcontainers` package (`pip install testcontainers`), and the
gateway's image, built from this repository: `docker build -f docker/Dockerfile -t
pubsub-kafka-gateway .` (docs/testing.md). Kafka runs in KRaft mode from `apache/kafka`, reached
by the gateway on a network of their own as `kafka:9092`, exactly as docker/compose.yaml sets it
up; only the gateway's port is published to the host.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from gateway.kafka.brokerjars import KAFKA_VERSION

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network

GATEWAY_IMAGE = "pubsub-kafka-gateway:latest"
KAFKA_IMAGE = f"apache/kafka:{KAFKA_VERSION}"  # the version the embedded broker runs
GATEWAY_PORT = 8085
KAFKA_ALIAS = "kafka"
CLUSTER_ID = "0jC8geKlRYOQOjRdULzkVg"  # any base64 UUID: the image formats its storage with it
READY_TIMEOUT = 180.0


def kafka_environment(alias: str = KAFKA_ALIAS) -> dict[str, str]:
    """A one-node KRaft cluster (broker and controller in one process) that containers on its
    network reach as `alias:9092`. The image reads KAFKA_* variables as server properties; once
    any is given it uses none of its defaults, so every one it needs is here."""
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "CLUSTER_ID": CLUSTER_ID,
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{alias}:9092",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@{alias}:9093",
        # Kafka's own topics default to 3 replicas, which one broker cannot hold.
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        # One gateway: waiting 3 s for more group members only delays each subscription's first pull.
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
    }


def gateway_environment(bootstrap: str = f"{KAFKA_ALIAS}:9092") -> dict[str, str]:
    """The gateway on all interfaces of its container (the host reaches it through a published
    port), on the Kafka at `bootstrap`."""
    return {
        "PUBSUB_GATEWAY_KAFKA_BOOTSTRAP": bootstrap,
        "PUBSUB_GATEWAY_HOST": "0.0.0.0",  # noqa: S104 - inside the container; see docker/README.md
        "PUBSUB_GATEWAY_PORT": str(GATEWAY_PORT),
    }


class PubSubKafkaContainer:
    """Kafka and the gateway on a fresh Docker network; `get_emulator_host()` is what
    PUBSUB_EMULATOR_HOST should be. `gateway_args` are more flags of `pubsub-gateway serve`."""

    def __init__(
        self,
        image: str = GATEWAY_IMAGE,
        kafka_image: str = KAFKA_IMAGE,
        gateway_args: tuple[str, ...] = (),
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        self.image = image
        self.kafka_image = kafka_image
        self.gateway_args = gateway_args
        self.ready_timeout = ready_timeout
        self._network: Network | None = None
        self.kafka: DockerContainer | None = None
        self.gateway: DockerContainer | None = None

    def start(self) -> Self:
        try:
            from testcontainers.core.container import DockerContainer
            from testcontainers.core.network import Network
            from testcontainers.core.wait_strategies import LogMessageWaitStrategy
        except ImportError as exc:
            raise ImportError(
                "PubSubKafkaContainer needs testcontainers: pip install testcontainers"
            ) from exc
        try:
            self._network = Network().create()
            self.kafka = (
                DockerContainer(self.kafka_image, env=kafka_environment())
                .with_network(self._network)
                .with_network_aliases(KAFKA_ALIAS)
                .waiting_for(
                    LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(
                        int(self.ready_timeout)
                    )
                )
                .start()
            )
            gateway: Any = DockerContainer(self.image, env=gateway_environment()).with_network(self._network)
            if self.gateway_args:
                gateway = gateway.with_command(list(self.gateway_args))  # after the entrypoint's `serve`
            self.gateway = (
                gateway.with_exposed_ports(GATEWAY_PORT)
                .waiting_for(
                    LogMessageWaitStrategy("READY grpc=").with_startup_timeout(int(self.ready_timeout))
                )
                .start()
            )
        except BaseException:
            self.stop()
            raise
        return self

    def get_emulator_host(self) -> str:
        """HOST:PORT of the gateway's gRPC and REST, as the host sees it."""
        if self.gateway is None:
            raise RuntimeError("the container is not started")
        host = self.gateway.get_container_host_ip()
        return f"{host}:{self.gateway.get_exposed_port(GATEWAY_PORT)}"

    def stop(self) -> None:
        """Remove both containers and the network. Idempotent."""
        for container in (self.gateway, self.kafka):
            if container is not None and container._container is not None:
                container.stop()
        self.gateway = self.kafka = None
        if self._network is not None and self._network._network is not None:
            self._network.remove()
        self._network = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
