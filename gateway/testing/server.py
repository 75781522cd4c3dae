"""A `pubsub-gateway serve` subprocess on its own embedded Kafka broker, for tests.

    with GatewayServer() as gw:
        os.environ["PUBSUB_EMULATOR_HOST"] = gw.address

The gateway starts its broker itself (a JVM: Java 17+; its jars come from Maven Central on first
use, with `mvn`, and are cached in ~/.cache/pubsub-gateway), on free ports, with data in a
temporary directory removed when it stops. It binds 127.0.0.1 only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

# The first start on a machine fetches the broker's jars from Maven Central: minutes, not seconds.
READY_TIMEOUT = 300.0
STOP_TIMEOUT = 30.0


class GatewayError(RuntimeError):
    """The gateway did not start; the message ends with its log."""


class GatewayServer:
    """`args` are more flags of `pubsub-gateway serve` (e.g. `--kafka-bootstrap HOST:PORT` to
    use a running cluster instead of an embedded broker). The gateway's log goes to `log_file`
    (default: a temporary file)."""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        log_file: Path | None = None,
        python: str = sys.executable,
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        self.args = list(args)
        self.log_file = log_file
        self._python = python
        self._ready_timeout = ready_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self.address = ""  # HOST:PORT of gRPC (and REST, unless --rest-port gave REST its own)
        self.rest_address = ""
        self.kafka_bootstrap = ""

    def command(self) -> list[str]:
        return [self._python, "-m", "gateway", "serve", "--host", "127.0.0.1", "--port", "0", *self.args]

    def start(self) -> Self:
        if self._proc is not None:
            return self
        if self.log_file is None:
            fd, name = tempfile.mkstemp(prefix="pubsub-gateway-", suffix=".log")
            os.close(fd)
            self.log_file = Path(name)
        with open(self.log_file, "wb") as log:  # the child keeps its own descriptor
            self._proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log)
        try:
            fields = _await_ready(self._proc, self._ready_timeout)
        except GatewayError as exc:
            self.stop()
            raise GatewayError(f"{exc}; log {self.log_file}:\n{self._log_tail()}") from None
        self.address = fields["grpc"]
        self.rest_address = fields.get("rest", self.address)
        self.kafka_bootstrap = fields.get("kafka", "")
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not ended within STOP_TIMEOUT. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _log_tail(self) -> str:
        assert self.log_file is not None
        try:
            return self.log_file.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _await_ready(proc: subprocess.Popen[bytes], timeout: float) -> dict[str, str]:
    """The NAME=ADDRESS fields of the `READY grpc=... rest=... kafka=...` line serve prints."""
    assert proc.stdout is not None
    found: list[dict[str, str]] = []
    event = threading.Event()

    def read(stream: IO[bytes]) -> None:
        with stream:  # read to the end, so the gateway never blocks on a full pipe
            for raw in stream:
                line = raw.decode(errors="replace")
                if line.startswith("READY ") and not found:
                    found.append(dict(f.split("=", 1) for f in line.split()[1:] if "=" in f))
                    event.set()

    threading.Thread(target=read, args=(proc.stdout,), daemon=True, name="gateway-stdout").start()
    deadline = time.monotonic() + timeout
    while not event.wait(0.1):
        if proc.poll() is not None:
            raise GatewayError(f"the gateway exited with status {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise GatewayError(f"the gateway was not ready within {timeout:.0f} s")
    return found[0]
