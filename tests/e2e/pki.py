"""The test's own certificate authorities and the gateway's TLS files (tests/e2e/test_tls.py,
test_push.py)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import grpc
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from gateway.kafka.tls import Issued, LocalCa
from tests.gateways import GatewayProcess

HOSTS = ["127.0.0.1", "localhost"]


class Pki:
    """The test's CAs and the gateway's files: `ca` signs the gateway's certificates,
    `client_ca` the clients'. The client CA file names both, so the gateway's own certificate
    passes as a client certificate on the peer hop."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca, self.client_ca = LocalCa("gateway CA"), LocalCa("client CA")
        self.ca_file, self.client_ca_file = directory / "ca.pem", directory / "client-ca.pem"
        self.cert_file, self.key_file = directory / "cert.pem", directory / "key.pem"
        self.ca_file.write_bytes(self.ca.cert)
        self.client_ca_file.write_bytes(self.client_ca.cert + self.ca.cert)
        self.server = self.install(self.ca.issue("gateway", HOSTS))

    def install(self, issued: Issued) -> Issued:
        """Replace the gateway's files as certificate managers do: each renamed into place."""
        for path, data in ((self.cert_file, issued.chain), (self.key_file, issued.key)):
            fresh = path.with_suffix(".tmp")
            fresh.write_bytes(data)
            os.replace(fresh, path)
        return issued

    def flags(self, client_auth: str = "none") -> list[str]:
        out = ["--tls-cert-file", str(self.cert_file), "--tls-key-file", str(self.key_file)]
        if client_auth != "none":
            out += ["--tls-client-auth", client_auth, "--tls-client-ca-file", str(self.client_ca_file)]
        return out

    def client(self) -> Issued:
        return self.client_ca.issue("a client", server=False)

    def context(self, alpn: str = "http/1.1", certificate: Issued | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        context.set_alpn_protocols([alpn])
        if certificate is not None:
            path = self.dir / f"client-{certificate.serial:x}.pem"
            path.write_bytes(certificate.key + certificate.chain)
            context.load_cert_chain(path)
        return context

    def channel(self, address: str, certificate: Issued | None = None) -> grpc.Channel:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.ca.cert,
            private_key=None if certificate is None else certificate.key,
            certificate_chain=None if certificate is None else certificate.chain,
        )
        # A subchannel of its own: a new connection, hence a new handshake.
        return grpc.secure_channel(address, credentials, options=[("grpc.use_local_subchannel_pool", 1)])

    def clients(
        self, gw: GatewayProcess, certificate: Issued | None = None
    ) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]:
        """The official clients on TLS channels (PUBSUB_EMULATOR_HOST would force plaintext)."""
        publisher = PublisherGrpcTransport(channel=self.channel(gw.address, certificate))
        subscriber = SubscriberGrpcTransport(channel=self.channel(gw.address, certificate))
        return pubsub_v1.PublisherClient(transport=publisher), pubsub_v1.SubscriberClient(
            transport=subscriber
        )
