"""`pubsub-gateway serve` with no bootstrap runs the embedded broker and leaves no JVM behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.gateways import _await_ready, serve_command

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def _start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    log = tmp_path / "serve.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            serve_command(
                "--kafka-heap-mb",
                "256",
            ),
            stdout=subprocess.PIPE,
            stderr=err,
        )
    address = _await_ready(proc, log)
    assert address.startswith("127.0.0.1:")
    match = re.search(r"ready at 127\.0\.0\.1:\d+ \(pid (\d+)", log.read_text())
    assert match, log.read_text()[-2000:]
    jvm = int(match.group(1))
    assert _alive(jvm)
    return proc, jvm, log


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_stop_leaves_no_jvm(tmp_path: Path, sig: signal.Signals) -> None:
    proc, jvm, log = _start(tmp_path)
    proc.send_signal(sig)
    assert proc.wait(60) == 0, log.read_text()[-2000:]
    assert _gone(jvm, 30), "the embedded Kafka JVM outlived the gateway"


def test_kill_9_of_the_gateway_takes_the_jvm_down_too(tmp_path: Path) -> None:
    proc, jvm, _ = _start(tmp_path)
    proc.kill()
    proc.wait(10)
    assert _gone(jvm, 30), "the embedded Kafka JVM outlived a killed gateway"
