"""Push delivery in this process: one dispatcher per push subscription, following the resources.

Every gateway process runs a dispatcher for every subscription that has a push endpoint and is
not detached; each dispatcher serves the partitions its process owns in the subscription's
consumer group, so push work is shared by the processes and moves with rebalances. Setting the
push config starts a dispatcher, clearing it (ModifyPushConfig with an empty config, or
UpdateSubscription) stops it: it takes no more messages, and pushes in flight finish or expire.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.core.resources import subscription_or_none
from gateway.core.topic_schemas import SchemaMarks
from gateway.push import jwks, sender
from gateway.push.auth import TokenSigner
from gateway.push.dispatcher import Dispatcher
from gateway.push.keystore import KeyStore
from gateway.translate import endpoints

if TYPE_CHECKING:
    from gateway.core.delivery import DeliveryService
    from gateway.core.resources import AnyResource, ResourceStore, StoredSubscription
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
    ) -> None:
        self._settings = settings
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
        await self.keys.stop()

    # -- following the subscriptions ---------------------------------------------------------

    def _on_change(self, kind: Kind, name: str, res: AnyResource | None) -> None:
        if kind == "subscription" and self._running:
            self._sync(name, subscription_or_none(res))

    def _sync(self, name: str, res: StoredSubscription | None) -> None:
        current = self._dispatchers.get(name)
        wanted = res if res is not None and _pushes(res) else None
        if current is not None and (wanted is None or current.uid != wanted.meta.uid):
            self._retire(name)
            current = None
        if wanted is None:
            return
        if current is not None:
            current.update(wanted)
            return
        assert self._http is not None
        dispatcher = Dispatcher(
            wanted,
            self._delivery,
            self._http,
            self.signer,
            self._settings.push_max_outstanding,
            self._settings.push_max_connections,
            self._marks,
        )
        self._dispatchers[name] = dispatcher
        dispatcher.start()
        log.info("%s: pushing to %s", name, endpoints.mask(dispatcher.target.endpoint))

    def _retire(self, name: str) -> None:
        dispatcher = self._dispatchers.pop(name)
        log.info("%s: push delivery stops", name)
        task = asyncio.get_running_loop().create_task(dispatcher.stop(float(dispatcher.deadline)))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)


def _pushes(res: StoredSubscription) -> bool:
    return bool(res.proto.push_config.push_endpoint) and res.meta.delivers
