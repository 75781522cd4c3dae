"""The embedded broker is supervised: killed, it is started again at the same address and the
gateway goes on serving; past its restart budget the gateway exits with status 3."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from google.cloud import pubsub_v1

from tests.gateways import _await_ready_fields, emulator_env, serve_command

pytestmark = pytest.mark.integration

BACK_WITHIN = 120.0  # seconds for the supervisor to notice (1 s) and the JVM to serve again


class Served:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path, grpc: str, kafka: str) -> None:
        self.proc, self.log, self.grpc, self.kafka = proc, log, grpc, kafka


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(10)


def _serve(tmp_path: Path, started: list[Served], *extra: str) -> Served:
    log = tmp_path / "gateway.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            serve_command(
                "--kafka-data-dir",
                str(tmp_path / "kafka"),
                "--kafka-heap-mb",
                "256",
                *extra,
            ),
            stdout=subprocess.PIPE,
            stderr=err,
        )
    served = Served(proc, log, "", "")
    started.append(served)
    ready = _await_ready_fields(proc, log)
    served.grpc, served.kafka = ready["grpc"], ready["kafka"]
    return served


def _broker_pids(gateway_pid: int) -> list[int]:
    """The gateway's child processes running the Kafka broker's main class."""
    pids: list[int] = []
    for children in Path(f"/proc/{gateway_pid}/task").glob("*/children"):
        try:
            pids += [int(p) for p in children.read_text().split()]
        except OSError:
            continue  # the thread ended
    return [p for p in pids if b"kafka.Kafka" in _cmdline(p)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _kill_broker(served: Served) -> int:
    pids = _broker_pids(served.proc.pid)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    return pids[0]


def _serves_metadata(bootstrap: str) -> bool:
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "log_level": 0, "socket.connection.setup.timeout.ms": 2000}
    )
    try:
        admin.list_topics(timeout=3)
    except KafkaException:
        return False
    return True


def _create_topic(address: str) -> str:
    name = f"projects/test-project/topics/sup-{uuid.uuid4().hex[:10]}"
    with emulator_env(address):
        publisher = pubsub_v1.PublisherClient()
    publisher.create_topic(name=name, timeout=60)
    return name


def test_a_killed_broker_is_restarted_at_the_same_address(tmp_path: Path, serve: list[Served]) -> None:
    served = _serve(tmp_path, serve)
    before = _create_topic(served.grpc)
    killed = _kill_broker(served)

    deadline = time.monotonic() + BACK_WITHIN
    while not (_broker_pids(served.proc.pid) and _serves_metadata(served.kafka)):
        assert served.proc.poll() is None, served.log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"the broker is not back\n{served.log.read_text()[-3000:]}"
        time.sleep(0.5)
    assert _broker_pids(served.proc.pid) != [killed]

    after = _create_topic(served.grpc)  # the gateway serves on the restarted broker
    with emulator_env(served.grpc):
        publisher = pubsub_v1.PublisherClient()
    names = {t.name for t in publisher.list_topics(project="projects/test-project", timeout=30)}
    assert {before, after} <= names  # same data dir: nothing was lost

    text = served.log.read_text()
    assert f"(pid {killed}) was killed by SIGKILL; restarting it" in text, text[-3000:]
    assert str(tmp_path / "kafka" / "broker.log") in text
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(60) == 0, served.log.read_text()[-3000:]


def test_past_its_restart_budget_the_gateway_exits_3(tmp_path: Path, serve: list[Served]) -> None:
    served = _serve(tmp_path, serve, "--kafka-max-restarts", "0")
    _kill_broker(served)
    try:
        code = served.proc.wait(90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the gateway went on without its broker\n{served.log.read_text()[-3000:]}")
    text = served.log.read_text()
    assert code == 3, text[-3000:]
    log = tmp_path / "kafka" / "broker.log"
    assert f"pubsub-gateway: the embedded Kafka broker died and could not be restarted; see {log}" in text, (
        text[-3000:]
    )
    assert not _broker_pids(served.proc.pid)
