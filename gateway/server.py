"""The gateway process: Kafka clients, core services, the gRPC and REST servers and the port
they share (or their two ports), started and stopped in order with one AsyncExitStack."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.iam.v1 import policy_pb2

from gateway import bootstrap
from gateway.core.access import AccessService
from gateway.core.delivery import DeliveryService
from gateway.core.expiration import Janitor
from gateway.core.resources import ResourceStore
from gateway.core.schemas import SchemaService
from gateway.core.snapshots import SnapshotService
from gateway.core.subscriptions import SubscriptionService
from gateway.core.topic_schemas import SchemaMarks, TopicSchemas
from gateway.core.topics import TopicService
from gateway.core.truncation import TruncationService
from gateway.errors import CannotListen
from gateway.kafka.acls import GROUP_OPERATIONS
from gateway.kafka.admin import Admin, check_connection
from gateway.kafka.local import DEV, LocalKafka
from gateway.kafka.producer import Producer
from gateway.kafka.supervisor import BrokerSupervisor
from gateway.legacy import events as legacy_events
from gateway.legacy import servicers as legacy_servicers
from gateway.legacy.service import LegacyService
from gateway.observe.observer import Observer
from gateway.push.manager import PushManager
from gateway.schemas import SchemaCache
from gateway.security import iam
from gateway.security.authn import Authenticator
from gateway.security.peer import PeerTokens
from gateway.security.tls import GatewayTls, TlsFiles
from gateway.settings import Settings, SettingsError
from gateway.translate import names
from gateway.wire import grpc_api, grpc_schemas, rest
from gateway.wire.access import CallGuard
from gateway.wire.connections import files_needed, grpc_options, raise_file_limit
from gateway.wire.peers import GrpcPeers
from gateway.wire.pump import Pumps
from gateway.wire.shared_port import PortLimits, SharedPort

log = logging.getLogger(__name__)
SOCKET_DIR_PREFIX = "pubsub-gateway-"
STALE_AFTER_SECONDS = 60.0


def _remove_stale_socket_dirs() -> None:
    """A gateway killed with SIGKILL leaves its socket directory behind: remove this user's
    that are over a minute old and whose socket nobody listens on any more."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        directory = os.path.join(root, name)
        target = os.path.join(directory, "grpc.sock")
        try:
            if not name.startswith(SOCKET_DIR_PREFIX) or os.stat(directory).st_uid != os.getuid():
                continue
            if time.time() - os.stat(target).st_mtime < STALE_AFTER_SECONDS:
                continue
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(target)  # someone listens: a live gateway's
        except ConnectionRefusedError:
            shutil.rmtree(directory, ignore_errors=True)
        except OSError:
            continue


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _project_policies(s: Settings) -> dict[str, policy_pb2.Policy]:
    if s.iam_policy_file is None:
        return {}
    try:
        return iam.load_project_policies(s.iam_policy_file.read_text())
    except (OSError, ValueError) as exc:
        raise SettingsError(f"--iam-policy-file {s.iam_policy_file}: {exc}") from None


STEP_SLACK_SECONDS = 10.0


async def _bounded_step(
    step: Callable[..., Awaitable[object]], args: tuple[object, ...], bound: float
) -> None:
    task = asyncio.ensure_future(step(*args))
    done, _ = await asyncio.wait({task}, timeout=bound)
    if done:
        task.result()  # its error, if any, as the exit stack would have raised it
        return
    task.cancel()  # not awaited: a step that ignores cancellation must not hold the rest
    name = getattr(step, "__qualname__", repr(step))
    log.error("shutdown: %s did not finish within %g s; going on without it", name, bound)


class Gateway:
    """`on_failure` is called (on the event loop) when the gateway cannot go on serving: the
    embedded broker died and could not be restarted. `failure` then says why.

    `worker` (1..N) makes it one of the workers of `serve --workers N` (gateway/workers.py): it
    shares its public port(s) with the others (SO_REUSEPORT), and has a port of its own besides
    (`worker_port`, gRPC and REST on it), where the others forward acks to it: the public port
    would reach any of them."""

    def __init__(
        self,
        settings: Settings,
        on_failure: Callable[[], None] | None = None,
        worker: int | None = None,
    ) -> None:
        self.settings = settings
        self.worker = worker
        self.port = 0
        self.rest_port = 0
        self.worker_port = 0
        self.bootstrap = settings.kafka_bootstrap or ""
        self.failure: str | None = None
        self._on_failure = on_failure
        self._stack = contextlib.AsyncExitStack()
        self._server: grpc.aio.Server | None = None
        self.shared_port: SharedPort | None = None  # when gRPC and REST share --port
        # The services, set by start(): the in-process tests (tests/inprocess) reach them here.
        self.store: ResourceStore
        self.topics: TopicService
        self.subscriptions: SubscriptionService
        self.delivery: DeliveryService
        self.snapshots: SnapshotService
        self.push: PushManager
        self.access: AccessService
        self.schemas: SchemaService
        self.truncation: TruncationService  # the seed API's truncation (docs/truncation.md)
        self.observe: Observer

    def _on_stop(self, step: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run `step(*args)` on the way out (last pushed, first run), for at most the shutdown
        grace plus STEP_SLACK_SECONDS: a step that waits on something outside (a client that
        never closes, a broker that does not answer) is left behind with an error naming it,
        and the shutdown goes on. Kill-safe by design, so nothing acknowledged is lost."""
        bound = self.settings.shutdown_grace_seconds + STEP_SLACK_SECONDS
        self._stack.push_async_callback(_bounded_step, step, args, bound)

    def _fail(self, reason: str) -> None:
        self.failure = reason
        if self._on_failure is not None:
            self._on_failure()

    async def start(self) -> None:
        s = self.settings
        stack = self._stack
        raise_file_limit(files_needed(s))
        tls = await self._tls()  # first: a certificate that cannot be used ends the start at once
        # ... and so does a bad bootstrap file, as far as reading it can tell (docs/bootstrap.md).
        declared = await asyncio.to_thread(bootstrap.load, s.bootstrap_file, s.bootstrap)
        if not s.kafka_bootstrap:
            kafka = LocalKafka(
                data_dir=s.kafka_data_dir, port=s.kafka_port, heap_mb=s.kafka_heap_mb, profile=DEV
            )
            self.bootstrap = await asyncio.to_thread(kafka.start)
            stack.callback(kafka.stop)
            log.info("embedded Kafka at %s (log: %s)", self.bootstrap, kafka.log_file)
            supervisor = BrokerSupervisor(kafka, s.kafka_max_restarts, self._fail)
            supervisor.start()
            self._on_stop(supervisor.stop)  # before kafka.stop: no restart while stopping
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, **s.kafka_config}
        await asyncio.to_thread(check_connection, config)

        admin = await stack.enter_async_context(Admin(config, s.replication_factor))
        observe = self.observe = Observer(s, self.worker)  # metrics, health, spans (docs/metrics.md)
        producer = Producer(config, observe.kafka.config())
        await stack.enter_async_context(producer)
        resource_topic = names.internal_topic(s.internal_prefix, "resources")
        store = ResourceStore(admin, producer, config, resource_topic, s.replication_factor)
        await store.start()  # refuses to start when the internal topics' ACLs fall short
        self._on_stop(store.stop)
        # ... and so do the groups': every group is `<prefix>.<something>`, the janitor's too.
        await admin.check_group_access(f"{s.internal_prefix}.janitor", GROUP_OPERATIONS)
        schemas = SchemaService(store, SchemaCache(), s.max_schemas_per_project)
        topics = TopicService(s, store, admin, producer, TopicSchemas(schemas))
        subs = SubscriptionService(s, store, admin, producer)
        self._on_stop(subs.stop)
        delivery = DeliveryService(s, store, producer, config, admin)
        await delivery.start()
        self._on_stop(delivery.stop)

        server = grpc.aio.server(
            options=grpc_options(s, reuse_port=self.worker is not None),
            maximum_concurrent_rpcs=s.grpc_max_concurrent_rpcs,
            interceptors=observe.interceptors,
        )
        snapshots = SnapshotService(store, admin, producer, config, s.max_snapshots_per_project)
        self.truncation = TruncationService(store, admin, snapshots)
        delivery.on_truncated = self.truncation.raise_event
        janitor = Janitor(
            store,
            subs.delete,
            config,
            f"{s.internal_prefix}.janitor",
            resource_topic,
            s.session_timeout_ms,
            s.expiration_check_seconds,
        )
        await janitor.start()
        self._on_stop(janitor.stop)
        self.store, self.topics, self.subscriptions = store, topics, subs
        self.delivery, self.snapshots, self.schemas = delivery, snapshots, schemas
        if len(declared):  # before the ports listen: nobody sees the resources half made
            outcome = await bootstrap.Bootstrap(store, topics, subs, schemas).apply(declared)
            log.info("bootstrap: %d resources declared: %s", len(declared), outcome)
        push = self.push = PushManager(
            s,
            store,
            delivery,
            admin,
            producer,
            config,
            message_event=legacy_events.push_events(s.legacy_project),
            truncation=self.truncation,
        )
        self._on_stop(push.keys.stop)
        await push.start_keys()
        peer_tokens = PeerTokens(push.keys.keys)
        self.access = AccessService(store, await asyncio.to_thread(_project_policies, s))
        authenticator = await self._authenticator()
        guard = CallGuard(self.access, authenticator, peer_tokens)
        publisher = grpc_api.Publisher(guard, topics, subs, snapshots)
        subscriber = grpc_api.Subscriber(guard, subs, delivery, snapshots, SchemaMarks(store))
        iam_policy = grpc_api.IamPolicy(guard, self.access)
        schema_servicer = grpc_schemas.Schemas(guard, schemas)
        grpc_api.add_to_server(server, publisher, subscriber, iam_policy, schema_servicer)
        legacy = LegacyService(s, store, topics, subs, delivery, self.truncation)
        legacy_servicers.add_to_server(server, guard, legacy)
        self._on_stop(observe.stop)
        services = (
            publisher.SERVICE,
            subscriber.SERVICE,
            iam_policy.SERVICE,
            schema_servicer.SERVICE,
            *legacy_servicers.SERVICES,
        )
        await observe.start_health(server, admin, resource_topic, services)
        shared: SharedPort | None = None
        pumps = await self._unix_socket(server, tls) if s.shares_port or self.worker is not None else None
        if s.shares_port:
            assert pumps is not None
            shared = await self._shared_port(pumps, tls, s.port, reuse_port=self.worker is not None)
            self.shared_port, self.port = shared, shared.port
        else:
            address = f"{s.host}:{s.port}"
            if tls is None:
                self.port = server.add_insecure_port(address)
            else:
                self.port = server.add_secure_port(address, tls.grpc_credentials())
            if self.port == 0:
                raise CannotListen(f"cannot listen on {s.host}:{s.port}")
        peers = GrpcPeers(
            peer_tokens,
            None if tls is None else tls.peer_credentials(s.tls_peer_ca_file or s.tls_client_ca_file),
        )
        self._on_stop(peers.close)
        own: SharedPort | None = None
        if self.worker is not None:
            assert pumps is not None
            first = s.worker_ports_from
            own = await self._shared_port(pumps, tls, first + self.worker - 1 if first else 0)
            self.worker_port = own.port
        delivery.connect_peers(self._peer_address(), peers)
        await server.start()
        self._server = server
        self._on_stop(server.stop, s.shutdown_grace_seconds)
        app = rest.create_app(
            {
                publisher.SERVICE: publisher,
                subscriber.SERVICE: subscriber,
                iam_policy.SERVICE: iam_policy,
                schema_servicer.SERVICE: schema_servicer,
            },
            body_timeout=s.http_body_timeout_seconds,
        )
        push.add_routes(app)  # the key set of push tokens, on the REST port
        observe.add_routes(
            app,
            admin=admin,
            store=store,
            delivery=delivery,
            topics=topics,
            windows=push.windows,
            authenticator=authenticator,
        )
        rest_server = rest.RestServer(
            app,
            s.host,
            None if shared is not None else s.rest_port,
            s.shutdown_grace_seconds,
            rest.HttpLimits(
                max_connections=s.http_max_connections,
                header_timeout=s.http_header_timeout_seconds,
                body_timeout=s.http_body_timeout_seconds,
                idle_timeout=s.http_idle_timeout_seconds,
            ),
            tls=None if tls is None else tls.rest_context,
            reuse_port=self.worker is not None,
        )
        self._on_stop(rest_server.stop)
        await rest_server.start()
        for port in (shared, own):
            if port is not None:
                assert rest_server.guard is not None
                port.serve(rest_server.guard)  # on the way out: closed before REST and gRPC stop
                self._on_stop(port.close)
        if shared is not None:
            self.rest_port = self.port
        else:
            self.rest_port = rest_server.port
        self._on_stop(push.stop)
        await push.start(self.rest_port)
        stack.callback(delivery.close_streams)  # first on the way out: streams end UNAVAILABLE
        self._on_stop(observe.stop)  # on the way out before even that: not ready
        await observe.serving()

    async def _authenticator(self) -> Authenticator | None:
        """The authenticator of callers, or None when authentication is off (warned about
        loudly when the gateway listens beyond this machine)."""
        s = self.settings
        if not s.authenticates:
            if not _loopback(s.host):
                log.warning(
                    "AUTHENTICATION IS OFF and the gateway listens on %s, beyond this machine: "
                    "anyone who reaches port %d may create, read and delete everything. Give it "
                    "--auth-token-file, --auth-oidc or --auth-mtls (docs/security.md).",
                    s.host,
                    s.port,
                )
            return None
        authenticator = Authenticator(s.auth_token_file, s.auth_oidc, s.auth_mtls)
        self._on_stop(authenticator.stop)
        await authenticator.start()
        log.info(
            "authentication on (%s); IAM policies are enforced",
            ", ".join(
                what
                for what, on in (
                    ("token file", s.auth_token_file is not None),
                    (f"OIDC issuers {sorted(s.auth_oidc)}", bool(s.auth_oidc)),
                    ("client certificates", s.auth_mtls),
                )
                if on
            ),
        )
        return authenticator

    async def _tls(self) -> GatewayTls | None:
        """The certificate both wires (and the peer hop) speak TLS with, when there is one."""
        s = self.settings
        if s.tls_cert_file is None or s.tls_key_file is None:
            log.info("TLS off: gRPC and REST are served in plaintext")
            return None
        files = TlsFiles(s.tls_cert_file, s.tls_key_file, s.tls_client_ca_file, s.tls_client_auth)
        tls = await asyncio.to_thread(GatewayTls, files)
        log.info(
            "TLS on (%s, reloaded when it changes): %s; client certificates: %s",
            s.tls_cert_file,
            tls.material.describe(),
            s.tls_client_auth,
        )
        return tls

    def _peer_address(self) -> str:
        """Where the other processes reach this one (the client id of its consumer-group
        members): --advertise-address, else --host and the port. A worker's is its own port,
        with the host of --advertise-address if given."""
        s = self.settings
        if self.worker is None:
            return s.advertise_address or f"{s.host}:{self.port}"
        host = s.advertise_address.rsplit(":", 1)[0] if s.advertise_address else s.host
        return f"{host}:{self.worker_port}"

    async def _unix_socket(self, server: grpc.aio.Server, tls: GatewayTls | None) -> Pumps:
        """Put the gRPC server on a unix socket in a directory only this user may enter: the
        pumps of shared ports reach it there, and nobody gets around the ports' limits. The
        pumps end after the server has stopped (its calls end through them). Under TLS the
        gRPC server terminates it on that socket: the pumps pass its bytes as they are."""
        stack = self._stack
        await asyncio.to_thread(_remove_stale_socket_dirs)
        directory = tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)
        stack.callback(shutil.rmtree, directory, ignore_errors=True)
        target = os.path.join(directory, "grpc.sock")
        address = f"unix:{target}"
        port = (
            server.add_insecure_port(address)
            if tls is None
            else server.add_secure_port(address, tls.grpc_credentials())
        )
        if not port:
            raise CannotListen(f"cannot listen on the unix socket {target}")
        pumps = Pumps(target)
        self._on_stop(pumps.close)  # pushed before server.stop: runs after it
        return pumps

    async def _shared_port(
        self, pumps: Pumps, tls: GatewayTls | None, port: int, *, reuse_port: bool = False
    ) -> SharedPort:
        """A port for gRPC and REST (the public one, or a worker's own), its gRPC connections
        pumped to the server's unix socket."""
        s = self.settings
        limits = PortLimits(
            s.first_bytes_timeout_seconds,
            s.max_pending_connections,
            s.grpc_max_connections,
            s.http_header_timeout_seconds,
        )
        shared = SharedPort(
            s.host, port, limits, pumps, None if tls is None else tls.rest_context, reuse_port=reuse_port
        )
        self._on_stop(shared.close)  # a start that fails later lets the port go
        await shared.bind()
        return shared

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
