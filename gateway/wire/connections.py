"""Connection limits of the gRPC server (its channel arguments) and the open-file budget of
the ports (docs/connections.md). No protobuf imports: unit tests load this beside the client's."""

from __future__ import annotations

import logging

from gateway.errors import FailedPrecondition
from gateway.settings import Settings
from gateway.translate.records import MAX_GRPC_MESSAGE
from gateway.wire import pump

log = logging.getLogger(__name__)
MAX_MESSAGE = MAX_GRPC_MESSAGE  # a 10 MB publish and its framing; responses are cut under it
# Request headers may be as large as a message: the official clients repeat the resource name
# in `x-goog-request-params`, and a name too long for gRPC's default (16 KiB) would be refused
# by gRPC itself with RESOURCE_EXHAUSTED, which publishers retry for a minute, instead of
# reaching the handler and its INVALID_ARGUMENT.
MAX_METADATA = MAX_MESSAGE
# Server keepalive: a ping after a minute without traffic on a connection with calls, and the
# connection closed if no answer comes in 20 s, so a vanished client's streams end in ~80 s.
KEEPALIVE_MS, KEEPALIVE_TIMEOUT_MS = 60_000, 20_000
# Client pings: the official clients ping every 30 s (Python) or 5 min (Go, Java) while calls
# are open. One more often than every 10 s without data in between is a strike; the third
# strike closes the connection (GOAWAY "too_many_pings"). Idle connections may not ping.
MIN_CLIENT_PING_INTERVAL_MS, MAX_PING_STRIKES = 10_000, 2
# Descriptors the process needs besides its listening ports' connections: Kafka clients (a few
# sockets per subscription), push connections, the embedded broker's pipes, files.
FILES_BESIDES_CLIENTS = 1024


def grpc_options(s: Settings, reuse_port: bool = False) -> list[tuple[str, int]]:
    """The gRPC server's channel arguments: message sizes and the connection limits. The port
    is this process's alone (a second gateway on it fails to start) unless `reuse_port`: the
    workers of one `--workers N` share it, the kernel spreading connections among them."""
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.so_reuseport", int(reuse_port)),
        ("grpc.max_metadata_size", MAX_METADATA),
        ("grpc.absolute_max_metadata_size", MAX_METADATA),
        ("grpc.max_allowed_incoming_connections", s.grpc_max_connections),
        ("grpc.max_concurrent_streams", s.grpc_max_streams_per_connection),
        ("grpc.server_handshake_timeout_ms", _ms(s.grpc_handshake_timeout_seconds)),
        ("grpc.max_connection_idle_ms", _ms(s.grpc_idle_timeout_seconds)),
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
    ]
    if s.grpc_max_connection_age_seconds:
        options += [
            ("grpc.max_connection_age_ms", _ms(s.grpc_max_connection_age_seconds)),
            ("grpc.max_connection_age_grace_ms", _ms(s.grpc_connection_age_grace_seconds)),
        ]
    return options


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def files_needed(s: Settings) -> int:
    """Open files for every connection the limits allow. A gRPC connection of a shared port
    costs the pump's descriptors besides its own (pump.FILES_PER_CONNECTION), and connections
    still to send their first bytes count up to --max-pending-connections."""
    if not s.shares_port:
        return s.http_max_connections + s.grpc_max_connections + FILES_BESIDES_CLIENTS
    grpc_files = s.grpc_max_connections * pump.FILES_PER_CONNECTION
    return s.http_max_connections + grpc_files + s.max_pending_connections + FILES_BESIDES_CLIENTS


def raise_file_limit(needed: int) -> None:
    """Make room for `needed` open files: raise the soft RLIMIT_NOFILE toward the hard one, or
    refuse to start when even that is too low (the connection limits could not be honoured:
    accepting would fail with EMFILE instead)."""
    try:
        import resource
    except ImportError:  # not POSIX: nothing to check
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise FailedPrecondition(
            f"the connection limits need {needed} open files (--http-max-connections, "
            "--grpc-max-connections, and on a shared port --max-pending-connections; "
            f"docs/connections.md) but the hard limit is {hard}: lower the limits or raise `ulimit -n`"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    log.info("raised the open-file limit from %d to %d for the connection limits", soft, needed)
