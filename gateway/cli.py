"""`pubsub-gateway`: serve the API, run the embedded Kafka broker alone, or administer a gateway."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import gc
import logging
import signal
import sys
from collections.abc import Callable, Coroutine

from gateway import admin_cli
from gateway import settings as settings_mod
from gateway.errors import GatewayError
from gateway.kafka import local
from gateway.observe import logs

EXIT_CANNOT_START = 1  # Kafka lacks or refuses what the gateway needs: the message says what
EXIT_BROKER_LOST = 3  # the embedded broker died and could not be restarted
# 4: the shutdown outlived --shutdown-timeout-seconds (gateway/shutdown.py says what was stuck)


async def _serve(settings: settings_mod.Settings) -> int:
    from gateway.server import Gateway
    from gateway.shutdown import ShutdownWatchdog

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Gateway(settings, on_failure=stop.set) as gw:
        # What exists now (modules, protos, clients, the resources read at start) lives as long as
        # the process: out of the collector's sight, a full collection scans ~1,000 objects
        # instead of ~55,000, and its pause drops from ~30 ms to ~5 ms (a delivery-latency spike).
        gc.freeze()
        host = settings.host
        print(f"READY grpc={host}:{gw.port} rest={host}:{gw.rest_port} kafka={gw.bootstrap}", flush=True)
        logging.getLogger("gateway").info(
            "serving the Pub/Sub API on %s:%d; export PUBSUB_EMULATOR_HOST=%s:%d",
            host,
            gw.port,
            host,
            gw.port,
        )
        await stop.wait()
        if gw.failure is not None:
            print(f"pubsub-gateway: {gw.failure}", file=sys.stderr, flush=True)
        logging.getLogger("gateway").info("shutting down")
        watchdog = ShutdownWatchdog(loop, settings.shutdown_timeout_seconds).start()
    watchdog.finish()
    return 0 if gw.failure is None else EXIT_BROKER_LOST


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pubsub-gateway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the Pub/Sub API (gRPC)")
    settings_mod.add_arguments(serve)
    commands.add_parser("kafka", help="run the embedded Kafka broker in the foreground", add_help=False)
    admin_cli.add_commands(commands)
    args, rest = parser.parse_known_args(argv)
    if args.command == "kafka":
        return local.main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command in admin_cli.COMMANDS:
        return admin_cli.run(args)
    try:
        settings = settings_mod.from_namespace(args)
    except settings_mod.SettingsError as exc:
        parser.error(str(exc))
    logs.configure(settings.log_level, settings.log_format, sys.stderr)  # text, or JSON lines
    logging.getLogger("gateway").info("settings: %s", settings.masked())
    # A crash in native code (librdkafka, grpc) would otherwise end the process without a word:
    # print every thread's Python stack to the log first, so the report says what was running.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    try:
        return _event_loop_runner(settings.event_loop)(_serve(settings))
    except GatewayError as exc:  # only start-up lets one through: say why, without a traceback
        print(f"pubsub-gateway: cannot start: {exc.message}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_START


def _event_loop_runner(choice: str) -> Callable[[Coroutine[object, object, int]], int]:
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


if __name__ == "__main__":
    sys.exit(main())
