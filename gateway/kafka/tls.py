"""A certificate authority and a server certificate for a local TLS listener, made on the spot.

For the embedded broker's secured listener (``LocalKafka(secured=True)``) and the tests that use
it: a throwaway CA signs one certificate valid for the loopback names, written as PEM files in
the shape Kafka reads with ``ssl.keystore.type=PEM`` (an unencrypted PKCS#8 key followed by the
certificate chain) and clients read as a CA file (librdkafka's ``ssl.ca.location``, Java's
``ssl.truststore.type=PEM``). Nothing here is meant for a real deployment's certificates.
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


def make_server_tls(directory: Path, hosts: Sequence[str] = LOOPBACK) -> ServerTls:
    """Write `ca.pem` and `server.pem` into `directory` (made if missing) and return their paths.

    The server certificate names every entry of `hosts` (IP addresses as IP SANs), so clients
    that check the host name, as librdkafka and Java clients do by default, accept it. EC P-256
    keys: fast to make, and read by both Java's PEM keystore and OpenSSL."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("pubsub-kafka-gateway local CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    pem = serialization.Encoding.PEM
    ca_path, keystore_path = directory / "ca.pem", directory / "server.pem"
    ca_path.write_bytes(ca_cert.public_bytes(pem))
    private = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    keystore_path.touch(mode=0o600)
    keystore_path.write_bytes(private + cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    return ServerTls(ca_path, keystore_path)
