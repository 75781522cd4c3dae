"""`pubsub-gateway serve --workers N`: N gateway processes on one port, and their supervisor.

Each worker is a whole gateway process (`python -m gateway.workers NUMBER LIFELINE`), as a
gateway on another host would be: its own Kafka clients, consumer-group members, push
dispatchers, metrics. They share nothing but Kafka and the listening port(s), which each binds
with SO_REUSEPORT: the kernel spreads incoming connections among them. Each also has a port of
its own, where the others forward acks of the partitions it owns (server.py, `worker_port`).

The supervisor (this process, the parent):
- picks the ports first when --port or --rest-port is 0, and holds them (a socket bound with
  SO_REUSEPORT, never listening: no connection reaches it) so nobody else takes them while a
  worker restarts;
- without --kafka-bootstrap starts the embedded broker once (and restarts it, as a single
  gateway does) and gives the workers its bootstrap;
- sends each worker its settings over a pipe (not its command line: they may hold secrets);
- prints `READY grpc=... rest=... kafka=... workers=...` once every worker is ready; a worker
  that cannot start at first stops them all (status 1);
- restarts a worker that dies: up to --worker-max-restarts within 5 minutes, one more death
  stops them all (status 4). The others serve on meanwhile, and take over the dead one's
  partitions when its consumer-group sessions end, as with any process that dies;
- forwards SIGTERM and SIGINT to the workers and waits for them (their own shutdown grace,
  then 30 s more before SIGKILL).

A worker whose supervisor is gone (killed with SIGKILL) stops by itself: it holds the read end
of a pipe whose only write end the supervisor has (the lifeline), and ends when it reads EOF:
as on SIGTERM, but exiting (status 5) if that takes over --shutdown-grace-seconds + 30 s,
since nobody is left to kill it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import ipaddress
import logging
import os
import pickle
import signal
import socket
import sys
import time
from collections.abc import Callable

from gateway import serving
from gateway.errors import CannotListen
from gateway.kafka.local import DEV, LocalKafka
from gateway.kafka.supervisor import BrokerSupervisor
from gateway.observe import logs
from gateway.settings import Settings

log = logging.getLogger("gateway.workers")

EXIT_WORKERS_LOST = 4  # workers died more often than --worker-max-restarts allows
RESTART_WINDOW_SECONDS = 300.0  # --worker-max-restarts counts deaths within this window
READY_TIMEOUT_SECONDS = 180.0  # a worker's start: Kafka metadata, the resources read whole


def supervise(settings: Settings) -> int:
    """Run `settings.workers` workers until SIGTERM or SIGINT; the exit status."""
    return asyncio.run(Supervisor(settings).run())


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) with SO_REUSEPORT, not listening: it keeps the port for
    the workers (port 0: the system picks one), and never gets a connection."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    if port and _answers(family, str(address[0]), port):
        # Another process listening with SO_REUSEPORT (another `--workers` gateway of this
        # user) would let the bind pass and share its connections with us: refuse instead.
        raise CannotListen(f"cannot listen on {host}:{port}: another process listens there")
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {exc}") from None
    return sock


def _answers(family: int, address: str, port: int) -> bool:
    """Whether something accepts connections at (address, port); a wildcard address is
    tried on loopback."""
    if ipaddress.ip_address(address.split("%")[0]).is_unspecified:
        address = "127.0.0.1" if family == socket.AF_INET else "::1"
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((address, port)) == 0


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


class Deaths:
    """Deaths of workers within the window: may one more be restarted?"""

    def __init__(
        self,
        allowed: int,
        window: float = RESTART_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._allowed = allowed
        self._window = window
        self._clock = clock
        self._times: collections.deque[float] = collections.deque()

    def record(self) -> bool:
        """Count a death; True while it may be restarted."""
        now = self._clock()
        self._times.append(now)
        while self._times and self._times[0] <= now - self._window:
            self._times.popleft()
        return len(self._times) <= self._allowed

    @property
    def recent(self) -> int:
        return len(self._times)


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._worker_settings = settings
        self._stop = asyncio.Event()
        self._status = 0
        self._deaths = Deaths(settings.worker_max_restarts)
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._addresses: dict[int, str] = {}  # each worker's own port
        self._ready = asyncio.Event()
        self._lifeline = -1

    def _fail(self, status: int, reason: str) -> None:
        if not self._stop.is_set():
            log.error("%s: stopping every worker", reason)
            self._status = status
            self._stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        s = self._settings
        async with contextlib.AsyncExitStack() as stack:
            try:
                bootstrap = await self._kafka(stack)
                port, rest_port = self._ports(stack)
            except Exception as exc:  # noqa: BLE001 - a start that fails: say why, exit 1
                print(f"pubsub-gateway: cannot start: {exc}", file=sys.stderr, flush=True)
                return serving.EXIT_CANNOT_START
            self._worker_settings = dataclasses.replace(
                s, port=port, rest_port=rest_port, kafka_bootstrap=bootstrap
            )
            read_end, write_end = os.pipe()  # the lifeline: only this process holds write_end
            stack.callback(os.close, read_end)
            stack.callback(os.close, write_end)
            self._lifeline = read_end
            keepers = [
                asyncio.create_task(self._keep(n), name=f"worker {n}") for n in range(1, s.workers + 1)
            ]
            for keeper in keepers:
                keeper.add_done_callback(self._keeper_done)
            waits = [asyncio.create_task(self._ready.wait()), asyncio.create_task(self._stop.wait())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
            if self._ready.is_set() and not self._stop.is_set():
                rest = rest_port if rest_port is not None else port
                workers = ",".join(self._addresses[n] for n in sorted(self._addresses))
                print(
                    f"READY grpc={s.host}:{port} rest={s.host}:{rest} kafka={bootstrap} workers={workers}",
                    flush=True,
                )
                log.info(
                    "serving the Pub/Sub API on %s:%d with %d workers; export PUBSUB_EMULATOR_HOST=%s:%d",
                    s.host,
                    port,
                    s.workers,
                    s.host,
                    port,
                )
            await self._stop.wait()
            log.info("shutting down %d workers", len(self._procs))
            await self._stop_workers()
            for keeper in keepers:
                keeper.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
        return self._status

    def _keeper_done(self, keeper: asyncio.Task[None]) -> None:
        """A keeper that failed (a worker that could not even be spawned) stops them all."""
        if not keeper.cancelled() and (exc := keeper.exception()) is not None:
            self._fail(serving.EXIT_CANNOT_START, f"{keeper.get_name()}: {exc!r}")

    async def _kafka(self, stack: contextlib.AsyncExitStack) -> str:
        """The bootstrap the workers use: --kafka-bootstrap, or the embedded broker's."""
        s = self._settings
        if s.kafka_bootstrap:
            return s.kafka_bootstrap
        kafka = LocalKafka(data_dir=s.kafka_data_dir, port=s.kafka_port, heap_mb=s.kafka_heap_mb, profile=DEV)
        bootstrap = await asyncio.to_thread(kafka.start)
        stack.callback(kafka.stop)
        log.info("embedded Kafka at %s (log: %s)", bootstrap, kafka.log_file)
        broker = BrokerSupervisor(
            kafka, s.kafka_max_restarts, lambda reason: self._fail(serving.EXIT_BROKER_LOST, reason)
        )
        broker.start()
        stack.push_async_callback(broker.stop)  # before kafka.stop: no restart while stopping
        return bootstrap

    def _ports(self, stack: contextlib.ExitStack | contextlib.AsyncExitStack) -> tuple[int, int | None]:
        """The public port(s), held for the workers as long as this process runs."""
        s = self._settings
        held = reserve_port(s.host, s.port)
        stack.callback(held.close)
        port = int(held.getsockname()[1])
        if s.shares_port:
            return port, s.rest_port
        assert s.rest_port is not None
        held_rest = reserve_port(s.host, s.rest_port)
        stack.callback(held_rest.close)
        return port, int(held_rest.getsockname()[1])

    async def _keep(self, number: int) -> None:
        """Keep worker `number` running until the supervisor stops."""
        started = False
        while not self._stop.is_set():
            proc = await self._spawn(number)
            address = await self._await_ready(number, proc)
            if address is not None:
                self._addresses[number] = address
                if not started:
                    started = True
                    if len(self._addresses) == self._settings.workers:
                        self._ready.set()
                else:
                    log.info("worker %d (pid %d) is serving again", number, proc.pid)
                code = await proc.wait()
            else:
                code = await proc.wait()
                if not started:
                    self._fail(
                        serving.EXIT_CANNOT_START, f"worker {number} did not start ({describe_exit(code)})"
                    )
                    return
            if self._stop.is_set():
                return
            if not self._deaths.record():
                self._fail(
                    EXIT_WORKERS_LOST,
                    f"worker {number} (pid {proc.pid}) died ({describe_exit(code)}), "
                    f"{self._deaths.recent} deaths within {RESTART_WINDOW_SECONDS:.0f} s "
                    f"(--worker-max-restarts {self._settings.worker_max_restarts})",
                )
                return
            log.warning(
                "worker %d (pid %d) died (%s); starting it again (%d of %d restarts allowed within %.0f s)",
                number,
                proc.pid,
                describe_exit(code),
                self._deaths.recent,
                self._settings.worker_max_restarts,
                RESTART_WINDOW_SECONDS,
            )

    async def _spawn(self, number: int) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway.workers",
            str(number),
            str(self._lifeline),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            pass_fds=(self._lifeline,),
            # Not in this process's group: a Ctrl-C in a terminal reaches the supervisor alone,
            # which stops the workers itself (and does not take their deaths for crashes).
            process_group=0,
        )
        self._procs[number] = proc
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps(self._worker_settings))
        with contextlib.suppress(ConnectionError):  # it died at once: _await_ready sees it
            await proc.stdin.drain()
        proc.stdin.close()
        log.info("worker %d started (pid %d)", number, proc.pid)
        return proc

    async def _await_ready(self, number: int, proc: asyncio.subprocess.Process) -> str | None:
        """The worker's own address once it prints READY; None if it ends (or hangs) before.
        Its later output is passed on to this process's stdout."""
        assert proc.stdout is not None
        stdout = proc.stdout
        try:
            async with asyncio.timeout(READY_TIMEOUT_SECONDS):
                while line := await stdout.readline():
                    text = line.decode(errors="replace")
                    if text.startswith("READY "):
                        fields = dict(f.split("=", 1) for f in text.split()[1:] if "=" in f)
                        asyncio.get_running_loop().create_task(_pass_on(stdout))
                        return fields.get("worker", "")
                    sys.stdout.write(text)
        except TimeoutError:
            log.error("worker %d (pid %d) not ready within %.0f s", number, proc.pid, READY_TIMEOUT_SECONDS)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        return None

    async def _stop_workers(self) -> None:
        """SIGTERM to every worker, then wait: their shutdown grace and a margin, then SIGKILL."""
        procs = [p for p in self._procs.values() if p.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        timeout = self._settings.shutdown_grace_seconds + serving.STOP_MARGIN_SECONDS
        for proc in procs:
            try:
                async with asyncio.timeout(timeout):
                    await proc.wait()
            except TimeoutError:
                log.error("worker pid %d did not stop within %.0f s: killing it", proc.pid, timeout)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


async def _pass_on(stream: asyncio.StreamReader) -> None:
    while line := await stream.readline():
        sys.stdout.write(line.decode(errors="replace"))
        sys.stdout.flush()


def worker_main(argv: list[str]) -> int:
    """One worker: `python -m gateway.workers NUMBER LIFELINE`, its settings pickled on stdin."""
    number, lifeline = int(argv[0]), int(argv[1])
    # From the supervisor, this process's parent, over a pipe only the two of them hold.
    settings: Settings = pickle.load(sys.stdin.buffer)  # noqa: S301
    sys.stdin.close()
    logs.configure(settings.log_level, settings.log_format, sys.stderr, number)
    log.info("settings: %s", settings.masked())
    return serving.run(settings, worker=number, lifeline=lifeline)


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
