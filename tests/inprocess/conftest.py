"""The in-process tier: a whole gateway (resource store, core services, runners, stream sessions,
gRPC and REST servicers) started inside the test process on the session broker.

The gateway runs on an event loop of its own in a background thread, as it would in its own
process; tests call into its core services with `gw.run(coroutine)` and drive its ports with the
official client in this process (its generated protos live in their own descriptor pool, so both
load here). Failures show the gateway's own traceback, and a run costs seconds, not a process
start per test.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import grpc
import pytest
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.schema_service.transports import SchemaServiceGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from gateway.server import Gateway
from gateway.settings import Settings

T = TypeVar("T")


class InProcessGateway:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="gateway-loop", daemon=True)
        self.gateway = Gateway(settings)
        self.address = ""
        self.rest_address = ""

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run a coroutine on the gateway's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def http(self, method: str, path: str, body: object | None = None, token: str = "") -> tuple[int, Any]:
        """A REST call to `/v1/{path}` with a JSON body (and a bearer token): (status, JSON)."""
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        request = urllib.request.Request(
            f"http://{self.rest_address}/v1/{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers=headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def start(self) -> InProcessGateway:
        self._thread.start()
        self.run(self.gateway.start(), timeout=120.0)
        self.address = f"127.0.0.1:{self.gateway.port}"
        self.rest_address = f"127.0.0.1:{self.gateway.rest_port}"
        return self

    def stop(self) -> None:
        try:
            self.run(self.gateway.stop(), timeout=60.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    def clients(self) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]:
        """The official clients on plain channels to this gateway (as PUBSUB_EMULATOR_HOST makes)."""
        publisher = pubsub_v1.PublisherClient(
            transport=PublisherGrpcTransport(channel=grpc.insecure_channel(self.address))
        )
        subscriber = pubsub_v1.SubscriberClient(
            transport=SubscriberGrpcTransport(channel=grpc.insecure_channel(self.address))
        )
        return publisher, subscriber

    def schema_client(self) -> pubsub_v1.SchemaServiceClient:
        """The official SchemaServiceClient on a plain channel to this gateway."""
        return pubsub_v1.SchemaServiceClient(
            transport=SchemaServiceGrpcTransport(channel=grpc.insecure_channel(self.address))
        )


def wait_for(what: str, done: Callable[[], bool], seconds: float = 30.0) -> None:
    """Poll `done` every 50 ms; fail naming `what` when it is not true within `seconds`."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds:g} s: {what}")
        time.sleep(0.05)


def settings_for(bootstrap: str, prefix: str, **overrides: Any) -> Settings:
    """What tests/gateways.py gives its gateway processes, for an in-process one."""
    base: dict[str, Any] = {
        "port": 0,
        "rest_port": 0,
        "kafka_bootstrap": bootstrap,
        "internal_prefix": prefix,
        "session_timeout_ms": 6000,
        "checkpoint_interval_seconds": 0.5,
        "pull_max_wait_seconds": 2.0,
    }
    return Settings(**{**base, **overrides})


@pytest.fixture(scope="session")
def gw(kafka_bootstrap: str) -> Iterator[InProcessGateway]:
    """One in-process gateway for the tier (its own internal prefix: nothing shared with e2e)."""
    gateway = InProcessGateway(settings_for(kafka_bootstrap, f"__inproc_{uuid.uuid4().hex[:8]}")).start()
    yield gateway
    gateway.stop()


@pytest.fixture
def names() -> Any:
    uid = uuid.uuid4().hex[:10]

    def make(collection: str, suffix: str = "") -> str:
        return f"projects/inproc/{collection}/{collection[:3]}-{uid}{suffix}"

    return make
