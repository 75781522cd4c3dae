"""The gateway's TLS material (gateway/security/tls.py) without a gateway: loading, reloading
when the files change (and keeping the old material when the new is broken), what REST's
context serves after a rotation, client certificates, and the gRPC fetcher's answers.
Handshakes run in memory (ssl.MemoryBIO); the shared port under TLS is tested in
test_tls_port.py, a whole gateway in tests/e2e/test_tls.py."""

from __future__ import annotations

import itertools
import logging
import os
import ssl
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from cryptography import x509

from gateway.kafka.tls import Issued, LocalCa
from gateway.security import tls as tls_mod
from gateway.security.tls import GatewayTls, TlsError, TlsFiles, grpc_peer_certificate, rest_peer_certificate

_stamps = itertools.count(1_700_000_000_000_000_000, 1_000_000_000)


def write(path: Path, data: bytes) -> None:
    """Rewrite a file in place, with an mtime of its own: two rewrites within one tick of the
    kernel's coarse clock, of the same size, would otherwise look alike."""
    path.write_bytes(data)
    stamp = next(_stamps)
    os.utime(path, ns=(stamp, stamp))


def install(files: TlsFiles, issued: Issued) -> None:
    write(files.cert, issued.chain)
    write(files.key, issued.key)


class Pki:
    def __init__(self, directory: Path) -> None:
        self.ca = LocalCa()
        self.client_ca = LocalCa("client CA")
        self.dir = directory
        (directory / "ca.pem").write_bytes(self.ca.cert)
        (directory / "client-ca.pem").write_bytes(self.client_ca.cert)

    def files(self, client_auth: str = "none") -> TlsFiles:
        client_ca = None if client_auth == "none" else self.dir / "client-ca.pem"
        return TlsFiles(self.dir / "cert.pem", self.dir / "key.pem", client_ca, client_auth)

    def server(self) -> Issued:
        return self.ca.issue("localhost", ["localhost", "127.0.0.1"])

    def client_context(self, certificate: Issued | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.dir / "ca.pem")
        context.set_alpn_protocols(["http/1.1"])
        if certificate is not None:
            (self.dir / "client.pem").write_bytes(certificate.key + certificate.chain)
            context.load_cert_chain(self.dir / "client.pem")
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """A TLS handshake in memory; returns (client, server) ends. Raises what either side raises."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    ends = (
        client.wrap_bio(client_in, client_out, server_hostname="localhost"),
        server.wrap_bio(server_in, server_out, server_side=True),
    )
    done = [False, False]
    for _ in range(10):
        for index, end in enumerate(ends):
            if not done[index]:
                try:
                    end.do_handshake()
                    done[index] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done):
            # TLS 1.3: the server judges the client's certificate after the client is done.
            ends[1].write(b"x")
            client_in.write(server_out.read())
            assert ends[0].read(1) == b"x"
            return ends
    raise AssertionError("the handshake did not end")


def served_serial(tls: GatewayTls, client: ssl.SSLContext) -> int:
    end, _ = handshake(tls.rest_context, client)
    der = end.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_loads_and_describes(pki: Pki) -> None:
    issued = pki.server()
    install(pki.files(), issued)
    tls = GatewayTls(pki.files())
    assert tls.material.certificate.serial_number == issued.serial
    assert "CN=localhost" in tls.material.describe()
    assert f"serial {issued.serial:x}" in tls.material.describe()
    assert tls.current() is tls.material  # nothing changed: nothing read
    assert served_serial(tls, pki.client_context()) == issued.serial
    assert tls.rest_context.minimum_version == ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize(
    ("breakage", "reason"),
    [
        ("garbage", "cert.pem holds no readable PEM certificate"),
        ("garbage key", "key.pem holds no readable PEM private key"),
        ("other key", "the private key in .*key.pem is not that of the certificate in .*cert.pem"),
        ("missing", "cannot read .*key.pem: No such file"),
        ("encrypted", "the private key in .*key.pem is encrypted"),
        ("client CA", "client-ca.pem holds no readable PEM certificate"),
    ],
)
def test_unusable_files_refuse_the_start(pki: Pki, breakage: str, reason: str) -> None:
    files = pki.files("require")
    install(files, pki.server())
    if breakage == "garbage":
        write(files.cert, b"-----BEGIN CERTIFICATE-----\nnot base64\n")
    elif breakage == "garbage key":
        write(files.key, pki.server().key[:50])
    elif breakage == "other key":
        write(files.key, pki.server().key)
    elif breakage == "missing":
        files.key.unlink()
    elif breakage == "client CA":
        assert files.client_ca is not None
        write(files.client_ca, b"not a certificate")
    else:
        write(files.key, _encrypted_key())
    with pytest.raises(TlsError, match=reason):
        GatewayTls(files)


def _encrypted_key() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )


def test_new_files_are_served_to_new_connections(pki: Pki) -> None:
    files = pki.files()
    install(files, first := pki.server())
    tls = GatewayTls(files)
    listening = tls.rest_context
    install(files, second := pki.server())
    assert served_serial(tls, pki.client_context()) == second.serial  # the listener's context switched
    assert tls.rest_context is not listening
    assert tls.material.certificate.serial_number == second.serial != first.serial
    assert tls.reloads == 1


def test_a_broken_rewrite_keeps_the_old_material_and_warns_once(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    files = pki.files()
    install(files, first := pki.server())
    tls = GatewayTls(files)
    second = pki.server()
    caplog.set_level(logging.WARNING, logger=tls_mod.log.name)

    write(files.cert, second.chain[:100])  # half written
    for _ in range(3):
        assert tls.current().certificate.serial_number == first.serial
    write(files.cert, second.chain)  # the whole certificate, the old key: not a pair
    for _ in range(3):
        assert served_serial(tls, pki.client_context()) == first.serial
    assert tls.failed_reloads == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # one per state of the files, not one per handshake
    assert all("still serving" in w and f"serial {first.serial:x}" in w for w in warnings)

    write(files.key, second.key)  # the pair is complete
    assert served_serial(tls, pki.client_context()) == second.serial
    assert tls.reloads == 1


def test_a_file_gone_for_a_while_keeps_the_old_material(pki: Pki) -> None:
    files = pki.files()
    install(files, first := pki.server())
    tls = GatewayTls(files)
    files.cert.unlink()
    assert tls.current().certificate.serial_number == first.serial
    second = pki.server()
    replacement = files.cert.with_suffix(".new")
    replacement.write_bytes(second.chain)
    write(files.key, second.key)
    os.replace(replacement, files.cert)  # as certificate managers do: a rename over the file
    assert tls.current().certificate.serial_number == second.serial


def test_the_grpc_fetcher_answers_only_changes(pki: Pki) -> None:
    files = pki.files()
    install(files, pki.server())
    tls = GatewayTls(files)
    initial, fetch = tls.grpc_fetcher()
    assert isinstance(initial, grpc.ServerCertificateConfiguration)
    assert fetch() is None
    install(files, pki.server())
    assert isinstance(fetch(), grpc.ServerCertificateConfiguration)
    assert fetch() is None
    write(files.key, pki.server().key)  # broken: nothing new for gRPC either
    assert fetch() is None
    assert isinstance(tls.grpc_credentials(), grpc.ServerCredentials)


@pytest.mark.parametrize("client_auth", ["optional", "require"])
def test_client_certificates(pki: Pki, client_auth: str) -> None:
    files = pki.files(client_auth)
    install(files, pki.server())
    tls = GatewayTls(files)
    member = pki.client_ca.issue("a client", server=False)
    _, server_end = handshake(tls.rest_context, pki.client_context(member))
    der = rest_peer_certificate(_request(server_end))  # type: ignore[arg-type]
    assert der is not None and x509.load_der_x509_certificate(der).serial_number == member.serial

    stranger = LocalCa("another CA").issue("a stranger", server=False)
    with pytest.raises(ssl.SSLError):
        handshake(tls.rest_context, pki.client_context(stranger))  # never accepted unverified
    if client_auth == "require":
        with pytest.raises(ssl.SSLError):
            handshake(tls.rest_context, pki.client_context())
    else:
        _, server_end = handshake(tls.rest_context, pki.client_context())
        assert rest_peer_certificate(_request(server_end)) is None  # type: ignore[arg-type]


def test_a_rotated_client_ca_is_used_for_new_connections(pki: Pki) -> None:
    files = pki.files("require")
    install(files, pki.server())
    tls = GatewayTls(files)
    newcomer = LocalCa("the next client CA")
    member = newcomer.issue("a client", server=False)
    with pytest.raises(ssl.SSLError):
        handshake(tls.rest_context, pki.client_context(member))
    assert files.client_ca is not None
    write(files.client_ca, pki.client_ca.cert + newcomer.cert)
    handshake(tls.rest_context, pki.client_context(member))


def _request(ssl_object: ssl.SSLObject | None) -> Any:
    transport = SimpleNamespace(get_extra_info=lambda name: ssl_object if name == "ssl_object" else None)
    return SimpleNamespace(transport=transport)


def test_peer_certificates_as_der() -> None:
    issued = LocalCa().issue("a client", server=False)
    der = ssl.PEM_cert_to_DER_cert(issued.cert.decode())
    context = SimpleNamespace(
        auth_context=lambda: {"x509_pem_cert": [issued.cert], "transport_security_type": [b"ssl"]}
    )
    assert grpc_peer_certificate(context) == der  # type: ignore[arg-type]
    assert grpc_peer_certificate(SimpleNamespace(auth_context=dict)) is None  # type: ignore[arg-type]
    assert rest_peer_certificate(_request(None)) is None
    assert rest_peer_certificate(SimpleNamespace(transport=None)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("client_auth", ["none", "require"])
def test_peer_hop_credentials(pki: Pki, client_auth: str) -> None:
    files = pki.files(client_auth)
    install(files, pki.server())
    tls = GatewayTls(files)
    assert isinstance(tls.peer_credentials(pki.dir / "ca.pem"), grpc.ChannelCredentials)
    assert isinstance(tls.peer_credentials(None), grpc.ChannelCredentials)


def test_the_default_push_token_issuer_is_https_under_tls() -> None:
    from gateway.push.manager import default_issuer
    from gateway.settings import Settings

    assert default_issuer(Settings(), 8085) == "http://127.0.0.1:8085"
    secured = Settings(tls_cert_file=Path("cert.pem"), tls_key_file=Path("key.pem"))
    assert default_issuer(secured, 8085) == "https://127.0.0.1:8085"  # the key set is served there
