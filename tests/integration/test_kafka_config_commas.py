"""A Kafka password with commas (and `=`, `:`, `#`, backslashes) reaches librdkafka intact, through
the newline form of PUBSUB_GATEWAY_KAFKA_CONFIG and through a --kafka-config-file properties file,
and never appears in the gateway's log.

The broker is secured (SASL_SSL, SCRAM-SHA-512, an authorizer): a password cut at a comma would
not log in, and the gateway would not start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.kafka import acls
from gateway.kafka.local import LocalKafka
from tests.e2e.clients import clients, pull_until
from tests.gateways import GatewayProcess
from tests.secured import grant, secured_kafka

pytestmark = pytest.mark.integration

PROJECT = "comma-project"
USER = "comma-user"
PASSWORD = f"pa,ss=w:o#rd\\{uuid.uuid4().hex[:8]},"
PREFIXES = ("__comma_env", "__comma_file")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    with secured_kafka(tmp_path_factory.mktemp("comma-kafka"), {USER: PASSWORD}) as broker:
        for prefix in PREFIXES:
            grant(broker, f"User:{USER}", acls.gateway_grants(prefix, [PROJECT]))
        yield broker


def _serves(gw: GatewayProcess) -> None:
    pub, sub = clients(gw)
    topic = f"projects/{PROJECT}/topics/t-{uuid.uuid4().hex[:8]}"
    subscription = f"projects/{PROJECT}/subscriptions/s-{uuid.uuid4().hex[:8]}"
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    pub.publish(topic, b"through SASL").result(timeout=30)
    assert [m.message.data for m in pull_until(sub, subscription, 1)] == [b"through SASL"]


def _log_keeps_the_secret(gw: GatewayProcess) -> None:
    text = gw.log_paths[-1].read_text(errors="replace")
    assert "settings:" in text and "'sasl.password': '***'" in text
    assert PASSWORD not in text and PASSWORD[:12] not in text


def test_a_password_with_commas_in_the_variable(
    kafka: LocalKafka, log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert kafka.security is not None
    entries = kafka.security.librdkafka(USER, PASSWORD)
    monkeypatch.setenv("PUBSUB_GATEWAY_KAFKA_CONFIG", "\n".join(f"{k}={v}" for k, v in entries.items()))
    gw = GatewayProcess(kafka.bootstrap, PREFIXES[0], log_dir).start()
    try:
        _serves(gw)
    finally:
        gw.terminate()
    _log_keeps_the_secret(gw)


def test_a_password_with_commas_in_a_properties_file(
    kafka: LocalKafka, log_dir: Path, tmp_path: Path
) -> None:
    assert kafka.security is not None
    entries = kafka.security.librdkafka(USER, PASSWORD)

    def escaped(value: str) -> str:  # the properties form of a value: backslashes doubled
        return value.replace("\\", "\\\\")

    path = tmp_path / "client.properties"
    path.write_text(
        "# as in Kafka's client.properties\n"
        f"bootstrap.servers={kafka.bootstrap}\n"
        + "".join(f"{key} = {escaped(value)}\n" for key, value in entries.items()),
        encoding="utf-8",
    )
    gw = GatewayProcess(kafka.bootstrap, PREFIXES[1], log_dir, "--kafka-config-file", str(path)).start()
    try:
        _serves(gw)
    finally:
        gw.terminate()
    _log_keeps_the_secret(gw)
