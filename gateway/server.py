"""The gateway process: Kafka clients, core services and the gRPC server, started and stopped
in order with one AsyncExitStack."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import grpc

from gateway.core.delivery import DeliveryService
from gateway.core.expiration import Janitor
from gateway.core.resources import ResourceStore
from gateway.core.snapshots import SnapshotService
from gateway.core.subscriptions import SubscriptionService
from gateway.core.topics import TopicService
from gateway.errors import FailedPrecondition
from gateway.kafka.acls import GROUP_OPERATIONS
from gateway.kafka.admin import Admin, check_connection
from gateway.kafka.local import DEV, LocalKafka
from gateway.kafka.producer import Producer
from gateway.kafka.supervisor import BrokerSupervisor
from gateway.push.manager import PushManager
from gateway.settings import Settings
from gateway.translate import names
from gateway.wire import grpc_api, rest
from gateway.wire.peers import GrpcPeers

log = logging.getLogger(__name__)
MAX_MESSAGE = 20 * 1024 * 1024  # gRPC message limit: a 10 MB publish plus its framing
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


def grpc_options(s: Settings) -> list[tuple[str, int]]:
    """The gRPC server's channel arguments: message sizes and the connection limits."""
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.so_reuseport", 0),
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
            f"the connection limits need {needed} open files (--http-max-connections + "
            f"--grpc-max-connections + {FILES_BESIDES_CLIENTS}) but the hard limit is {hard}: "
            "lower the limits or raise `ulimit -n`"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    log.info("raised the open-file limit from %d to %d for the connection limits", soft, needed)


class Gateway:
    """`on_failure` is called (on the event loop) when the gateway cannot go on serving: the
    embedded broker died and could not be restarted. `failure` then says why."""

    def __init__(self, settings: Settings, on_failure: Callable[[], None] | None = None) -> None:
        self.settings = settings
        self.port = 0
        self.rest_port = 0
        self.bootstrap = settings.kafka_bootstrap or ""
        self.failure: str | None = None
        self._on_failure = on_failure
        self._stack = contextlib.AsyncExitStack()
        self._server: grpc.aio.Server | None = None

    def _fail(self, reason: str) -> None:
        self.failure = reason
        if self._on_failure is not None:
            self._on_failure()

    async def start(self) -> None:
        s = self.settings
        stack = self._stack
        raise_file_limit(s.http_max_connections + s.grpc_max_connections + FILES_BESIDES_CLIENTS)
        if not s.kafka_bootstrap:
            kafka = LocalKafka(data_dir=s.kafka_data_dir, port=s.kafka_port, heap_mb=s.kafka_heap_mb,
                               profile=DEV)
            self.bootstrap = await asyncio.to_thread(kafka.start)
            stack.callback(kafka.stop)
            log.info("embedded Kafka at %s (log: %s)", self.bootstrap, kafka.log_file)
            supervisor = BrokerSupervisor(kafka, s.kafka_max_restarts, self._fail)
            supervisor.start()
            stack.push_async_callback(supervisor.stop)  # before kafka.stop: no restart while stopping
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, **s.kafka_config}
        await asyncio.to_thread(check_connection, config)

        admin = Admin(config, s.replication_factor)
        producer = Producer(config)
        await stack.enter_async_context(producer)
        resource_topic = names.internal_topic(s.internal_prefix, "resources")
        store = ResourceStore(admin, producer, config, resource_topic, s.replication_factor)
        await store.start()  # refuses to start when the internal topics' ACLs fall short
        stack.push_async_callback(store.stop)
        # ... and so do the groups': every group is `<prefix>.<something>`, the janitor's too.
        await admin.check_group_access(f"{s.internal_prefix}.janitor", GROUP_OPERATIONS)
        topics = TopicService(s, store, admin, producer)
        subs = SubscriptionService(s, store, admin, producer)
        stack.push_async_callback(subs.stop)
        delivery = DeliveryService(s, store, producer, config, admin)
        await delivery.start()
        stack.push_async_callback(delivery.stop)

        server = grpc.aio.server(options=grpc_options(s),
                                 maximum_concurrent_rpcs=s.grpc_max_concurrent_rpcs)
        snapshots = SnapshotService(store, admin, producer, config)
        janitor = Janitor(store, subs.delete, config, f"{s.internal_prefix}.janitor", resource_topic,
                          s.session_timeout_ms, s.expiration_check_seconds)
        await janitor.start()
        stack.push_async_callback(janitor.stop)
        publisher = grpc_api.Publisher(topics, subs, snapshots)
        subscriber = grpc_api.Subscriber(subs, delivery, snapshots)
        grpc_api.add_to_server(server, publisher, subscriber)
        self.port = server.add_insecure_port(f"{s.host}:{s.port}")
        if self.port == 0:
            raise OSError(f"cannot listen on {s.host}:{s.port}")
        peers = GrpcPeers()
        stack.push_async_callback(peers.close)
        delivery.connect_peers(s.advertise_address or f"{s.host}:{self.port}", peers)
        await server.start()
        self._server = server
        stack.push_async_callback(server.stop, s.shutdown_grace_seconds)
        app = rest.create_app({
            "google.pubsub.v1.Publisher": publisher, "google.pubsub.v1.Subscriber": subscriber,
        }, body_timeout=s.http_body_timeout_seconds)
        push = PushManager(s, store, delivery, admin, producer, config)
        push.add_routes(app)  # the key set of push tokens, on the REST port
        rest_server = await stack.enter_async_context(
            rest.RestServer(app, s.host, s.rest_port, s.shutdown_grace_seconds, rest.HttpLimits(
                max_connections=s.http_max_connections, header_timeout=s.http_header_timeout_seconds,
                body_timeout=s.http_body_timeout_seconds, idle_timeout=s.http_idle_timeout_seconds,
            ))
        )
        self.rest_port = rest_server.port
        stack.push_async_callback(push.stop)
        await push.start(self.rest_port)
        stack.callback(delivery.close_streams)  # first on the way out: streams end UNAVAILABLE

    async def stop(self) -> None:
        """Stop accepting calls, let running ones finish, flush, leave groups. Idempotent."""
        await self._stack.aclose()

    async def __aenter__(self) -> Gateway:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
