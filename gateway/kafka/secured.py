"""The embedded broker's secured mode: SASL_SSL with SCRAM-SHA-512 for clients, and ACLs.

``LocalKafka(secured=True)`` runs a node as a secured production cluster would be run:

- Clients reach the one advertised listener, ``SASL_SSL``: TLS with a certificate signed by a CA
  made for this broker (``tls.py``), and SCRAM-SHA-512 logins whose credentials live in the
  cluster metadata (added with ``add_user``). Brokers talk to each other there too, as the
  super user ``admin``, whose SCRAM credential is written when the storage is formatted.
- The controller listener uses SASL PLAIN (over loopback, not advertised) with a static JAAS
  user. SCRAM cannot serve there: its credentials are stored in the metadata that the
  controllers themselves serve, so a broker could not log in to fetch them. A PLAINTEXT
  controller listener would need ``User:ANONYMOUS`` as a super user (brokers register and
  heartbeat under that principal), which would make anything that connects to that port a
  super user; PLAIN keeps one authenticated super user, ``admin``, for all internal traffic.
- ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: a principal may do only
  what an ACL allows it (super users excepted).

The admin password is random per data directory, kept in ``<data>/security/`` with the CA and
the broker's key, so a persistent data directory restarts with the same credentials.
"""

from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path

ADMIN = "admin"
MECHANISM = "SCRAM-SHA-512"
LISTENER = "SASL_SSL"
CONTROLLER_PROTOCOL = "SASL_PLAINTEXT"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SCRAM_ITERATIONS = 4096  # Kafka's default and its minimum
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclasses.dataclass(frozen=True, slots=True)
class Security:
    """What clients of a secured local broker need: the CA file and the super user's login."""

    ca: Path
    keystore: Path
    admin_password: str

    @staticmethod
    def load_or_make(directory: Path) -> Security:
        """The security material of a data directory, made on first use."""
        ca, keystore, secret = directory / "ca.pem", directory / "server.pem", directory / "admin.password"
        if not (ca.exists() and keystore.exists() and secret.exists()):
            from gateway.kafka.tls import make_server_tls  # cryptography: only when secured

            tls = make_server_tls(directory)
            secret.touch(mode=0o600)
            secret.write_text(secrets.token_hex(16))  # hex: no quoting in JAAS or tool arguments
            ca, keystore = tls.ca, tls.keystore
        return Security(ca, keystore, secret.read_text().strip())

    def broker_settings(self) -> dict[str, str]:
        """server.properties lines beyond the listeners (same on every node)."""
        password = self.admin_password
        scram_jaas = f'{_SCRAM_MODULE} required username="{ADMIN}" password="{password}";'
        plain_jaas = (
            f'{_PLAIN_MODULE} required username="{ADMIN}" password="{password}" user_{ADMIN}="{password}";'
        )
        return {
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.{LISTENER.lower()}.sasl.enabled.mechanisms": MECHANISM,
            f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config": scram_jaas,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain_jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "authorizer.class.name": AUTHORIZER,
            "super.users": f"User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_args(self) -> list[str]:
        """kafka-storage format arguments that store the super user's SCRAM credential."""
        return ["--add-scram", f"{MECHANISM}=[name={ADMIN},password={self.admin_password}]"]

    def librdkafka(self, user: str = ADMIN, password: str | None = None) -> dict[str, str]:
        """librdkafka settings (as for `--kafka-config`) to log in as `user` (default: the
        super user)."""
        return {
            "security.protocol": LISTENER,
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.admin_password if password is None else password,
            "ssl.ca.location": str(self.ca),
        }

    def java(self, user: str = ADMIN, password: str | None = None) -> dict[str, str]:
        """The same for Java clients (Spark's Kafka source and sink, kafka-*.sh --command-config)."""
        secret = self.admin_password if password is None else password
        return {
            "security.protocol": LISTENER,
            "sasl.mechanism": MECHANISM,
            "sasl.jaas.config": f'{_SCRAM_MODULE} required username="{user}" password="{secret}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
        }
