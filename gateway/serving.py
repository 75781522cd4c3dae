"""One gateway process serving until SIGTERM: `pubsub-gateway serve`, and each worker of
`serve --workers N` (gateway/workers.py)."""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine

from gateway import settings as settings_mod
from gateway.errors import GatewayError

EXIT_CANNOT_START = 1  # Kafka lacks or refuses what the gateway needs: the message says what
EXIT_BROKER_LOST = 3  # the embedded broker died and could not be restarted
EXIT_ORPHAN_TIMEOUT = 5  # a worker whose supervisor died could not stop in time
# 6: the shutdown outlived --shutdown-timeout-seconds (gateway/shutdown.py says what was stuck)
STOP_MARGIN_SECONDS = 30.0  # after --shutdown-grace-seconds, before a worker that has not stopped is ended
# The collector's thresholds while serving. Python's (700, 10, 10) suit programs that keep few
# objects; a gateway under load keeps tens of thousands alive for a second or so (fetched
# records, leases, their expiry entries), so at 700 most of them are scanned young, promoted, and
# scanned again in frequent full collections: 15% of the gateway's CPU while the official Go
# client received 200,000 messages (2,988 young, 271 middle and 24 full collections, the full
# ones ~18 ms each). At 20,000 most are gone before the first scan: 34 young collections of
# ~8 ms and one middle, 0.3 s in all against 1.0 s, in the next run (docs/benchmarks.md, "Garbage
# collection"). Cycles still go at the next young collection if they die young, as before.
GC_THRESHOLDS = (20_000, 20, 10)

log = logging.getLogger("gateway")


async def serve(
    settings: settings_mod.Settings, worker: int | None = None, lifeline: int | None = None
) -> int:
    """Serve until SIGINT or SIGTERM; a worker also stops when `lifeline` (the read end of a
    pipe whose write end only its supervisor holds) ends: the supervisor is gone."""
    from gateway.server import Gateway
    from gateway.shutdown import ShutdownWatchdog

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if lifeline is not None:
        loop.add_reader(
            lifeline, _orphaned, lifeline, stop, settings.shutdown_grace_seconds + STOP_MARGIN_SECONDS
        )
    async with Gateway(settings, on_failure=stop.set, worker=worker) as gw:
        # What exists now (modules, protos, clients, the resources read at start) lives as long as
        # the process: out of the collector's sight, a full collection scans ~1,000 objects
        # instead of ~55,000, and its pause drops from ~30 ms to ~5 ms (a delivery-latency spike).
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        host = settings.host
        own = f" worker={host}:{gw.worker_port}" if worker is not None else ""
        print(f"READY grpc={host}:{gw.port} rest={host}:{gw.rest_port} kafka={gw.bootstrap}{own}", flush=True)
        log.info(
            "serving the Pub/Sub API on %s:%d; export PUBSUB_EMULATOR_HOST=%s:%d",
            host,
            gw.port,
            host,
            gw.port,
        )
        if worker is not None:
            log.info(
                "worker %d (pid %d) has a port of its own: %s:%d", worker, os.getpid(), host, gw.worker_port
            )
        await stop.wait()
        if gw.failure is not None:
            print(f"pubsub-gateway: {gw.failure}", file=sys.stderr, flush=True)
        log.info("shutting down")
        watchdog = ShutdownWatchdog(loop, settings.shutdown_timeout_seconds).start()
    watchdog.finish()
    return 0 if gw.failure is None else EXIT_BROKER_LOST


def _orphaned(lifeline: int, stop: asyncio.Event, seconds: float) -> None:
    """Stop as on SIGTERM, but within `seconds` whatever happens: nobody is left to send
    SIGKILL to a worker whose shutdown hangs (its Kafka gone too, say)."""
    asyncio.get_running_loop().remove_reader(lifeline)
    log.warning("the supervisor is gone: stopping (within %.0f s)", seconds)
    stop.set()
    deadline = threading.Timer(seconds, _exit_now, (seconds,))
    deadline.daemon = True
    deadline.start()


def _exit_now(seconds: float) -> None:
    log.error("the supervisor is gone and stopping took over %.0f s: exiting now", seconds)
    logging.shutdown()
    os._exit(EXIT_ORPHAN_TIMEOUT)


def run(settings: settings_mod.Settings, worker: int | None = None, lifeline: int | None = None) -> int:
    """Serve on the event loop the settings choose; the exit status."""
    # A crash in native code (librdkafka, grpc) would otherwise end the process without a word:
    # print every thread's Python stack to the log first, so the report says what was running.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    try:
        return event_loop_runner(settings.event_loop)(serve(settings, worker, lifeline))
    except GatewayError as exc:  # only start-up lets one through: say why, without a traceback
        print(f"pubsub-gateway: cannot start: {exc.message}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_START


def event_loop_runner(choice: str) -> Callable[[Coroutine[object, object, int]], int]:
    """uvloop's event loop unless told otherwise: it halves what the loop itself costs per HTTP
    push and gRPC message (libuv in C instead of selectors and callbacks in Python)."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise SystemExit("--event-loop uvloop: uvloop is not installed") from None
        else:
            return uvloop.run
    return asyncio.run
