"""Run a real Apache Kafka cluster (KRaft, combined broker+controller nodes) as child JVMs.

One node by default; ``nodes=3`` starts three on loopback, each a voter of the controller quorum,
for tests that kill one. The broker jars come from Maven Central (see ``brokerjars.py``) and are
cached; only the first resolution needs ``mvn`` and the network.

Two sets of settings:
- ``STOCK``: Kafka's defaults, changed only where a cluster of that size cannot run without it
  (the replication of Kafka's own topics), as Kafka's own ``config/server.properties`` does. The
  test suite runs this, so that the gateway meets brokers as users run them: topics auto-created
  on metadata requests, a 3 s initial rebalance delay, a 6 s minimum session timeout.
- ``DEV``: what ``pubsub-gateway serve`` embeds for ``make run``; each difference from STOCK is
  justified where it is set.

    with LocalKafka() as kafka:
        produce_to(kafka.bootstrap)

``python -m gateway.kafka.local`` runs one in the foreground until Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Self

from gateway.kafka import jvm
from gateway.kafka.brokerjars import KAFKA_VERSION, default_cache_dir, resolve_broker
from gateway.kafka.secured import CONTROLLER_PROTOCOL, LISTENER, MECHANISM, SCRAM_ITERATIONS, Security

__all__ = ["DEV", "KAFKA_VERSION", "STOCK", "LocalKafka", "default_cache_dir", "resolve_broker"]
log = logging.getLogger(__name__)

_LOG4J_CONFIG = Path(__file__).resolve().parent / "broker-log4j2.properties"
_FORMAT_TIMEOUT = 120.0
STOCK = "stock"
DEV = "dev"


# --------------------------------------------------------------------------- broker config


def profile_settings(profile: str, nodes: int) -> dict[str, str]:
    """What a cluster of `nodes` nodes sets beyond node identity and listeners."""
    if profile not in (STOCK, DEV):
        raise ValueError(f"unknown broker profile {profile!r}")
    # Kafka's own topics default to 3 replicas (2 in sync), which fewer brokers cannot hold.
    replicas, isr = str(min(nodes, 3)), str(min(nodes, 2))
    settings = {
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": isr,
    }
    if profile == DEV:
        settings.update(
            {
                # One gateway on a laptop: waiting 3 s for more group members to join only delays
                # the first pull of every new subscription.
                "group.initial.rebalance.delay.ms": "0",
                # 50 partitions each are for clusters with many groups and producers; 10 and 4 start
                # in half the time and keep ~90 fewer files open.
                "offsets.topic.num.partitions": "10",
                "transaction.state.log.num.partitions": "4",
                "share.coordinator.state.topic.num.partitions": "4",
                # The log cleaner's buffer lives on the heap: 128 MiB of a 384 MiB heap is too much.
                "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
            }
        )
    return settings


@dataclasses.dataclass
class _Node:
    node_id: int
    data: Path
    broker_port: int
    controller_port: int
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    log_fh: IO[bytes] | None = None
    log_start: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def properties(self, voters: str, settings: Mapping[str, str], security: Security | None) -> str:
        name = LISTENER if security is not None else "PLAINTEXT"
        controller = CONTROLLER_PROTOCOL if security is not None else "PLAINTEXT"
        lines = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"{name}://{self.address},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"{name}://{self.address}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": name,
            "listener.security.protocol.map": f"CONTROLLER:{controller},{name}:{name}",
            "log.dirs": str(self.data / "kraft-logs"),
            **(security.broker_settings() if security is not None else {}),
            **settings,
        }
        return "".join(f"{key}={value}\n" for key, value in lines.items())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# --------------------------------------------------------------------------- the cluster


_running: set[LocalKafka] = set()  # strong refs: an unreferenced broker is still stopped at exit


@atexit.register
def _stop_all() -> None:
    for kafka in list(_running):
        kafka.stop()


class LocalKafka:
    """Kafka nodes (each broker and controller) as JVMs bound to 127.0.0.1.

    ``data_dir=None`` uses a fresh temporary directory removed by :meth:`stop`; a given
    ``data_dir`` is formatted once and reused, so topics and offsets survive restarts (one node
    keeps its data right in it; several keep theirs in ``node-N/``). ``port=0`` picks free ports.
    ``settings`` override the profile's. Each node's output goes to its ``broker.log`` (one node:
    ``log_file`` if given), never to the terminal.

    ``secured=True`` serves clients on SASL_SSL only, with SCRAM-SHA-512 logins and Kafka's
    StandardAuthorizer allowing nobody anything without an ACL (``secured.py``): connect as the
    super user with ``admin_config()``, add users with ``add_user``, and give clients
    ``security.librdkafka(user, password)``.

    ``wrap(node_id)``, if given, is a command prefix each node's JVM runs under (tests/faults: a
    group id of its own; a prefix that changes credentials must keep the death signal, as
    ``setpriv --pdeathsig=keep`` does, or the JVM outlives a killed parent).
    """

    def __init__(
        self,
        *,
        cache_dir: Path | None = None,
        data_dir: Path | None = None,
        port: int = 0,
        heap_mb: int = 384,
        log_file: Path | None = None,
        nodes: int = 1,
        profile: str = STOCK,
        settings: Mapping[str, str] | None = None,
        version: str = KAFKA_VERSION,
        secured: bool = False,
        wrap: Callable[[int], Sequence[str]] | None = None,
    ) -> None:
        if nodes < 1 or (port and nodes > 1):
            raise ValueError("nodes must be >= 1, and a fixed port is for one node only")
        self._cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
        self._data_dir = data_dir
        self._port = port
        self._heap_mb = heap_mb
        self._log_file = log_file
        self._count = nodes
        self.version = version
        self.settings = {**profile_settings(profile, nodes), **(settings or {})}
        self._nodes: list[_Node] = []
        self._tmp: Path | None = None
        self._libs: Path | None = None
        self._secured = secured
        self._wrap = wrap
        self.security: Security | None = None  # once started, when secured

    # ----------------------------------------------------------------- secured clusters

    def admin_config(self) -> dict[str, str | int | float | bool]:
        """librdkafka settings of a super user client, bootstrap included."""
        return {"bootstrap.servers": self.bootstrap, **self._client_security()}

    def _client_security(self) -> dict[str, str]:
        return self.security.librdkafka() if self.security is not None else {}

    def add_user(self, user: str, password: str, timeout: float = 30.0) -> None:
        """Store a SCRAM-SHA-512 credential (secured clusters) and wait until it logs in."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        if self.security is None:
            raise RuntimeError("users need a secured LocalKafka (secured=True), started")
        assert MECHANISM == "SCRAM-SHA-512"
        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS), password.encode()
        )
        admin = AdminClient({**self.admin_config()})
        admin.alter_user_scram_credentials([upsert])[user].result(timeout)
        deadline = time.monotonic() + timeout
        probe = AdminClient(
            {"bootstrap.servers": self.bootstrap, "log_level": 0, **self.security.librdkafka(user, password)}
        )
        while True:  # the credential reaches the broker with the metadata: soon, not at once
            try:
                probe.list_topics(timeout=max(1.0, min(5.0, deadline - time.monotonic())))
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    # ----------------------------------------------------------------- public API

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of each node, comma-separated."""
        if not self._nodes or not any(n.alive() for n in self._nodes):
            raise RuntimeError("LocalKafka is not running")
        return ",".join(n.address for n in self._nodes)

    @property
    def pid(self) -> int | None:
        """PID of the first node's JVM while it runs."""
        node = self._nodes[0] if self._nodes else None
        return node.proc.pid if node is not None and node.proc is not None else None

    @property
    def running(self) -> bool:
        """True while every node's JVM is alive."""
        return bool(self._nodes) and all(n.alive() for n in self._nodes)

    @property
    def exit_code(self) -> int | None:
        """How the first node's JVM ended (negative: killed by that signal); None while it runs."""
        node = self._nodes[0] if self._nodes else None
        return node.proc.poll() if node is not None and node.proc is not None else None

    def node_ids(self) -> list[int]:
        return [n.node_id for n in self._nodes]

    def node_ports(self, node_id: int) -> tuple[int, int]:
        """The broker (client) and controller listener ports of one node."""
        node = self._node(node_id)
        return node.broker_port, node.controller_port

    def node_pid(self, node_id: int) -> int | None:
        proc = self._node(node_id).proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def log_file(self) -> Path:
        """Where the (first) node's stdout/stderr go (default ``<data dir>/broker.log``)."""
        if self._nodes and self._nodes[0].log_path is not None:
            return self._nodes[0].log_path
        if self._log_file is not None:
            return self._log_file
        if self._data_dir is not None:
            return self._data_dir / "broker.log"
        raise RuntimeError("the broker log of a temporary LocalKafka is only known once started")

    def start(self, timeout: float = 180.0) -> str:
        """Start every node and wait until all serve requests; return the bootstrap addresses.

        ``timeout`` bounds formatting, JVM start-up and readiness; a first-time jar
        download (``mvn``) is bounded separately.
        """
        if self.running:
            return self.bootstrap
        self.stop()  # reap a node that died since the last start
        self._libs = resolve_broker(self._cache_dir, self.version)
        deadline = time.monotonic() + timeout
        try:
            self._nodes = self._plan()
            if self._secured:
                self.security = Security.load_or_make(self._data() / "security")
            cluster_id = jvm.random_cluster_id()
            for node in self._nodes:
                self._launch(node, cluster_id, deadline)
            _running.add(self)
            self._wait_ready(deadline, len(self._nodes))
        except BaseException:
            self.stop()
            raise
        log.info(
            "Kafka %s ready at %s (pid %s, rss %s MiB; %d node(s))",
            self.version,
            self.bootstrap,
            self.pid,
            _rss_text(self.pid),
            len(self._nodes),
        )
        return self.bootstrap

    def kill_node(self, node_id: int) -> None:
        """kill -9 one node: no shutdown code runs, as when a machine dies."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()

    def start_node(self, node_id: int, timeout: float = 120.0) -> None:
        """Start one stopped or killed node again, on its old ports and data."""
        node = self._node(node_id)
        if node.alive():
            return
        assert self._libs is not None
        deadline = time.monotonic() + timeout
        self._launch(node, None, deadline)
        self._wait_ready(deadline, len(self._nodes))

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every JVM (SIGTERM, then SIGKILL after ``timeout``); safe to call repeatedly."""
        nodes, self._nodes = self._nodes, []
        _running.discard(self)
        for node in nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()  # all at once: a controller quorum stops together
        for node in nodes:
            if node.proc is not None:
                jvm.terminate(node.proc, timeout)
            if node.log_fh is not None:
                node.log_fh.close()
                node.log_fh = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------- internals

    def _node(self, node_id: int) -> _Node:
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node {node_id}")

    def _data(self) -> Path:
        if self._data_dir is not None:
            return self._data_dir
        if self._tmp is None:
            jvm.sweep_stale_tmp_dirs()
            self._tmp = Path(tempfile.mkdtemp(prefix=f"{jvm.TMP_PREFIX}{os.getpid()}-"))
        return self._tmp

    def _plan(self) -> list[_Node]:
        data = self._data()
        if self._port and not jvm.port_free(self._port):
            raise RuntimeError(f"cannot start Kafka: 127.0.0.1:{self._port} is already in use")
        free = [p for p in jvm.free_ports(2 * self._count + 1) if p != self._port]
        nodes = []
        for i in range(self._count):
            home = data if self._count == 1 else data / f"node-{i + 1}"
            broker = self._port or free[2 * i]
            nodes.append(_Node(i + 1, home, broker, free[2 * i + 1]))
        return nodes

    def _launch(self, node: _Node, cluster_id: str | None, deadline: float) -> None:
        assert self._libs is not None
        node.data.mkdir(parents=True, exist_ok=True)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self._nodes)
        props = node.data / "server.properties"
        props.write_text(node.properties(voters, self.settings, self.security))
        node.log_path = (
            self._log_file if self._log_file is not None and self._count == 1 else node.data / "broker.log"
        )
        node.log_path.parent.mkdir(parents=True, exist_ok=True)
        if node.log_fh is None:
            node.log_fh = node.log_path.open("ab")
        node.log_start = node.log_fh.tell()
        node.log_fh.write(
            f"\n==== LocalKafka {self.version} node {node.node_id} starting {time.ctime()}\n".encode()
        )
        node.log_fh.flush()
        if not (node.data / "kraft-logs" / "meta.properties").exists():
            self._format(node, props, cluster_id or jvm.random_cluster_id(), deadline)
        wrap = list(self._wrap(node.node_id)) if self._wrap is not None else []
        if wrap:  # the launcher execs it: no PATH look-up of its own
            wrap[0] = shutil.which(wrap[0]) or wrap[0]
        node.proc = jvm.popen(
            [*wrap, *self._java_cmd("kafka.Kafka", str(props))],
            stdin=subprocess.DEVNULL,
            stdout=node.log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.debug(
            "Kafka node %d pid %d starting at %s, log %s",
            node.node_id,
            node.proc.pid,
            node.address,
            node.log_path,
        )

    def _java_cmd(self, main_class: str, *args: str) -> list[str]:
        assert self._libs is not None
        return [
            jvm.java(),
            f"-Xmx{self._heap_mb}m",
            f"-Xms{max(self._heap_mb // 2, 16)}m",
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:-UsePerfData",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={_LOG4J_CONFIG}",
            "-cp",
            str(self._libs / "*"),
            main_class,
            *args,
        ]

    def _format(self, node: _Node, props: Path, cluster_id: str, deadline: float) -> None:
        cmd = self._java_cmd(
            "kafka.tools.StorageTool",
            "format",
            "--config",
            str(props),
            "--cluster-id",
            cluster_id,
            *(self.security.format_args() if self.security is not None else []),
        )
        proc = jvm.popen(cmd, stdin=subprocess.DEVNULL, stdout=node.log_fh, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=max(1.0, min(_FORMAT_TIMEOUT, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            jvm.terminate(proc, 5.0)
            raise RuntimeError(f"formatting Kafka storage timed out\n{self._report()}") from None
        if code != 0:
            raise RuntimeError(f"formatting Kafka storage failed (exit {code})\n{self._report()}")

    def _wait_ready(self, deadline: float, brokers: int) -> None:
        while True:
            self._check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"Kafka at {self.bootstrap} not ready in time\n{self._report()}")
            if all(jvm.port_open(n.address) for n in self._nodes) and jvm.serves_metadata(
                self.bootstrap, min(remaining, 5.0), brokers, self._client_security()
            ):
                return
            time.sleep(0.2)

    def _report(self) -> str:
        return "\n".join(jvm.log_report(n.log_path, n.log_start) for n in self._nodes if n.log_path)

    def _check_alive(self) -> None:
        for node in self._nodes:
            code = node.proc.poll() if node.proc is not None else -1
            if code is not None:
                raise RuntimeError(
                    f"Kafka node {node.node_id} exited during start-up (exit {code})\n{self._report()}"
                )


def _rss_text(pid: int | None) -> str:
    rss = jvm.rss_mb(pid) if pid is not None else None
    return f"{rss:.0f}" if rss is not None else "?"


# --------------------------------------------------------------------------- CLI


def _parse_args(argv: list[str] | None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description="Run a local Kafka cluster until Ctrl-C.")
    parser.add_argument("--port", type=int, default=9092, help="client listener port (0 = any free port)")
    parser.add_argument("--data-dir", type=Path, help="persistent data directory (default: temporary)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        help="jar cache (default: $PUBSUB_GATEWAY_CACHE or ~/.cache/pubsub-gateway)",
    )
    parser.add_argument("--heap-mb", type=int, default=384)
    parser.add_argument("--log-file", type=Path, help="broker log (default: <data dir>/broker.log)")
    parser.add_argument("--nodes", type=int, default=1, help="broker+controller nodes (default 1)")
    parser.add_argument(
        "--profile",
        choices=[DEV, STOCK],
        default=DEV,
        help="dev: tuned for a laptop (the default); stock: Kafka's own defaults",
    )
    parser.add_argument("--kafka-version", default=KAFKA_VERSION, help=f"default {KAFKA_VERSION}")
    parser.add_argument(
        "--secured",
        action="store_true",
        help="SASL_SSL with SCRAM-SHA-512 and ACLs only; prints the super user's "
        "client settings (add users with its admin client)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run a broker in the foreground; print its bootstrap address; stop on SIGINT/SIGTERM.
    `prog`: the command's name in its usage (`pubsub-gateway kafka`)."""
    args = _parse_args(argv, prog)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kafka = LocalKafka(
        cache_dir=args.cache_dir,
        data_dir=args.data_dir,
        port=args.port if args.nodes == 1 else 0,
        heap_mb=args.heap_mb,
        log_file=args.log_file,
        nodes=args.nodes,
        profile=args.profile,
        version=args.kafka_version,
        secured=args.secured,
    )
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
        if kafka.security is not None:
            settings = ",".join(f"{k}={v}" for k, v in kafka.security.librdkafka().items())
            print(f"super user: --kafka-config {settings}", file=sys.stderr, flush=True)
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
    sys.exit(main(prog="python -m gateway.kafka.local"))
