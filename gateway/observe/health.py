"""Liveness and readiness, over HTTP (/healthz, /readyz) and gRPC (grpc.health.v1.Health).

Live: the process answers (its event loop runs). Ready: the gateway has started (the resources
are loaded, the servers listen) and Kafka answered the last probe, a Metadata request for the
resource topic to any live broker (Admin.answers) made every PROBE_SECONDS (RETRY_SECONDS after
one that failed). Not ready is answered 503 with the reason, and the gRPC health service says
NOT_SERVING, for the whole server ("") and for each service it serves. On shutdown both turn
not ready for good, before the servers stop.

The probe was a DescribeTopics, which goes to the node the admin client holds for the
controller: with that node killed it failed until the cluster fenced it and the client
refreshed its metadata, so readiness came back ~11 s after a broker of three died, while
deliveries flowed again after 5-9 s.

Both are open to every caller, with authentication on too: probes (kubelet, load balancers)
carry no credentials, and the answer tells nothing of the resources.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import grpc
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_health.v1.health import aio as health_aio  # type: ignore[import-untyped]

from gateway.clock import within
from gateway.kafka.admin import Admin

log = logging.getLogger(__name__)
PROBE_SECONDS = 2.0  # how often Kafka is probed
RETRY_SECONDS = 0.5  # how soon after a failed probe the next: ready again as soon as Kafka is
PROBE_TIMEOUT = 3.0  # a probe not answered within this long counts as Kafka unreachable
STARTING = "starting: loading the resources and opening the ports"
STOPPING = "shutting down"


class Health:
    def __init__(self, admin: Admin, probe_topic: str, services: Sequence[str]) -> None:
        self._admin = admin
        self._topic = probe_topic
        self._services = ("", *services)
        self.servicer = health_aio.HealthServicer()
        self.reason: str | None = STARTING  # None: ready
        self._started = False
        self._kafka_error: str | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self.reason is None

    async def start(self, server: grpc.aio.Server) -> None:
        """Serve the gRPC health service (NOT_SERVING until `serving`) and start probing."""
        await self._publish()
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)
        self._task = asyncio.create_task(self._probe_loop(), name="readiness probe")

    async def serving(self) -> None:
        """The gateway has started: ready as soon as Kafka answers."""
        self._started = True
        await self._probe()

    async def stop(self) -> None:
        """Not ready for good (idempotent)."""
        self.reason = STOPPING
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.servicer.enter_graceful_shutdown()

    async def _probe_loop(self) -> None:
        while self.reason != STOPPING:  # as well as the cancel: a loop must not outlive stop()
            await asyncio.sleep(PROBE_SECONDS if self._kafka_error is None else RETRY_SECONDS)
            await self._probe()

    async def _probe(self) -> None:
        try:
            await within(self._admin.answers(self._topic, PROBE_TIMEOUT), PROBE_TIMEOUT + 1)
            error = None
        except TimeoutError:
            error = f"Kafka did not answer within {PROBE_TIMEOUT:g} s"
        except Exception as exc:  # noqa: BLE001 - any failure is the reason to report
            error = f"Kafka: {exc}"
        if error != self._kafka_error:
            if error is None:
                log.info("Kafka answers again: ready")
            else:
                log.warning("not ready: %s", error)
        self._kafka_error = error
        await self._publish()

    async def _publish(self) -> None:
        if self.reason == STOPPING:
            return
        if not self._started:
            self.reason = STARTING
        else:
            self.reason = None if self._kafka_error is None else f"Kafka unreachable: {self._kafka_error}"
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.reason is None
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in self._services:
            await self.servicer.set(service, status)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/healthz", self._live)
        app.router.add_get("/readyz", self._ready)

    async def _live(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _ready(self, request: web.Request) -> web.Response:
        reason = self.reason
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")
