"""A restarted broker loses no acknowledged state and no message; the gateway carries on."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.kafka.local import LocalKafka
from tests.e2e.clients import clients, pull_nothing, pull_until
from tests.gateways import GatewayProcess, kafka_version

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_gateway_survives_a_broker_restart(
    tmp_path: Path, log_dir: Path, names: Callable[[str], str]
) -> None:
    kafka = LocalKafka(data_dir=tmp_path / "kafka", port=_free_port(), heap_mb=384, version=kafka_version())
    bootstrap = kafka.start()
    gw = GatewayProcess(bootstrap, f"br{uuid.uuid4().hex[:6]}", log_dir).start()
    try:
        pub, sub = clients(gw)
        topic, subscription = names("topics"), names("subscriptions")
        pub.create_topic(name=topic)
        sub.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=10)
        for f in [pub.publish(topic, f"m{i}".encode()) for i in range(40)]:
            f.result(timeout=30)
        got = pull_until(sub, subscription, 40)
        acked = [m for m in got if int(m.message.data[1:]) % 2 == 0]
        sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in acked])

        kafka.stop()
        # While the broker is down a publish waits; it completes once the broker is back.
        result: list[str] = []
        publisher = threading.Thread(
            target=lambda: result.append(pub.publish(topic, b"during-outage").result(timeout=120))
        )
        publisher.start()
        time.sleep(3)
        kafka.start()
        publisher.join(120)
        assert result, "a publish during the outage completed after the restart"

        want = {m.message.data for m in got} - {m.message.data for m in acked} | {b"during-outage"}
        back = pull_until(sub, subscription, len(want), timeout=90)
        assert {m.message.data for m in back} == want
        sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in back])
        assert pull_nothing(sub, subscription, 12.0) == []
    finally:
        gw.kill()
        kafka.stop()
