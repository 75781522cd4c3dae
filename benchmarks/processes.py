"""The processes a run drives besides its generators: the Kafka broker (started, or given) and
gateway subprocesses; and the clean-up of what a run leaves on the broker."""

from __future__ import annotations

import contextlib
import functools
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from benchmarks import procstats

READY_TIMEOUT = 120.0


class GatewayProc:
    """`python -m gateway serve` as a subprocess; its address comes from the READY line."""

    def __init__(self, bootstrap: str, prefix: str, log_path: Path, *extra: str) -> None:
        cmd = [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--port",
            "0",
            "--kafka-bootstrap",
            bootstrap,
            "--internal-prefix",
            prefix,
            "--log-level",
            "WARNING",
            *_free_other_ports(),
            *extra,
        ]
        self.log_path = log_path
        with log_path.open("wb") as log_file:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file)
        self.address, self.rest_address = self._await_ready()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def pids(self) -> list[int]:
        """The gateway's processes: itself, and with `--workers N` its workers (its children)."""
        return [self.proc.pid, *procstats.children_of(self.proc.pid)]

    def _await_ready(self) -> tuple[str, str]:
        found: list[str] = []
        stdout = self.proc.stdout
        assert stdout is not None
        threading.Thread(target=_read_ready, args=(stdout, found), daemon=True).start()
        deadline = time.monotonic() + READY_TIMEOUT
        while not found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gateway did not start; log:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        return found[0], found[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@functools.cache
def _free_other_ports() -> tuple[str, ...]:
    """`--rest-port 0` when this gateway version serves REST too: two gateways on one machine
    must not both want its default port."""
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--help"], capture_output=True, text=True, check=False
    ).stdout
    return ("--rest-port", "0") if "--rest-port" in out else ()


def _read_ready(stream: IO[bytes], found: list[str]) -> None:
    with stream:
        for raw in stream:
            line = raw.decode(errors="replace")
            if line.startswith("READY ") and not found:
                fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
                found.append(fields["grpc"])
                found.append(fields.get("rest", ""))


@contextlib.contextmanager
def kafka_broker(bootstrap: str | None) -> Iterator[tuple[str, int | None, str]]:
    """(bootstrap, broker pid if we can see it, Kafka version): the given broker or a new one."""
    from gateway.kafka.local import KAFKA_VERSION, LocalKafka

    if bootstrap:
        pid = procstats.pid_listening_on(int(bootstrap.rsplit(":", 1)[1]))
        found = procstats.kafka_version_of(pid)
        yield bootstrap, pid, found or f"unknown (external broker; the embedded one is {KAFKA_VERSION})"
        return
    kafka = LocalKafka(heap_mb=512)
    started = kafka.start()
    try:
        yield started, kafka.pid, KAFKA_VERSION
    finally:
        kafka.stop()


def delete_topics(bootstrap: str, prefix: str) -> None:
    """Remove what a run left on the broker: its internal topics and raw consumer groups."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)]
        for fut in admin.delete_topics(topics, operation_timeout=30).values() if topics else []:
            fut.exception(60)
        groups = [
            g.group_id for g in admin.list_consumer_groups().result(30).valid if g.group_id.startswith(prefix)
        ]
        for fut in admin.delete_consumer_groups(groups).values() if groups else []:
            fut.exception(60)
    except Exception as exc:
        print(f"cleanup of {prefix}* on {bootstrap} incomplete: {exc}", file=sys.stderr)
