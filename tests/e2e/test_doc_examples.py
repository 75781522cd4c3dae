"""The README's and the docs' shell examples, run as they are printed there.

Each test takes its block from the doc (tests/doc_examples.py) and changes only what belongs to
the machine: the gateway's address and the broker's, given through the environment or put in
place of `localhost:8085` / `broker:9092`, so that the commands meet this suite's broker and
gateways. Their output is checked where the doc says what they print."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import GatewayFactory
from tests.doc_examples import ROOT, example

VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PUBSUB_EMULATOR_HOST", "PUBSUB_GATEWAY_"))
    }
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"  # pubsub-gateway as after an install
    env.update(extra)
    return env


def _sh(
    script: str, cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    )
    return done


class _Served:
    """A long-running command of a doc (make run, serve), its READY line awaited, stopped by its
    process group at the end."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._log_file = open(log, "wb")  # noqa: SIM115 (closed by stop)
        self.proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            start_new_session=True,
        )
        self.ready: dict[str, str] = {}
        self._seen = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            self._lines(self.proc.stdout)

    def _lines(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode(errors="replace")
            if line.startswith("READY ") and not self.ready:
                self.ready = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
                self._seen.set()

    def wait_ready(self, timeout: float = 240) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while not self._seen.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"not ready (exit {self.proc.poll()}); log:\n{self.log.read_text()[-4000:]}"
                )
        return self.ready

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait(10)
        self._log_file.close()
        return code


@pytest.fixture
def served(tmp_path: Path) -> Iterator[list[_Served]]:
    started: list[_Served] = []
    yield started
    for one in started:
        one.stop()


def test_the_readme_quick_start_runs_in_its_three_commands(tmp_path: Path, served: list[_Served]) -> None:
    """`make run`, then the two lines of the second terminal, with make run's port and data
    directory moved (PUBSUB_GATEWAY_PORT, KAFKA_DATA) so that nothing of the checkout's own
    `make run` is touched; `examples/quickstart.py` is the program the README prints."""
    program = example("README.md", "readme-quick-start-program")
    assert (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8") == program
    lines = [line for line in example("README.md", "readme-quick-start").splitlines() if line.strip()]
    assert len(lines) == 3 and lines[0].split("#")[0].strip() == "make run"
    port = _free_port()
    env = _env(PUBSUB_GATEWAY_PORT=str(port), KAFKA_DATA=str(tmp_path / "kafka-data"))
    gateway = _Served(lines[0], ROOT, env, tmp_path / "make-run.log")
    served.append(gateway)
    assert gateway.wait_ready()["grpc"].endswith(f":{port}")
    second = "\n".join(lines[1:]).replace("localhost:8085", f"localhost:{port}")
    done = _sh(second, ROOT, _env(), timeout=120)
    promised = re.search(r"# prints: (.*)$", lines[2])
    assert promised is not None
    assert done.stdout.strip() == promised.group(1)
    assert gateway.stop() in (0, -signal.SIGTERM, 128 + signal.SIGTERM, 2)


def test_the_readme_wheel_installs_into_a_fresh_environment(tmp_path: Path) -> None:
    """The wheel built in the clone, installed with its dependencies into a venv of its own."""
    script = example("README.md", "readme-wheel")
    subprocess.run(["python3", "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    python = str(tmp_path / "venv" / "bin" / "python")
    dist = str(tmp_path / "dist")
    script = (
        script.replace("python3 ", f"{python} ")
        .replace("-w dist", f"-w {dist}")
        .replace(" dist/", f" {dist}/")
    )
    env = _env()
    env["PATH"] = f"{tmp_path / 'venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    done = _sh(script, ROOT, env, timeout=600)
    assert done.stdout.strip().splitlines()[-1].startswith("pubsub-gateway 0.")


def test_serving_on_your_own_kafka(kafka_bootstrap: str, tmp_path: Path, served: list[_Served]) -> None:
    command = example("README.md", "readme-own-kafka").strip()
    port = _free_port()
    command = command.replace("broker:9092", kafka_bootstrap).replace("--port 8085", f"--port {port}")
    env = _env(PUBSUB_GATEWAY_INTERNAL_PREFIX=f"d{uuid.uuid4().hex[:8]}")
    gateway = _Served(command, ROOT, env, tmp_path / "serve.log")
    served.append(gateway)
    gateway.wait_ready()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as answer:
        assert answer.status == 200
    assert "AUTHENTICATION IS OFF" in gateway.log.read_text()  # 0.0.0.0 and no auth: said at start


def _project() -> str:
    """A project of the test's own: Kafka topic names are the project's, and the suite's gateways
    share a broker."""
    return f"doc-{uuid.uuid4().hex[:8]}"


def test_the_readme_cli_example(start_gateway: GatewayFactory, tmp_path: Path) -> None:
    gw = start_gateway()
    script = example("README.md", "readme-cli").replace("my-project", _project())
    _sh(script, tmp_path, _env(PUBSUB_EMULATOR_HOST=gw.address), timeout=300)
    drained = [json.loads(line)["message"] for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert sorted(int(base64.b64decode(m["data"])) for m in drained) == list(range(1, 1001))
    assert all(m["attributes"] == {"source": "cli"} for m in drained)


def test_the_rest_curl_session(start_gateway: GatewayFactory, tmp_path: Path) -> None:
    gw = start_gateway()
    script = example("docs/rest.md", "rest-curl").replace("localhost:8085", gw.rest_address)
    script = script.replace("my-project", _project()).replace("curl ", "curl -sS ")
    out = _sh(script, tmp_path, _env(), timeout=120).stdout
    pulled = re.search(r'"data": ?"([^"]*)", ?"attributes": ?\{"k": ?"v"\}', out)
    assert pulled is not None and base64.b64decode(pulled.group(1)) == b"hello", out[:3000]
    assert '"openapi"' in out


def test_gateway_server_outside_pytest() -> None:
    """The context manager's example, with a topic made inside its block through the official
    client, which finds the gateway by the variable the example sets."""
    code = example("docs/testing.md", "testing-gateway-server").rstrip("\n")
    check = "\n".join(
        [
            code,
            "    from google.cloud import pubsub_v1",
            "    print(pubsub_v1.PublisherClient().create_topic(name='projects/p-doc/topics/from-doc').name)",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "projects/p-doc/topics/from-doc"
