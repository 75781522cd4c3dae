"""Push delivery in this process: one dispatcher per push subscription, following the resources.

Every gateway process runs a dispatcher for every subscription that has a push endpoint and is
not detached; each dispatcher serves the partitions its process owns in the subscription's
consumer group, so push work is shared by the processes and moves with rebalances. Setting the
push config starts a dispatcher, clearing it (ModifyPushConfig with an empty config, or
UpdateSubscription) stops it: it takes no more messages, and pushes in flight finish or expire.

Two flavours: a subscription whose meta has `legacy_push_endpoint` (the seed's early API) is
pushed over gRPC (grpc_push.py), one with a v1 `push_config.push_endpoint` over HTTP
(http_push.py). gRPC push needs the legacy API's converter of messages to PubsubEvents, which
the PushManager is given as `message_event`; without it such subscriptions are not pushed (their
messages stay in the subscription). gRPC push also delivers the subscription's truncation events,
before further messages, when the PushManager is given the core's `truncation` service
(grpc_push.TruncationEvents). When a gRPC push subscription is deleted, the process serving its
partition 0 sends the endpoint one `deleted` event.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.core.resources import subscription_or_none
from gateway.core.topic_schemas import SchemaMarks
from gateway.push import grpc_push, jwks, sender
from gateway.push.auth import TokenSigner
from gateway.push.dispatcher import Dispatcher
from gateway.push.http_push import HttpPusher, Pusher
from gateway.push.keystore import KeyStore

if TYPE_CHECKING:
    from gateway.core.delivery import DeliveryService
    from gateway.core.resources import AnyResource, ResourceStore, StoredSubscription
    from gateway.core.truncation import TruncationService
    from gateway.kafka.admin import Admin
    from gateway.kafka.producer import Producer
    from gateway.settings import Settings
    from gateway.translate.meta import Kind

log = logging.getLogger(__name__)


def default_issuer(settings: Settings, rest_port: int) -> str:
    """http(s)://<host>:<REST port>, where host is that of --advertise-address, else --host
    (https when the gateway speaks TLS: the key set is served on the REST port)."""
    host = settings.host
    if settings.advertise_address:
        host = settings.advertise_address.rsplit(":", 1)[0]
    if host in ("", "0.0.0.0", "::", "[::]"):  # noqa: S104 - a wildcard bind is not an address
        host = socket.gethostname()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{'https' if settings.tls else 'http'}://{host}:{rest_port}"


class PushManager:
    def __init__(
        self,
        settings: Settings,
        store: ResourceStore,
        delivery: DeliveryService,
        admin: Admin,
        producer: Producer,
        kafka_config: dict[str, Any],
        message_event: grpc_push.MessageEvent | None = None,
        truncation: TruncationService | None = None,
    ) -> None:
        """`message_event` makes the PubsubEvent of a message for gRPC push: the legacy API's
        gateway.legacy.events.message_event (None: gRPC push subscriptions are not pushed).
        `truncation`: the truncation events gRPC push delivers (None: none are pushed)."""
        self._settings = settings
        self.message_event = message_event
        self._truncation = truncation
        self._store = store
        self._delivery = delivery
        self._marks = SchemaMarks(store)
        self.keys = KeyStore(
            admin,
            producer,
            kafka_config,
            settings.internal_prefix,
            settings.push_auth_key_file,
            settings.push_auth_key_rotation_hours,
        )
        self.signer = TokenSigner(self.keys.keys, settings.push_auth_issuer)
        self._http: sender.PushClient | None = None
        self._grpc: grpc_push.GrpcPushClient | None = None
        self._unconverted: set[str] = set()  # gRPC push subscriptions left alone, warned about
        self._dispatchers: dict[str, Dispatcher] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._running = False
        store.subscribe(self._on_change)

    def add_routes(self, app: web.Application) -> None:
        """Serve the OpenID configuration and key set of push tokens from `app`."""
        jwks.add_routes(app, self.keys.keys, lambda: self.signer.issuer)

    def windows(self) -> list[tuple[str, int, int]]:
        """(subscription, push window, pushes outstanding) of each push subscription this
        process pushes: what /metrics reports of push."""
        return [(name, d.window.limit, d.in_flight) for name, d in self._dispatchers.items()]

    async def start_keys(self) -> None:
        """Load (or make) the signing keys: before the gateway serves, since the marks of
        forwarded acks are signed with them too (security/peer.py)."""
        await self.keys.start()

    async def start(self, rest_port: int) -> None:
        """Start a dispatcher per push subscription (the keys were loaded by start_keys)."""
        if not self.signer.issuer:
            self.signer.issuer = default_issuer(self._settings, rest_port)
        self._http = sender.PushClient(self._settings.push_max_connections, self._settings.push_destinations)
        self._grpc = grpc_push.GrpcPushClient(
            self._settings.push_destinations,
            credentials=grpc_push.push_credentials(self._settings.grpc_push_tls),
        )
        self._running = True
        for res in list(self._store.all("subscription")):
            self._sync(res.name, res)
        log.info(
            "push delivery running (%d push subscriptions); token issuer %s; destinations %s",
            len(self._dispatchers),
            self.signer.issuer,
            self._settings.push_destinations,
        )

    async def stop(self) -> None:
        """Stop every dispatcher (pushes in flight get the shutdown grace). Idempotent."""
        self._running = False
        dispatchers, self._dispatchers = list(self._dispatchers.values()), {}
        grace = self._settings.shutdown_grace_seconds
        await asyncio.gather(*(d.stop(grace) for d in dispatchers), *self._retiring, return_exceptions=True)
        http, self._http = self._http, None
        if http is not None:
            await http.close()
        channels, self._grpc = self._grpc, None
        if channels is not None:
            await channels.close()
        await self.keys.stop()

    # -- following the subscriptions ---------------------------------------------------------

    def _on_change(self, kind: Kind, name: str, res: AnyResource | None) -> None:
        if kind == "subscription" and self._running:
            self._sync(name, subscription_or_none(res))

    def _sync(self, name: str, res: StoredSubscription | None) -> None:
        current = self._dispatchers.get(name)
        kind = self._flavour(res) if res is not None else None
        wanted = res if kind is not None else None
        if current is not None and (
            wanted is None or current.uid != wanted.meta.uid or current.pusher.kind != kind
        ):
            self._retire(name, deleted=res is None)
            current = None
        if wanted is None:
            return
        if current is not None:
            current.update(wanted)
            return
        pusher = self._pusher(wanted)
        events = None
        if self._truncation is not None and isinstance(pusher, grpc_push.GrpcPusher):
            events = grpc_push.TruncationEvents(self._truncation, pusher)
        dispatcher = Dispatcher(
            wanted,
            self._delivery,
            pusher,
            self._settings.push_max_outstanding,
            self._settings.push_max_connections,
            events,
        )
        self._dispatchers[name] = dispatcher
        dispatcher.start()
        log.info("%s: pushing to %s", name, dispatcher.pusher.endpoint())

    def _flavour(self, res: StoredSubscription) -> str | None:
        """How this process pushes `res`: "grpc", "http", or None (not at all)."""
        if not res.meta.delivers:
            return None
        if res.meta.legacy_push_endpoint:
            if self.message_event is not None:
                self._unconverted.discard(res.name)
                return "grpc"
            if res.name not in self._unconverted:
                self._unconverted.add(res.name)
                log.warning("%s: gRPC push is not available in this gateway: not pushed", res.name)
            return None
        return "http" if res.proto.push_config.push_endpoint else None

    def _pusher(self, res: StoredSubscription) -> Pusher:
        if res.meta.legacy_push_endpoint:
            assert self._grpc is not None and self.message_event is not None
            return grpc_push.GrpcPusher(res, self._grpc, self.message_event, self._marks)
        assert self._http is not None
        return HttpPusher(res, self._http, self.signer, self._marks)

    def _retire(self, name: str, deleted: bool = False) -> None:
        dispatcher = self._dispatchers.pop(name)
        log.info("%s: push delivery stops", name)
        # Asked now: the subscription's runner is still there while its deletion is being heard.
        tell = deleted and dispatcher.check_first() and isinstance(dispatcher.pusher, grpc_push.GrpcPusher)
        task = asyncio.get_running_loop().create_task(self._stop(dispatcher, tell))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _stop(self, dispatcher: Dispatcher, tell_deleted: bool) -> None:
        await dispatcher.stop(float(dispatcher.deadline))
        pusher = dispatcher.pusher
        if not (tell_deleted and isinstance(pusher, grpc_push.GrpcPusher)):
            return
        outcome = await pusher.send_deleted(min(float(dispatcher.deadline), grpc_push.DELETED_TIMEOUT))
        if outcome.ok:
            log.info("%s: deleted event sent to %s", dispatcher.name, pusher.endpoint())
        else:
            log.warning(
                "%s: deleted event to %s not delivered (%s); it is not sent again",
                dispatcher.name,
                pusher.endpoint(),
                outcome.detail,
            )
