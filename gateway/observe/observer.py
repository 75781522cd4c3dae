"""The Observer: what gateway/server.py builds to serve metrics, health and spans."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import grpc
from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    Info,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from gateway.core.delivery import DeliveryService
from gateway.core.resources import ResourceStore
from gateway.core.topics import TopicService
from gateway.errors import GatewayError
from gateway.kafka.admin import Admin
from gateway.kafka.stats import ClientStats
from gateway.observe.health import Health
from gateway.observe.metrics import EndOffsets, GatewayCollector, Windows
from gateway.observe.rpc import Interceptor, RpcMetrics, wrap_rest_calls
from gateway.security.authn import Authenticator
from gateway.settings import Settings
from gateway.wire import rest

if TYPE_CHECKING:
    from gateway.observe.tracing import Tracing

METRICS_PATH = "/metrics"
# No `<histogram>_created` series beside each histogram: they double the series for a start time
# process_start_time_seconds already tells (prometheus-client's switch is process-wide).
disable_created_metrics()  # type: ignore[no-untyped-call]


class Observer:
    """The metrics registry, the Kafka client's statistics, the RPC interceptor and health, for
    one Gateway (each has a registry of its own: several gateways may share a process). A
    worker of `serve --workers N` says which it is: `pubsub_gateway_worker_info`."""

    def __init__(self, settings: Settings, worker: int | None = None) -> None:
        self._settings = settings
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)  # collections per generation: the GC's share shows here
        if worker is not None:
            Info(
                "pubsub_gateway_worker",
                "Which worker of `serve --workers N` answered this scrape (one process of N)",
                registry=self.registry,
            ).info({"worker": str(worker), "workers": str(settings.workers), "pid": str(os.getpid())})
        self.rpc = RpcMetrics(self.registry)
        self.kafka = ClientStats(settings.kafka_statistics_seconds)
        self.tracing: Tracing | None = None
        if settings.tracing != "off":  # opentelemetry is imported only then
            from gateway.observe.tracing import Tracing

            self.tracing = Tracing(settings.tracing)
        self.interceptors: Sequence[grpc.aio.ServerInterceptor] = (Interceptor(self.rpc, self.tracing),)
        self.health: Health | None = None
        self._collector: GatewayCollector | None = None
        self._authenticator: Authenticator | None = None

    async def start_health(
        self, server: grpc.aio.Server, admin: Admin, probe_topic: str, services: Sequence[str]
    ) -> None:
        self.health = Health(admin, probe_topic, services)
        await self.health.start(server)

    def add_routes(
        self,
        app: web.Application,
        *,
        admin: Admin,
        store: ResourceStore,
        delivery: DeliveryService,
        topics: TopicService,
        windows: Windows | None,
        authenticator: Authenticator | None,
    ) -> None:
        """/metrics, /healthz and /readyz on the REST app; REST's API calls timed."""
        self._collector = GatewayCollector(
            delivery, topics.tallies, store, EndOffsets(admin), self.kafka, windows
        )
        self.registry.register(self._collector)
        self._authenticator = None if self._settings.metrics_open else authenticator
        app.router.add_get(METRICS_PATH, self._metrics)
        if self.health is not None:
            self.health.add_routes(app)
        wrap_rest_calls(app[rest.API_KEY].calls, self.rpc, self.tracing)

    async def serving(self) -> None:
        if self.health is not None:
            await self.health.serving()

    async def stop(self) -> None:
        """Not ready any more (idempotent)."""
        if self.health is not None:
            await self.health.stop()
        tracing, self.tracing = self.tracing, None
        if tracing is not None:  # flushes what is batched: may wait for the collector
            await asyncio.to_thread(tracing.shutdown)

    async def _metrics(self, request: web.Request) -> web.Response:
        if self._authenticator is not None:
            try:
                await self._authenticator.authenticate(request.headers.get("Authorization"), None)
            except GatewayError as err:
                return web.Response(
                    status=401, text=f"{err.message}\n", headers={"WWW-Authenticate": "Bearer"}
                )
        collector = self._collector
        if collector is not None:
            await collector.refresh()
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
