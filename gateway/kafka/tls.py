"""A certificate authority and a server certificate for a local TLS listener, made on the spot.

For the embedded broker's secured listener (``LocalKafka(secured=True)``) and the tests that use
it: a throwaway CA signs one certificate valid for the loopback names, written as PEM files in
the shape Kafka reads with ``ssl.keystore.type=PEM`` (an unencrypted PKCS#8 key followed by the
certificate chain) and clients read as a CA file (librdkafka's ``ssl.ca.location``, Java's
``ssl.truststore.type=PEM``). `LocalCa` issues more certificates (servers', clients') for the
tests of the gateway's own TLS. Nothing here is meant for a real deployment's certificates.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK = ("127.0.0.1", "localhost")
VALID_DAYS = 30


@dataclasses.dataclass(frozen=True, slots=True)
class ServerTls:
    """Where the PEM files are: `ca` (the CA certificate clients trust) and `keystore` (the
    server's private key and certificate chain, for Kafka's PEM keystore)."""

    ca: Path
    keystore: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pubsub-kafka-gateway local"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for host in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Issued:
    """A certificate `LocalCa` issued: its PEM key (unencrypted PKCS#8), its PEM certificate
    and, for convenience, `chain` (the certificate, then the CA's)."""

    key: bytes
    cert: bytes
    chain: bytes
    serial: int


class LocalCa:
    """A throwaway CA (EC P-256 keys: fast to make, read by Java's PEM keystore and OpenSSL)."""

    def __init__(self, common_name: str = "pubsub-kafka-gateway local CA") -> None:
        now = datetime.datetime.now(datetime.UTC)
        self._start, self._end = (
            now - datetime.timedelta(minutes=5),
            now + datetime.timedelta(days=VALID_DAYS),
        )
        self._key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(common_name)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._start)
            .not_valid_after(self._end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert = certificate.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, hosts: Sequence[str] = (), *, server: bool = True) -> Issued:
        """A certificate for `common_name`, naming every entry of `hosts` (IP addresses as IP
        SANs) so that clients checking the host name accept it. It may authenticate a client
        always, and a server with `server`."""
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._start)
            .not_valid_after(self._end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([*usages, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        pem = serialization.Encoding.PEM
        private = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        cert = certificate.public_bytes(pem)
        return Issued(private, cert, cert + self.cert, certificate.serial_number)


def make_server_tls(directory: Path, hosts: Sequence[str] = LOOPBACK) -> ServerTls:
    """Write `ca.pem` and `server.pem` into `directory` (made if missing) and return their paths.

    The server certificate names every entry of `hosts` (IP addresses as IP SANs), so clients
    that check the host name, as librdkafka and Java clients do by default, accept it."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = LocalCa()
    issued = ca.issue(hosts[0], hosts)
    ca_path, keystore_path = directory / "ca.pem", directory / "server.pem"
    ca_path.write_bytes(ca.cert)
    keystore_path.touch(mode=0o600)
    keystore_path.write_bytes(issued.key + issued.chain)
    return ServerTls(ca_path, keystore_path)
