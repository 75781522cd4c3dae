"""Child JVMs of the local Kafka cluster: spawning them so they die with us, ports, logs."""

from __future__ import annotations

import base64
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
_LOG_TAIL_BYTES = 6000
TMP_PREFIX = "local-kafka-"


_DEATHSIG_EXEC = Path(__file__).with_name("deathsig_exec.py")

# PR_SET_PDEATHSIG fires when the *thread* that spawned the child exits, not the process.
# Children wanted from non-main threads are therefore spawned from this one long-lived
# thread, which only ends at interpreter shutdown.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-kafka-spawn")


def popen(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start cmd so that it gets SIGTERM when this process dies, also on kill -9.

    No preexec_fn: that makes subprocess fork() this threaded process and run Python in
    the child, which gRPC's fork handlers can abort (a JVM that "exits -6" before it ran).
    A small exec wrapper sets the death signal instead; the JVM keeps the wrapper's pid.
    """
    wrapped = [sys.executable, "-I", "-S", str(_DEATHSIG_EXEC), str(os.getpid()), *cmd]

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(wrapped, **kwargs)

    if threading.current_thread() is threading.main_thread():
        return spawn()
    return _spawner.submit(spawn).result()


def java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise RuntimeError("a Java 17+ runtime ('java') is needed to run the local Kafka broker")
    return java


def free_ports(count: int) -> list[int]:
    """Distinct currently free TCP ports on 127.0.0.1."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def random_cluster_id() -> str:
    """A Kafka-style Uuid string (URL-safe base64 of 16 bytes, never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


_ERROR_LINE = re.compile(r"^\[[^]]*\] (?:ERROR|FATAL) |^[\w.$]+(?:Exception|Error): ")


def log_report(path: Path, since: int = 0) -> str:
    """Error lines this run wrote to the broker log, then the log's tail."""
    try:
        with path.open("rb") as fh:
            fh.seek(since)
            text = fh.read().decode(errors="replace")
    except OSError as exc:
        return f"<broker log unavailable: {exc}>"
    errors = list(dict.fromkeys(ln for ln in text.splitlines() if _ERROR_LINE.match(ln)))[:12]
    head = "errors:\n" + "\n".join(errors) + "\n" if errors else ""
    return f"{head}broker log ({path}) tail:\n{text[-_LOG_TAIL_BYTES:]}"


def sweep_stale_tmp_dirs() -> None:
    """Remove temporary data dirs left behind by processes that were killed (kill -9)."""
    for path in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*-*"):
        owner = path.name[len(TMP_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not pid_alive(int(owner)):
            log.debug("removing stale local Kafka dir %s", path)
            shutil.rmtree(path, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("Kafka JVM %d ignored SIGTERM for %.0fs; killing it", proc.pid, timeout)
        proc.kill()
        proc.wait()


def port_open(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def serves_metadata(
    bootstrap: str, timeout: float, brokers: int = 1, config: Mapping[str, str] | None = None
) -> bool:
    """True once the cluster answers a metadata request listing all its brokers (`config`: how
    to log in, for a secured listener)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "log_level": 0,
            "socket.connection.setup.timeout.ms": 2000,
            **(config or {}),
        }
    )
    try:
        return len(admin.list_topics(timeout=timeout).brokers) >= brokers
    except KafkaException:
        return False
