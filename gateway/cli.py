"""`pubsub-gateway`: serve the API, run the embedded Kafka broker alone, or administer a gateway."""

from __future__ import annotations

import argparse
import logging
import sys

from gateway import admin_cli, serving, workers
from gateway import settings as settings_mod
from gateway.errors import CannotListen, GatewayError
from gateway.kafka import local
from gateway.observe import logs

EXIT_CANNOT_START = serving.EXIT_CANNOT_START
EXIT_BROKER_LOST = serving.EXIT_BROKER_LOST


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pubsub-gateway", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the Pub/Sub API (gRPC)")
    settings_mod.add_arguments(serve)
    commands.add_parser("kafka", help="run the embedded Kafka broker in the foreground", add_help=False)
    admin_cli.add_commands(commands)
    args, rest = parser.parse_known_args(argv)
    if args.command == "kafka":
        return local.main(rest, prog="pubsub-gateway kafka")
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command in admin_cli.COMMANDS:
        return admin_cli.run(args)
    try:
        settings = settings_mod.from_namespace(args)
    except settings_mod.SettingsError as exc:
        parser.error(str(exc))
    try:
        if settings.workers > 1:  # this process supervises; each worker logs its own settings
            logs.configure(settings.log_level, settings.log_format, sys.stderr, logs.SUPERVISOR)
            _read_bootstrap(settings)  # once here: a bad file is said once, not by every worker
            return workers.supervise(settings)
        logs.configure(settings.log_level, settings.log_format, sys.stderr)  # text, or JSON lines
        logging.getLogger("gateway").info("settings: %s", settings.masked())
        return serving.run(settings)
    except GatewayError as exc:  # as serving.run says it: one line, no traceback
        print(f"pubsub-gateway: cannot start: {exc.message}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_START
    except CannotListen as exc:  # a port taken: one line, no traceback
        print(
            f"pubsub-gateway: cannot start: {exc} (another gateway, or `make run`, may be serving "
            "there: stop it, or give --port another port, 0 for any free one)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_CANNOT_START


def _read_bootstrap(settings: settings_mod.Settings) -> None:
    """What --bootstrap-file and --bootstrap declare, read (BootstrapError when it cannot be)."""
    from gateway import bootstrap  # not for the admin commands: it imports the core

    bootstrap.load(settings.bootstrap_file, settings.bootstrap)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pubsub-kafka-gateway")
    except metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "(not installed)"


if __name__ == "__main__":
    sys.exit(main())
