"""gRPC push of the seed's early API over TLS (--grpc-push-tls, docs/push.md): a
PushEndpointService serving TLS with a certificate of a CA made here gets the messages when the
gateway trusts that CA, by its host name and by its address; a gateway that does not trust it
pushes nothing there (the push fails, and the message stays)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from gateway._pb.proto2 import empty_pb2
from gateway._pb.tech.pubsub import pubsub_pb2 as lpb
from gateway._pb.tech.pubsub import pubsub_pb2_grpc as lgrpc
from gateway.kafka.tls import LocalCa
from tests.gateways import GatewayProcess

PROJECT = "tls-push-e2e"


class Endpoint(lgrpc.PushEndpointServiceServicer):
    def __init__(self) -> None:
        self.data: list[bytes] = []
        self._lock = threading.Lock()

    def HandlePubsubEvent(self, request: lpb.PubsubEvent, context: grpc.ServicerContext) -> empty_pb2.Empty:
        with self._lock:
            self.data.append(request.message.data)
        return empty_pb2.Empty()


@pytest.fixture(scope="module")
def tls_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Endpoint, int, Path]]:
    ca = LocalCa("push test CA")
    issued = ca.issue("localhost", ("localhost", "127.0.0.1"))
    ca_file = tmp_path_factory.mktemp("push-tls") / "ca.pem"
    ca_file.write_bytes(ca.cert)
    servicer = Endpoint()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    lgrpc.add_PushEndpointServiceServicer_to_server(servicer, server)
    credentials = grpc.ssl_server_credentials([(issued.key, issued.chain)])
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield servicer, port, ca_file
    finally:
        server.stop(0)


def _gateway(bootstrap: str, log_dir: Path, tls: str) -> GatewayProcess:
    prefix = f"tlsp{uuid.uuid4().hex[:6]}"
    return GatewayProcess(
        bootstrap, prefix, log_dir, "--legacy-project", PROJECT, "--grpc-push-tls", tls
    ).start()


def _push_one(gw: GatewayProcess, endpoint: str, data: bytes) -> None:
    tag = uuid.uuid4().hex[:8]
    with grpc.insecure_channel(gw.address) as channel:
        pub, sub = lgrpc.PublisherServiceStub(channel), lgrpc.SubscriberServiceStub(channel)
        pub.CreateTopic(lpb.Topic(name=f"t-{tag}"))
        config = lpb.PushConfig(push_endpoint=endpoint)
        sub.CreateSubscription(lpb.Subscription(name=f"s-{tag}", topic=f"t-{tag}", push_config=config))
        pub.Publish(lpb.PublishRequest(topic=f"t-{tag}", message=lpb.PubsubMessage(data=data)))


def _wait(done: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.1)
    return False


def test_pushes_reach_a_tls_endpoint_whose_ca_the_gateway_trusts(
    kafka_bootstrap: str, log_dir: Path, tls_endpoint: tuple[Endpoint, int, Path]
) -> None:
    server, port, ca_file = tls_endpoint
    gw = _gateway(kafka_bootstrap, log_dir, str(ca_file))
    try:
        _push_one(gw, f"localhost:{port}", b"by-name")
        _push_one(gw, f"127.0.0.1:{port}", b"by-address")
        assert _wait(lambda: {b"by-name", b"by-address"} <= set(server.data), 30), server.data
    finally:
        gw.kill()


def test_a_gateway_that_does_not_trust_the_endpoints_ca_pushes_nothing_to_it(
    kafka_bootstrap: str, log_dir: Path, tls_endpoint: tuple[Endpoint, int, Path]
) -> None:
    server, port, _ = tls_endpoint
    for tls in ("system", "off"):  # the system's CAs do not include ours; plaintext is refused
        gw = _gateway(kafka_bootstrap, log_dir, tls)
        try:
            data = f"untrusted-{tls}".encode()
            _push_one(gw, f"localhost:{port}", data)
            assert not _wait(lambda: data in server.data, 6), f"pushed with --grpc-push-tls {tls}"  # noqa: B023
        finally:
            gw.kill()
