"""Run a real single-node Apache Kafka broker (KRaft, combined mode) as a child JVM.

The broker jars come from Maven Central via ``broker-pom.xml`` and are cached under
:func:`default_cache_dir`; only the first resolution needs ``mvn`` and the network.

    with LocalKafka() as kafka:
        produce_to(kafka.bootstrap)

``python -m gateway.kafka.local`` runs one in the foreground until Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import ctypes.util
import fcntl
import hashlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, Self

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.3.1"
"""Must match ``kafka.version`` in broker-pom.xml."""

_HERE = Path(__file__).resolve().parent
_POM = _HERE / "broker-pom.xml"
_LOG4J_CONFIG = _HERE / "broker-log4j2.properties"
_MARKER = "resolved.ok"
_MVN_TIMEOUT = 900.0
_FORMAT_TIMEOUT = 120.0
_LOG_TAIL_BYTES = 6000
_NODE_ID = 1
_PR_SET_PDEATHSIG = 1
_TMP_PREFIX = "local-kafka-"


# --------------------------------------------------------------------------- cache / resolution


def default_cache_dir() -> Path:
    """``$PUBSUB_GATEWAY_CACHE`` or ``~/.cache/pubsub-gateway``."""
    env = os.environ.get("PUBSUB_GATEWAY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pubsub-gateway"


def _pom_digest() -> str:
    return hashlib.sha256(_POM.read_bytes()).hexdigest()


def _is_resolved(home: Path) -> bool:
    marker = home / _MARKER
    try:
        return marker.read_text().strip() == _pom_digest() and any((home / "libs").glob("*.jar"))
    except OSError:
        return False


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock, so concurrent processes resolve only once."""
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def resolve_broker(cache_dir: Path) -> Path:
    """Return the directory holding the broker jars; runs ``mvn`` only if not cached yet."""
    home = cache_dir / f"kafka-{KAFKA_VERSION}"
    if _is_resolved(home):
        return home / "libs"
    home.mkdir(parents=True, exist_ok=True)
    with _file_lock(home / ".lock"):
        if not _is_resolved(home):
            _download(home)
    return home / "libs"


def _download(home: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Apache Maven ('mvn') is needed once to fetch the Kafka broker jars")
    staging = home / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copyfile(_POM, home / "pom.xml")  # mvn may write next to the pom; keep the package clean
    cmd = [mvn, "-q", "-B", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    log.info("resolving Apache Kafka %s from Maven Central into %s", KAFKA_VERSION, home)
    started = time.monotonic()
    result = subprocess.run(cmd, cwd=home, capture_output=True, text=True,
                            timeout=_MVN_TIMEOUT, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-_LOG_TAIL_BYTES:]
        raise RuntimeError(f"mvn failed to resolve Kafka {KAFKA_VERSION} (exit {result.returncode}):\n{tail}")
    shutil.rmtree(home / "libs", ignore_errors=True)
    staging.rename(home / "libs")
    (home / _MARKER).write_text(_pom_digest() + "\n")
    log.info("resolved Kafka %s in %.1fs", KAFKA_VERSION, time.monotonic() - started)


# --------------------------------------------------------------------------- process helpers


def _pdeathsig_preexec() -> Callable[[], None]:
    """A preexec_fn making the child get SIGTERM when the spawning thread's process dies."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


# PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process.
# Children spawned from non-main threads are therefore forked from this one long-lived
# thread, which only ends at interpreter shutdown.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-kafka-spawn")


def _popen(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    def spawn() -> subprocess.Popen[bytes]:
        # preexec_fn only calls prctl/getppid/kill: async-signal-safe enough after fork.
        return subprocess.Popen(cmd, preexec_fn=_pdeathsig_preexec(), **kwargs)

    if threading.current_thread() is threading.main_thread():
        return spawn()
    return _spawner.submit(spawn).result()


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise RuntimeError("a Java 17+ runtime ('java') is needed to run the local Kafka broker")
    return java


def _free_ports(count: int) -> list[int]:
    """Distinct currently free TCP ports on 127.0.0.1."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _random_cluster_id() -> str:
    """A Kafka-style Uuid string (URL-safe base64 of 16 bytes, never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


_ERROR_LINE = re.compile(r"^\[[^]]*\] (?:ERROR|FATAL) |^[\w.$]+(?:Exception|Error): ")


def _log_report(path: Path, since: int = 0) -> str:
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


def _sweep_stale_tmp_dirs() -> None:
    """Remove temporary data dirs left behind by processes that were killed (kill -9)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_TMP_PREFIX}*-*"):
        owner = path.name[len(_TMP_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not _pid_alive(int(owner)):
            log.debug("removing stale local Kafka dir %s", path)
            shutil.rmtree(path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------- broker config


def _server_properties(data: Path, broker_port: int, controller_port: int) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(_NODE_ID),
        "controller.quorum.voters": f"{_NODE_ID}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data / "kraft-logs"),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "log.cleaner.enable": "true",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),  # default 128 MiB is on-heap
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "num.replica.fetchers": "1",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


# --------------------------------------------------------------------------- the broker


_running: set[LocalKafka] = set()  # strong refs: an unreferenced broker is still stopped at exit


@atexit.register
def _stop_all() -> None:
    for kafka in list(_running):
        kafka.stop()


class LocalKafka:
    """A single-node Kafka broker+controller JVM bound to 127.0.0.1.

    ``data_dir=None`` uses a fresh temporary directory removed by :meth:`stop`; a given
    ``data_dir`` is formatted once and reused, so topics and offsets survive restarts.
    ``port=0`` picks a free port for the client listener. The broker's output goes to
    ``log_file`` (default ``<data dir>/broker.log``), never to the terminal.
    """

    def __init__(self, *, cache_dir: Path | None = None, data_dir: Path | None = None,
                 port: int = 0, heap_mb: int = 384, log_file: Path | None = None) -> None:
        self._cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
        self._data_dir = data_dir
        self._port = port
        self._heap_mb = heap_mb
        self._log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_fh: IO[bytes] | None = None
        self._tmp: Path | None = None
        self._bootstrap: str | None = None
        self._log_path: Path | None = None
        self._log_start = 0

    # ----------------------------------------------------------------- public API

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the running broker."""
        if self._bootstrap is None:
            raise RuntimeError("LocalKafka is not running")
        return self._bootstrap

    @property
    def pid(self) -> int | None:
        """PID of the broker JVM while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the broker JVM is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_file(self) -> Path:
        """Where the broker's stdout/stderr go (default ``<data dir>/broker.log``)."""
        if self._log_path is not None:
            return self._log_path
        if self._log_file is not None:
            return self._log_file
        if self._data_dir is not None:
            return self._data_dir / "broker.log"
        raise RuntimeError("the broker log of a temporary LocalKafka is only known once started")

    def start(self, timeout: float = 180.0) -> str:
        """Start the broker and wait until it serves requests; return the bootstrap address.

        ``timeout`` bounds formatting, JVM start-up and readiness; a first-time jar
        download (``mvn``) is bounded separately.
        """
        if self.running:
            return self.bootstrap
        self.stop()  # reap a broker that died since the last start
        libs = resolve_broker(self._cache_dir)
        deadline = time.monotonic() + timeout
        try:
            self._launch(libs, deadline)
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        rss = _rss_mb(self._proc.pid) if self._proc is not None else None
        log.info("Kafka %s ready at %s (pid %s, rss %s MiB)", KAFKA_VERSION, self._bootstrap,
                 self.pid, f"{rss:.0f}" if rss is not None else "?")
        return self.bootstrap

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after ``timeout``); safe to call repeatedly."""
        proc, self._proc, self._bootstrap = self._proc, None, None
        _running.discard(self)
        if proc is not None:
            _terminate(proc, timeout)
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ----------------------------------------------------------------- internals

    def _data(self) -> Path:
        if self._data_dir is not None:
            return self._data_dir
        if self._tmp is None:
            _sweep_stale_tmp_dirs()
            self._tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-"))
        return self._tmp

    def _launch(self, libs: Path, deadline: float) -> None:
        data = self._data()
        data.mkdir(parents=True, exist_ok=True)
        broker_port, controller_port = self._ports()
        props = data / "server.properties"
        props.write_text(_server_properties(data, broker_port, controller_port))
        self._log_path = self._log_file if self._log_file is not None else data / "broker.log"
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = self._log_path.open("ab")
        self._log_start = self._log_fh.tell()
        self._log_fh.write(f"\n==== LocalKafka {KAFKA_VERSION} starting {time.ctime()}\n".encode())
        self._log_fh.flush()
        if not (data / "kraft-logs" / "meta.properties").exists():
            self._format(libs, props, deadline)
        self._proc = _popen(self._java_cmd(libs, "kafka.Kafka", str(props)),
                            stdin=subprocess.DEVNULL, stdout=self._log_fh,
                            stderr=subprocess.STDOUT, start_new_session=True)
        _running.add(self)
        self._bootstrap = f"127.0.0.1:{broker_port}"
        log.debug("Kafka JVM pid %d starting at %s, log %s", self._proc.pid, self._bootstrap, self.log_file)

    def _ports(self) -> tuple[int, int]:
        free = _free_ports(2)
        if not self._port:
            return free[0], free[1]
        if not _port_free(self._port):
            raise RuntimeError(f"cannot start Kafka: 127.0.0.1:{self._port} is already in use")
        return self._port, free[0] if free[0] != self._port else free[1]

    def _java_cmd(self, libs: Path, main_class: str, *args: str) -> list[str]:
        return [
            _java(), f"-Xmx{self._heap_mb}m", f"-Xms{max(self._heap_mb // 2, 16)}m",
            "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", "-XX:-UsePerfData",
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={_LOG4J_CONFIG}",
            "-cp", str(libs / "*"), main_class, *args,
        ]

    def _format(self, libs: Path, props: Path, deadline: float) -> None:
        cmd = self._java_cmd(libs, "kafka.tools.StorageTool", "format", "--config", str(props),
                             "--cluster-id", _random_cluster_id())
        proc = _popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log_fh, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=max(1.0, min(_FORMAT_TIMEOUT, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            _terminate(proc, 5.0)
            raise RuntimeError(f"formatting Kafka storage timed out\n{self._report()}") from None
        if code != 0:
            raise RuntimeError(f"formatting Kafka storage failed (exit {code})\n{self._report()}")

    def _wait_ready(self, deadline: float) -> None:
        while True:
            self._check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"Kafka broker at {self._bootstrap} not ready in time\n{self._report()}")
            if _port_open(self.bootstrap) and _serves_metadata(self.bootstrap, min(remaining, 5.0)):
                return
            time.sleep(0.2)

    def _report(self) -> str:
        return _log_report(self.log_file, self._log_start)

    def _check_alive(self) -> None:
        code = self._proc.poll() if self._proc is not None else -1
        if code is not None:
            raise RuntimeError(f"Kafka broker JVM exited during start-up (exit {code})\n{self._report()}")


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("Kafka JVM %d ignored SIGTERM for %.0fs; killing it", proc.pid, timeout)
        proc.kill()
        proc.wait()


def _port_open(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def _serves_metadata(bootstrap: str, timeout: float) -> bool:
    """True once the broker answers a metadata request listing itself."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                         "socket.connection.setup.timeout.ms": 2000})
    try:
        return bool(admin.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return False


# --------------------------------------------------------------------------- CLI


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gateway.kafka.local",
                                     description="Run a local single-node Kafka broker until Ctrl-C.")
    parser.add_argument("--port", type=int, default=9092, help="client listener port (0 = any free port)")
    parser.add_argument("--data-dir", type=Path, help="persistent data directory (default: temporary)")
    parser.add_argument(
        "--cache-dir", type=Path,
        help="jar cache (default: $PUBSUB_GATEWAY_CACHE or ~/.cache/pubsub-gateway)",
    )
    parser.add_argument("--heap-mb", type=int, default=384)
    parser.add_argument("--log-file", type=Path, help="broker log (default: <data dir>/broker.log)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run a broker in the foreground; print its bootstrap address; stop on SIGINT/SIGTERM."""
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kafka = LocalKafka(cache_dir=args.cache_dir, data_dir=args.data_dir, port=args.port,
                       heap_mb=args.heap_mb, log_file=args.log_file)
    stop, started = threading.Event(), threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()  # also covers an interrupt swallowed by a C extension during start()
        if not started.is_set():  # abort start(), which cleans up after itself
            raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        kafka.start()
        started.set()
        print(kafka.bootstrap, flush=True)
        print(f"broker log: {kafka.log_file} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        while not stop.wait(1.0):
            if not kafka.running:
                print("Kafka broker exited unexpectedly; see the broker log", file=sys.stderr)
                return 1
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        kafka.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
