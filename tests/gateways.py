"""Gateway processes for tests: real `pubsub-gateway serve` subprocesses on a real broker.

The gateway runs in its own process, as users run it (tests/inprocess runs one inside the test
process instead).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from gateway.shutdown import EXIT_SHUTDOWN_STUCK

READY_TIMEOUT = 90.0
_CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL}


def kafka_version() -> str:
    """The Kafka version the suite's own brokers run (PUBSUB_GATEWAY_TEST_KAFKA_VERSION)."""
    from gateway.kafka.brokerjars import KAFKA_VERSION

    return os.environ.get("PUBSUB_GATEWAY_TEST_KAFKA_VERSION") or KAFKA_VERSION


def serve_command(*args: str) -> list[str]:
    """`pubsub-gateway serve` run by this interpreter on a port the system picks, gRPC and REST
    on it as by default (`--rest-port 0` among `args` gives REST a port of its own), with `args`."""
    return [sys.executable, "-m", "gateway", "serve", "--port", "0", *args]


class GatewayProcess:
    def __init__(
        self, bootstrap: str, prefix: str, log_dir: Path, *extra: str, wrap: Sequence[str] = ()
    ) -> None:
        self.bootstrap = bootstrap
        self.wrap = list(wrap)  # a command the gateway runs under (tests/faults: setpriv --regid)
        self.prefix = prefix
        self.log_dir = log_dir
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""
        self.rest_address = ""
        self.ready: dict[str, str] = {}  # the READY line's fields (`workers` with --workers N)
        self._starts = 0
        self.log_paths: list[Path] = []

    def start(self) -> GatewayProcess:
        self._starts += 1
        log_path = self.log_dir / f"gateway-{self.prefix}-{id(self):x}-{self._starts}.log"
        self.log_paths.append(log_path)
        cmd = self.wrap + serve_command(
            "--kafka-bootstrap",
            self.bootstrap,
            "--internal-prefix",
            self.prefix,
            "--session-timeout-ms",
            "6000",
            "--checkpoint-interval-seconds",
            "0.5",
            "--pull-max-wait-seconds",
            "2",
            "--log-level",
            "INFO",
            *self.extra,
        )
        with open(log_path, "wb") as log_file:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file)
        ready = self.ready = _await_ready_fields(self.proc, log_path)
        self.address, self.rest_address = ready["grpc"], ready.get("rest", "")
        return self

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait. A gateway that had crashed (a fatal signal no test sends) fails the
        test that owns it, with the end of its log: the stacks faulthandler printed."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"the gateway did not exit within {timeout:g} s of SIGTERM; log:\n{self._log_tail()}"
            ) from None
        if -code in _CRASH_SIGNALS:
            raise AssertionError(
                f"the gateway crashed ({signal.Signals(-code).name}); log:\n{self._log_tail()}"
            )
        if code == EXIT_SHUTDOWN_STUCK:
            raise AssertionError(f"the gateway's shutdown got stuck; log:\n{self._log_tail()}")
        return code

    def _log_tail(self) -> str:
        return self.log_paths[-1].read_text(errors="replace")[-12000:]

    def restart(self) -> GatewayProcess:
        self.kill()
        return self.start()


def _await_ready(proc: subprocess.Popen[bytes], log_path: Path) -> str:
    return _await_ready_fields(proc, log_path)["grpc"]


def _await_ready_fields(proc: subprocess.Popen[bytes], log_path: Path) -> dict[str, str]:
    """The NAME=ADDRESS fields of the READY line (grpc, rest, kafka)."""
    assert proc.stdout is not None
    found: list[dict[str, str]] = []

    def read(stream: IO[bytes]) -> None:
        with stream:
            for raw in stream:
                line = raw.decode(errors="replace")
                if line.startswith("READY ") and not found:
                    found.append(dict(f.split("=", 1) for f in line.split()[1:] if "=" in f))

    threading.Thread(target=read, args=(proc.stdout,), daemon=True).start()
    deadline = time.monotonic() + READY_TIMEOUT
    while not found:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"gateway did not start; log:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.05)
    return found[0]


@contextlib.contextmanager
def emulator_env(address: str) -> Iterator[None]:
    """Point the official clients at a gateway, as users do."""
    old = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = address
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = old
