"""What `pubsub-gateway serve` says when it cannot start, as a user meets it: one line naming the
cause, exit status 1, no traceback."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.gateways import serve_command

pytestmark = pytest.mark.integration


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(serve_command(*args), capture_output=True, text=True, timeout=120, check=False)


def test_a_port_taken_is_said_in_one_line(kafka_bootstrap: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve("--kafka-bootstrap", kafka_bootstrap, "--port", str(port), "--internal-prefix", "taken")
    assert done.returncode == 1, done.stderr
    assert f"pubsub-gateway: cannot start: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "--port another port" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_no_broker_is_said_in_one_line() -> None:
    done = _serve("--kafka-bootstrap", "127.0.0.1:1", "--port", "0")
    assert done.returncode == 1, done.stderr
    assert "pubsub-gateway: cannot start: cannot reach Kafka at 127.0.0.1:1" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr
