"""TLS on both wires and on the peer hop: the gateway's certificate, reloaded when it changes.

`GatewayTls` holds what `--tls-cert-file`, `--tls-key-file` and `--tls-client-ca-file` hold, and
hands it out in the forms the servers take:
- gRPC: `grpc_credentials()`, dynamic SSL server credentials whose fetcher grpc core calls at
  every handshake;
- REST: `rest_context`, an `ssl.SSLContext` (TLS 1.2+, ALPN `http/1.1`) whose `sni_callback`,
  which OpenSSL calls at every handshake (with or without a server name), moves the connection
  to the newest context;
- the peer hop that forwards acks: `peer_credentials()`, gRPC channel credentials.

Reload: each handshake first compares the files' (device, inode, size, mtime, ctime) with
those last seen: a few stat calls, nothing read. When one differs the files are read and
checked (the key must be the certificate's, the client CA must parse) and, only if all holds,
become what new connections get; connections already open keep theirs. A reload that fails (a
half-written file, a key of another certificate, a file gone while renamed) keeps the old
material and logs one warning for that state of the files; the next change is tried again.
A certificate manager that writes the two files one after the other passes through such a
state: a handshake in between costs one warning, and the second write completes the pair.
The peer hop's channel credentials are made once, at start (see `peer_credentials`).

The per-handshake check was chosen over a timer: a new certificate is served from the first
handshake after it is written, no task has to live and be stopped, and the check costs what
a timer would (a stat) only when connections arrive. Both servers ask the same `GatewayTls`,
so gRPC and REST always serve the same certificate.

Client certificates (`--tls-client-auth`):
- REST asks for one (CERT_OPTIONAL) or requires it (CERT_REQUIRED), verified against the
  client CA either way: a certificate that does not chain fails the handshake.
- gRPC: grpcio offers a server two modes only, "do not ask" and "ask, require and verify"
  (its `require_client_authentication` picks GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_
  AND_VERIFY or GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE; grpc core's "request but do not
  require" is not reachable from Python). So `require` requires one on gRPC too, while with
  `optional` gRPC does not ask: its callers are never identified by a certificate, even when
  they have one.
`grpc_peer_certificate` and `rest_peer_certificate` give the wire layer the verified
certificate of a call's client, as DER in both cases, or None.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import ssl
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import grpc
from aiohttp import web
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from gateway.errors import FailedPrecondition

log = logging.getLogger(__name__)

# The state of one file as a reload sees it: (device, inode, size, mtime, ctime) in ns, or
# None while it is missing. A change of any means the file was rewritten or replaced (a
# rename over it, a Kubernetes secret's symlink swapped).
FileState = tuple[int, int, int, int, int] | None
REST_ALPN = ("http/1.1",)
PEER_CERT_KEY = "x509_pem_cert"  # grpc's auth context: the verified client certificate, PEM
# OpenSSL's servername callback as Python's ssl module takes it (the name is None without SNI).
SniCallback = Callable[[ssl.SSLObject, str | None, ssl.SSLContext], None]


class TlsError(FailedPrecondition):
    """The certificate files cannot be used; at start the gateway refuses to start with it."""


@dataclasses.dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the material is, and whether clients are asked for certificates."""

    cert: Path
    key: Path
    client_ca: Path | None = None
    client_auth: str = "none"  # none, optional or require (Settings.tls_client_auth)

    @property
    def paths(self) -> tuple[Path, ...]:
        return (self.cert, self.key) if self.client_ca is None else (self.cert, self.key, self.client_ca)


def file_states(paths: Sequence[Path]) -> tuple[FileState, ...]:
    """The files' states: a stat each, never an exception."""
    out: list[FileState] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Material:
    """One consistent reading of the files, checked, in every form the servers take."""

    chain: bytes  # PEM: the certificate and its intermediates
    key: bytes  # PEM
    client_ca: bytes | None  # PEM, when clients are asked for certificates
    rest: ssl.SSLContext
    certificate: x509.Certificate  # the first of the chain: the gateway's own
    states: tuple[FileState, ...]

    def describe(self) -> str:
        cert = self.certificate
        return (
            f"subject {cert.subject.rfc4514_string()}, serial {cert.serial_number:x}, "
            f"valid until {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC"
        )


def _no_password() -> bytes:
    raise TlsError("the private key is encrypted: give an unencrypted PEM key")


def load(files: TlsFiles, sni_callback: SniCallback | None = None) -> Material:
    """Read and check the files. Raises TlsError (saying which file and what is wrong) rather
    than return material that would fail handshakes; files rewritten while read are refused
    too, to be read again at their next change."""
    before = file_states(files.paths)
    chain, key = _read(files.cert), _read(files.key)
    client_ca = _read(files.client_ca) if files.client_ca is not None else None
    certificate = _certificates(files.cert, chain)[0]
    _check_key(files, key, certificate)
    if files.client_ca is not None and client_ca is not None:
        _certificates(files.client_ca, client_ca)
    try:  # OpenSSL reads the same files: what it refuses beyond the checks above
        rest = rest_context(files, sni_callback)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise TlsError(f"OpenSSL cannot use {_named(files)}: {exc}") from None
    if file_states(files.paths) != before:
        raise TlsError(f"{_named(files)} changed while being read")
    if certificate.not_valid_after_utc < datetime.datetime.now(datetime.UTC):
        log.warning("TLS: the certificate in %s expired on %s", files.cert, certificate.not_valid_after_utc)
    return Material(chain, key, client_ca, rest, certificate, before)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read {path}: {exc.strerror or exc}") from None


def _certificates(path: Path, pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise TlsError(f"{path} holds no readable PEM certificate") from None


def _check_key(files: TlsFiles, pem: bytes, certificate: x509.Certificate) -> None:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:  # a password is needed
        raise TlsError(f"the private key in {files.key} is encrypted: give an unencrypted PEM key") from None
    except (ValueError, UnsupportedAlgorithm):
        raise TlsError(f"{files.key} holds no readable PEM private key") from None
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*spki) != certificate.public_key().public_bytes(*spki):
        raise TlsError(f"the private key in {files.key} is not that of the certificate in {files.cert}")


def _named(files: TlsFiles) -> str:
    return ", ".join(str(p) for p in files.paths)


def rest_context(files: TlsFiles, sni_callback: SniCallback | None = None) -> ssl.SSLContext:
    """The REST server's context: TLS 1.2 or later, HTTP/1.1 by ALPN, client certificates as
    `files.client_auth` says (verified against the client CA)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION
    context.set_alpn_protocols(list(REST_ALPN))
    context.load_cert_chain(files.cert, files.key, password=_no_password)
    if files.client_auth != "none" and files.client_ca is not None:
        context.load_verify_locations(cafile=files.client_ca)
        context.verify_mode = ssl.CERT_REQUIRED if files.client_auth == "require" else ssl.CERT_OPTIONAL
    context.sni_callback = sni_callback
    return context


class GatewayTls:
    """The gateway's TLS material, reloaded when its files change (see the module's docstring).
    Safe to ask from any thread: grpc core's handshakes run on threads of its own."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._material = load(files, self._switch)
        self._seen = self._material.states  # the states last tried, loaded or not
        self.reloads = self.failed_reloads = 0

    @property
    def material(self) -> Material:
        return self._material

    def current(self) -> Material:
        """The material to serve now: read again first if a file changed since last looked at."""
        states = file_states(self.files.paths)
        with self._lock:
            if states == self._seen:
                return self._material
            self._seen = states
            try:
                material = load(self.files, self._switch)
            except TlsError as exc:
                self.failed_reloads += 1
                log.warning(
                    "TLS: %s; still serving the certificate loaded before (%s)",
                    exc.message,
                    self._material.describe(),
                )
                return self._material
            except Exception:  # never let a reload end a handshake
                self.failed_reloads += 1
                log.exception(
                    "TLS: reloading %s failed; keeping the certificate loaded before", _named(self.files)
                )
                return self._material
            self._material = material
            self.reloads += 1
        log.info("TLS: reloaded %s: %s", self.files.cert, material.describe())
        return material

    # -- REST ------------------------------------------------------------------------------------

    @property
    def rest_context(self) -> ssl.SSLContext:
        """The context to listen with; each handshake moves to the newest (`_switch`)."""
        return self._material.rest

    def _switch(self, ssl_object: ssl.SSLObject, _name: str | None, context: ssl.SSLContext) -> None:
        """The sni_callback: OpenSSL calls it on every ClientHello, before choosing the
        certificate. The context's verify mode stays the listener's (it never changes), and
        the certificate, key and client CA become the newest."""
        newest = self.current().rest
        if newest is not context:
            ssl_object.context = newest

    # -- gRPC ------------------------------------------------------------------------------------

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Server credentials whose certificate follows the files (`grpc_fetcher`)."""
        initial, fetch = self.grpc_fetcher()
        return grpc.dynamic_ssl_server_credentials(
            initial,
            cast(Callable[[], grpc.ServerCertificateConfiguration], fetch),
            require_client_authentication=self.files.client_auth == "require",
        )

    def grpc_fetcher(
        self,
    ) -> tuple[grpc.ServerCertificateConfiguration, Callable[[], grpc.ServerCertificateConfiguration | None]]:
        """The initial configuration and the fetcher grpc core calls at every handshake: it
        answers None (keep what you have) unless the files changed since it last answered."""
        served = self._material
        lock = threading.Lock()

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            nonlocal served
            material = self.current()
            with lock:
                if material is served:
                    return None
                served = material
            return self._grpc_configuration(material)

        return self._grpc_configuration(served), fetch

    def _grpc_configuration(self, material: Material) -> grpc.ServerCertificateConfiguration:
        roots = material.client_ca if self.files.client_auth == "require" else None
        return grpc.ssl_server_certificate_configuration([(material.key, material.chain)], roots)

    # -- the peer hop ----------------------------------------------------------------------------

    def peer_credentials(self, peer_ca: Path | None) -> grpc.ChannelCredentials:
        """For calls to other gateway processes: their certificates chain to `peer_ca` (None:
        the system's roots), and where clients must show a certificate this process shows its
        own. Read once: the peer hop's channels keep them until the process restarts."""
        roots = peer_ca.read_bytes() if peer_ca is not None else None
        if self.files.client_auth != "require":
            return grpc.ssl_channel_credentials(root_certificates=roots)
        material = self.current()
        return grpc.ssl_channel_credentials(
            root_certificates=roots, private_key=material.key, certificate_chain=material.chain
        )


# -- the verified certificate of a call's client -------------------------------------------------


def grpc_peer_certificate(context: grpc.aio.ServicerContext[Any, Any]) -> bytes | None:
    """The client certificate grpc verified for this call (DER), or None: plaintext, or no
    certificate asked for (gRPC asks only with `--tls-client-auth require`)."""
    for pem in context.auth_context().get(PEER_CERT_KEY, ()):
        try:
            return ssl.PEM_cert_to_DER_cert(pem.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return None
    return None


def rest_peer_certificate(request: web.BaseRequest) -> bytes | None:
    """The client certificate the REST connection's handshake verified (DER), or None."""
    transport = request.transport
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    return ssl_object.getpeercert(binary_form=True) or None
