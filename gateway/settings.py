"""One settings object, from command-line flags and environment variables, validated at start-up.

Each setting is declared once, as a field of `Settings`: its flag `--some-flag` and its environment
variable `PUBSUB_GATEWAY_SOME_FLAG` come from the field's name `some_flag`, what the flag takes
from the field's type, and its help from `setting(...)`. A flag given on the command line wins
over the variable.
"""

# setting() returns a dataclasses.Field, as field() does: not a value shared by every instance.

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar, get_type_hints

from gateway.kafka import FORCED as FORCED_KAFKA_CONFIG
from gateway.kafka import reordering
from gateway.translate import endpoints, names
from gateway.translate.records import MAX_GRPC_MESSAGE

ENV_PREFIX = "PUBSUB_GATEWAY_"
MIN_PULL_RESPONSE_BYTES = 1024 * 1024
MAX_RUN_AHEAD = 10.0  # --stream-run-ahead: what a client may be sent past its own flow control
MAX_WORKERS = 64  # processes of one `serve --workers N`: more than any machine here has cores
# Kafka options whose values are masked in logs: passwords, keys, and whole JAAS or OAuth configs.
_SECRET_WORDS = ("password", "secret", "token", "key", "jaas", "oauthbearer.config", "credential")

T = TypeVar("T")


class SettingsError(ValueError):
    """A setting is missing or out of range; the message names it."""


def flag_of(name: str) -> str:
    """The command-line flag of the setting `name`: `kafka_port` is `--kafka-port`."""
    return "--" + name.replace("_", "-")


def variable_of(name: str) -> str:
    """The environment variable of the setting `name`: `kafka_port` is PUBSUB_GATEWAY_KAFKA_PORT."""
    return ENV_PREFIX + name.upper()


@dataclasses.dataclass(frozen=True, slots=True)
class _Declared:
    """What a field's declaration says of its flag besides what its name and type say."""

    help: str | None = None
    metavar: str | None = None
    # The value argparse gives (a string, or what the flag's type made of one) to the field's;
    # without it, the field's type says (_BY_TYPE).
    convert: Callable[[Any], Any] | None = None
    # A repeatable flag: how its variable splits into entries.
    split_env: Callable[[str], list[str]] | None = None
    # A repeatable flag: its entries from other variables than its own (before its own's).
    other_env: Callable[[Mapping[str, str]], list[str]] | None = None


_DECLARED = "pubsub_gateway.setting"  # the key of a _Declared in a field's metadata


def setting(
    default: T,
    help: str | None = None,
    *,
    metavar: str | None = None,
    convert: Callable[[Any], T] | None = None,
) -> T:
    """A field of Settings: its default, and its flag's help (a field given a bare default is a
    flag without help)."""
    return dataclasses.field(default=default, metadata={_DECLARED: _Declared(help, metavar, convert)})


def repeatable_setting(
    help: str,
    *,
    metavar: str,
    split_env: Callable[[str], list[str]],
    convert: Callable[[list[str]], Any] = list,
    empty: Callable[[], Any] = dict,
    other_env: Callable[[Mapping[str, str]], list[str]] | None = None,
) -> Any:
    """A field of Settings given by a flag repeated once per entry, `empty()` by default.
    `convert` makes the field's value of the entries (kafka_config's stay a list until
    from_namespace merges them with its file); `other_env` finds entries in other variables."""
    declared = _Declared(help, metavar, convert=convert, split_env=split_env, other_env=other_env)
    return dataclasses.field(default_factory=empty, metadata={_DECLARED: declared})


def _rest_port(value: object) -> int | None:
    """`shared` (or nothing) is None; otherwise a port number, checked by validate()."""
    if value is None or isinstance(value, int):
        return value
    text = str(value).strip().lower()
    if text in ("", "shared"):
        return None
    try:
        return int(text)
    except ValueError:
        raise SettingsError(f"--rest-port must be a port number or shared, got {str(value)[:40]!r}") from None


def _switch(value: object) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "on", "yes", "1"):
        return True
    if text in ("false", "off", "no", "0", ""):
        return False
    raise SettingsError(f"expected true or false, got {value!r}")


def _oidc_issuers(entries: Sequence[str]) -> dict[str, str]:
    """ISSUER=AUDIENCE[|AUDIENCE...] entries: issuer -> its audiences (|-separated)."""
    out: dict[str, str] = {}
    for entry in entries:
        issuer, sep, audiences = entry.strip().partition("=")
        issuer = issuer.strip().rstrip("/")
        if not sep or not issuer or not audiences.strip():
            raise SettingsError(f"--auth-oidc wants ISSUER=AUDIENCE, got {entry!r}")
        out[issuer] = audiences.strip()
    return out


def _at_least(low: float, flag: str, value: object, kind: Callable[[str], Any] = int) -> Any:
    """A number no lower than `low` (a setting's convert= that checks its range itself)."""
    try:
        number = kind(str(value).strip())
    except ValueError:
        raise SettingsError(f"{flag} must be a number, got {str(value)[:40]!r}") from None
    if number < low:
        raise SettingsError(f"{flag} must be at least {low:g}, got {number}")
    return number


def _choice(flag: str, choices: tuple[str, ...], value: object) -> str:
    text = str(value).strip().lower()
    if text not in choices:
        raise SettingsError(
            f"{flag} must be {', '.join(choices[:-1])} or {choices[-1]}, got {str(value)[:40]!r}"
        )
    return text


def _log_format(value: object) -> str:
    return _choice("--log-format", ("text", "json"), value)


_DESTINATIONS_ERROR = "--push-destinations must be any or public, got {!r}"


def _push_destinations(value: object) -> endpoints.Policy:
    try:
        return endpoints.policy(str(value).strip().lower())
    except ValueError:
        raise SettingsError(_DESTINATIONS_ERROR.format(value)) from None


def _grpc_push_tls(value: object) -> str:
    """off, system, or the path of a PEM file of CA certificates (made absolute)."""
    text = str(value).strip()
    if text.lower() in ("off", "system"):
        return text.lower()
    path = Path(text).expanduser()
    if not text or not path.is_file():
        raise SettingsError(
            f"--grpc-push-tls {value!r}: expected off, system, or the path of a PEM file of the "
            "CA certificates that gRPC push endpoints are verified against"
        )
    return str(path.resolve())


def split_env_kafka_config(raw: str) -> list[str]:
    """The entries of PUBSUB_GATEWAY_KAFKA_CONFIG: separated by newlines when the value holds
    one (so values may contain commas), otherwise by commas. Blank lines and lines starting
    with `#` are skipped in the newline form."""
    if "\n" in raw:
        lines = (line.strip() for line in raw.splitlines())
        return [line for line in lines if line and not line.startswith("#")]
    return [item for item in raw.split(",") if item.strip()]


def split_env_bootstrap(raw: str) -> list[str]:
    """The entries of PUBSUB_GATEWAY_BOOTSTRAP: one project's each, separated by `;` or newlines."""
    return [item.strip() for item in re.split(r"[;\n]", raw) if item.strip()]


_COMMUNITY_VARIABLE = re.compile(r"PUBSUB_PROJECT([1-9][0-9]*)")


def community_bootstrap(env: Mapping[str, str]) -> list[str]:
    """PUBSUB_PROJECT1, PUBSUB_PROJECT2, ...: the short form as community Pub/Sub emulator
    images read it (one project each), in the order of their numbers; a gap stops nothing."""
    found = [(int(m.group(1)), value) for k, value in env.items() if (m := _COMMUNITY_VARIABLE.fullmatch(k))]
    return [value.strip() for _, value in sorted(found) if value.strip()]


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    host: str = setting("127.0.0.1", "address to listen on (default 127.0.0.1)")
    port: int = setting(
        8085, "the API's port (default 8085; 0 picks one): gRPC, and REST too unless --rest-port moves it"
    )
    # None: REST shares --port with gRPC, as Google's emulator does (docs/connections.md).
    rest_port: int | None = setting(
        None,
        "shared (the default): REST/JSON on --port beside gRPC, told apart by each connection's "
        "first bytes; a port number: REST there alone, and --port serves gRPC alone (0 picks one)",
        convert=_rest_port,
    )
    kafka_bootstrap: str | None = setting(
        None, "HOST:PORT of an existing Kafka cluster; without it an embedded local broker runs"
    )
    # More than one: gateway/workers.py supervises that many processes on the same port(s).
    workers: int = setting(
        1,
        "gateway processes serving --port (and --rest-port) together, the kernel spreading "
        f"connections among them (SO_REUSEPORT; Linux); 1..{MAX_WORKERS}. 1 (the default): this "
        "process serves alone. More: this process supervises them, restarts one that dies, "
        "and stops them all on SIGTERM (docs/architecture.md, Workers)",
    )
    worker_ports_from: int = setting(
        0,
        "with --workers N: worker i's own port (gRPC and REST, its /metrics; where the others "
        "forward acks to it) is this + i - 1; 0 (the default): one the system picks at each start",
    )
    worker_max_restarts: int = setting(
        5,
        "with --workers above 1: restarts of dead workers allowed within 5 minutes; one more "
        "death stops them all and exits with status 4 (default 5; 0 exits at the first)",
    )
    kafka_config: Mapping[str, str] = repeatable_setting(
        "extra librdkafka option for every client (repeatable), e.g. security.protocol=SSL; "
        "the variable separates entries by commas, or by newlines when it holds one",
        metavar="KEY=VALUE",
        split_env=split_env_kafka_config,
    )
    # Its entries are in kafka_config; kept for the record.
    kafka_config_file: Path | None = setting(
        None,
        "librdkafka options in a Java properties file (Kafka's client.properties form); "
        "--kafka-config entries win over it",
        metavar="FILE",
    )
    kafka_data_dir: Path | None = setting(None, "embedded broker data")
    kafka_port: int = setting(0, "embedded broker port (0 = free)")
    kafka_heap_mb: int = setting(384, "embedded broker heap")
    kafka_max_restarts: int = setting(
        3,
        "restarts of a dead embedded broker allowed within 5 minutes; one more death and the "
        "gateway exits with status 3 (default 3; 0 exits at the first)",
    )
    internal_prefix: str = setting("__pubsub_gateway", "prefix of the gateway's own topics")
    default_partitions: int = setting(
        4, "partitions of a topic's Kafka topic when its labels ask for none (default 4)"
    )
    # Resource limits (docs/limits.md). Every subscription gets a lease/ack log with as many
    # partitions as its topic: a topic of N partitions with S subscriptions costs N * (1 + S).
    max_partitions_per_topic: int = setting(
        64,
        "most partitions of a topic (label kafka-partitions, or an adopted Kafka topic); each "
        "subscription's lease/ack log gets as many (default 64)",
    )
    max_topics_per_project: int = setting(  # Google's limits
        10_000, "topics per project; more answer RESOURCE_EXHAUSTED (default 10,000, as Google's)"
    )
    max_subscriptions_per_project: int = setting(
        10_000, "subscriptions per project; more answer RESOURCE_EXHAUSTED (default 10,000)"
    )
    max_snapshots_per_project: int = setting(
        5_000, "snapshots per project; more answer RESOURCE_EXHAUSTED (default 5,000)"
    )
    max_schemas_per_project: int = setting(
        10_000, "schemas per project; more answer RESOURCE_EXHAUSTED (default 10,000, as Google's)"
    )
    # Resources declared at start, created or updated before the gateway is ready (docs/bootstrap.md).
    bootstrap_file: Path | None = setting(
        None,
        "YAML (or JSON) file of projects, schemas, topics and subscriptions, in the API's own field "
        "names, applied at start before the gateway is ready: created, or updated to match; deleted "
        "only where an entry says `delete: true`; a bad entry stops the start naming its line",
        metavar="FILE",
    )
    bootstrap: tuple[str, ...] = repeatable_setting(
        "topics and pull subscriptions to create at start, one project each (repeatable): "
        "PROJECT,TOPIC[:SUBSCRIPTION...][,TOPIC...]; the variable separates projects by ; or "
        "newlines, and PUBSUB_PROJECT1, PUBSUB_PROJECT2, ... are read too, as community emulator "
        "images read them",
        metavar="PROJECT,TOPIC:SUB",
        split_env=split_env_bootstrap,
        convert=tuple,
        empty=tuple,
        other_env=community_bootstrap,
    )
    replication_factor: int = setting(
        -1, "replication factor of the Kafka topics the gateway makes (default -1: the broker's default)"
    )
    pull_max_wait_seconds: float = setting(
        5.0, "how long a Pull waits for messages before it answers with none (default 5)"
    )
    # Longer than a dead group coordinator takes to move (the broker's session, 9 s, and an
    # election): a shorter one costs every member its partitions when a coordinator dies.
    session_timeout_ms: int = setting(
        20_000,
        "consumer-group session of each subscription's member (default 20,000): how long a "
        "crashed process holds its partitions, and how long a dead group coordinator may "
        "take to move before members lose theirs",
    )
    idle_subscription_seconds: float = setting(
        300.0, "a subscription nobody pulled from for this long leaves its consumer group here (default 300)"
    )
    checkpoint_interval_seconds: float = setting(
        1.0, "how often each partition's lease/ack state is checkpointed and its offset committed (default 1)"
    )
    shutdown_grace_seconds: float = setting(
        5.0, "on SIGTERM, how long pushes and calls in flight may finish (default 5)"
    )
    shutdown_timeout_seconds: float = setting(
        25.0,
        "longest a shutdown may take (SIGTERM or SIGINT): past it the gateway prints what is "
        "still running and exits with status 6, as a kill would end it; nothing acknowledged is "
        "lost (default 25, under Kubernetes' 30 s grace period; 0 waits for ever)",
    )
    expiration_check_seconds: float = setting(
        60.0, "how often the elected process looks for expired subscriptions"
    )
    legacy_project: str = setting(
        "legacy",
        "project of the seed's early API (tech.pubsub): its names without `projects/` are "
        "topics and subscriptions of this project (docs/legacy-api.md; default legacy)",
    )
    min_expiration_ttl_seconds: int = setting(
        86_400, "smallest expiration_policy.ttl accepted (the API's is 1 day; lower it only for tests)"
    )
    advertise_address: str = setting(
        "", "HOST:PORT where other gateway processes reach this one (default: --host:--port)"
    )
    stream_max_seconds: float = setting(
        1800.0, "StreamingPull streams are ended with UNAVAILABLE after this long; clients reconnect"
    )
    stream_run_ahead: float = setting(
        1.0,
        "let a StreamingPull stream hold up to this many times the max_outstanding_messages and "
        "_bytes its client asked for (default 1: the API's rule, no more than asked). The Go "
        "client sends its acks every 100 ms, so with its default 1,000 outstanding messages a "
        "stream passes at most ~10k msg/s. The clients' own flow control holds the surplus "
        "back; Go and Python keep its leases alive (docs/delivery.md)",
    )
    # gRPC's default limit on a received message: what the official clients keep when they are
    # pointed at an emulator (PUBSUB_EMULATOR_HOST makes them open a plain channel).
    pull_response_max_bytes: int = setting(
        4 * 1024 * 1024,
        "each Pull and StreamingPull response stays under this size, but holds one message at "
        "least (default 4 MiB: gRPC's own limit, which the official clients keep against an "
        "emulator host; up to 20 MiB for clients that accept more)",
    )
    push_max_outstanding: int = setting(
        1000, "largest push window: pushes outstanding per subscription and process (default 1000)"
    )
    push_max_connections: int = setting(
        50,
        "HTTP connections to push endpoints, all subscriptions together, and the most requests "
        "one subscription has in flight (default 50)",
    )
    push_auth_issuer: str = setting(
        "", "`iss` of push tokens and base URL of their key set (default http://HOST:REST-PORT)"
    )
    push_auth_key_file: Path | None = setting(
        None, "PEM RSA private key that signs push tokens (default: keys kept in Kafka, rotated)"
    )
    push_auth_key_rotation_hours: float = setting(
        24.0, "how often the push token signing key kept in Kafka is rotated (default 24)"
    )
    # Where pushes may go besides the addresses refused always (link-local, metadata, ...):
    # "any" or "public" (no loopback, private or other non-global addresses). docs/push.md
    push_destinations: endpoints.Policy = setting(
        endpoints.DEFAULT_POLICY,
        "where push endpoints may be: any (the default) or public (not loopback, private or "
        "other non-global addresses, checked after DNS resolution). Link-local addresses, "
        "the cloud metadata address among them, are refused always",
        convert=_push_destinations,
    )
    # The seed API's gRPC push (docs/push.md, "gRPC push"): plaintext, as its host:port endpoints
    # imply, or TLS verified against the system's CAs or a CA file of one's own.
    grpc_push_tls: str = setting(
        "off",
        "gRPC push of the early API over TLS: off (plaintext, the default), system (verified "
        "against the CAs Python's ssl trusts here: SSL_CERT_FILE, else the system's bundle), or "
        "a PEM file of the CA certificates to verify endpoints against",
        metavar="off|system|FILE",
        convert=_grpc_push_tls,
    )
    # Connection limits and timeouts (docs/connections.md).
    http_max_connections: int = setting(
        1000, "open connections of the REST port; one past it is answered 503 and closed (default 1000)"
    )
    http_header_timeout_seconds: float = setting(
        10.0, "a request's line and headers must arrive within this long of its first byte (default 10)"
    )
    http_body_timeout_seconds: float = setting(
        60.0, "a request's body must arrive within this long of its headers, or 408 (default 60)"
    )
    http_idle_timeout_seconds: float = setting(
        60.0, "a REST connection without a request for this long is closed (default 60)"
    )
    grpc_max_connections: int = setting(
        1000, "open connections of the gRPC port; more are closed at once (default 1000)"
    )
    grpc_max_concurrent_rpcs: int = setting(
        10_000, "calls in progress, streams included; more fail with RESOURCE_EXHAUSTED (default 10000)"
    )
    grpc_max_streams_per_connection: int = setting(
        1000, "HTTP/2 MAX_CONCURRENT_STREAMS of each gRPC connection (default 1000)"
    )
    grpc_handshake_timeout_seconds: float = setting(
        10.0, "a gRPC connection must open HTTP/2 within this long, or it is closed (default 10)"
    )
    grpc_idle_timeout_seconds: float = setting(
        300.0, "a gRPC connection without calls for this long is closed with GOAWAY (default 300)"
    )
    grpc_max_connection_age_seconds: float = setting(
        3600.0,
        "gRPC connections older than this get GOAWAY; their calls run to their end (default 3600; "
        "0: no limit)",
    )
    # The shared port only: the time and room a connection gets before it says which protocol.
    first_bytes_timeout_seconds: float = setting(
        10.0,
        "on the shared port, a connection must send its first bytes (which tell gRPC from REST) "
        "within this long, or it is closed (default 10)",
    )
    max_pending_connections: int = setting(
        1000,
        "on the shared port, connections that have not yet sent their first bytes; one more "
        "closes the oldest of them (default 1000)",
    )
    # Observability (docs/metrics.md, docs/health.md).
    metrics_max_subscriptions: int = setting(
        1000,
        "subscriptions whose metrics carry their name; later ones are summed under "
        'subscription="_other" (default 1000)',
        convert=lambda value: _at_least(1, "--metrics-max-subscriptions", value),
    )
    metrics_max_topics: int = setting(
        1000,
        'topics whose metrics carry their name; later ones are summed under topic="_other" (default 1000)',
        convert=lambda value: _at_least(1, "--metrics-max-topics", value),
    )
    metrics_open: bool = setting(
        False,
        "true: /metrics answers without a credential even when callers must authenticate "
        "(health endpoints always do)",
        convert=_switch,
    )
    kafka_statistics_seconds: float = setting(
        15.0,
        "how often the producer's librdkafka statistics (broker state, latency, queue) are "
        "taken for /metrics (default 15; 0: never)",
        convert=lambda value: _at_least(0, "--kafka-statistics-seconds", value, float),
    )
    tracing: str = setting(
        "off",
        "off (the default), otlp (OpenTelemetry spans of publish and delivery, exported where the "
        "OTEL_EXPORTER_OTLP_* variables say; needs the tracing extra) or log (spans as log lines)",
        convert=lambda value: _choice("--tracing", ("off", "otlp", "log"), value),
    )
    log_format: str = setting(
        "text",
        "text (the default) or json: one JSON object per line (time, level, logger, message, exception)",
        convert=_log_format,
    )
    # Security (docs/security.md). Authentication is on when any auth_* setting is.
    tls_cert_file: Path | None = setting(
        None,
        "PEM certificate chain: both wires (and the peer hop) speak TLS; reloaded when it changes",
        metavar="FILE",
    )
    tls_key_file: Path | None = setting(None, "PEM private key of --tls-cert-file", metavar="FILE")
    tls_client_ca_file: Path | None = setting(
        None, "PEM CA certificates that client certificates must chain to", metavar="FILE"
    )
    tls_client_auth: str = setting(
        "none",
        "none (the default), optional or require: whether clients are asked for a certificate "
        "(verified against --tls-client-ca-file). grpcio can only require one or not ask: "
        "optional asks REST clients only",
        convert=lambda value: str(value).strip().lower(),
    )
    tls_peer_ca_file: Path | None = setting(
        None,
        "PEM CA certificates that other gateway processes' certificates chain to, for the hop "
        "that forwards acks (default: --tls-client-ca-file, else the system's roots)",
        metavar="FILE",
    )
    auth_token_file: Path | None = setting(
        None,
        "static bearer tokens, one `TOKEN MEMBER` per line (e.g. `s3cret user:ci@example.com`); "
        "re-read when it changes",
        metavar="FILE",
    )
    auth_oidc: Mapping[str, str] = repeatable_setting(  # issuer -> audiences, |-separated
        "an OIDC issuer whose ID tokens are accepted (repeatable): ISSUER=AUDIENCE, the audience "
        "the tokens must carry (several separated by |)",
        metavar="ISSUER=AUDIENCE",
        split_env=lambda raw: [item for item in raw.split(",") if item.strip()],
        convert=_oidc_issuers,
    )
    auth_mtls: bool = setting(
        False,
        "true: a verified client certificate authenticates its caller (needs --tls-client-auth)",
        convert=_switch,
    )
    iam_policy_file: Path | None = setting(
        None,
        'project-level IAM bindings, JSON: {"projects/ID" or "projects/*": {"bindings": '
        '[{"role": ..., "members": [...]}]}}',
        metavar="FILE",
    )
    event_loop: str = setting(
        "auto", "auto (uvloop where installed, the default), uvloop, or asyncio (the standard loop)"
    )
    log_level: str = setting(
        "INFO", "DEBUG, INFO (the default), WARNING or ERROR", convert=lambda value: str(value).upper()
    )

    def validate(self) -> Settings:
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"--port must be 0..65535, got {self.port}")
        if self.rest_port is not None and not 0 <= self.rest_port <= 65535:
            raise SettingsError(f"--rest-port must be 0..65535 or shared, got {self.rest_port}")
        self._validate_workers()
        if not 0 <= self.kafka_port <= 65535:
            raise SettingsError(f"--kafka-port must be 0..65535, got {self.kafka_port}")
        if self.default_partitions < 1:
            raise SettingsError("--default-partitions must be at least 1")
        self._validate_limits()
        if self.replication_factor == 0 or self.replication_factor < -1:
            raise SettingsError("--replication-factor must be -1 (broker default) or >= 1")
        if not 0 < self.pull_max_wait_seconds <= 60:
            raise SettingsError("--pull-max-wait-seconds must be in (0, 60]")
        if self.session_timeout_ms < 1000:
            raise SettingsError("--session-timeout-ms must be at least 1000")
        if not 0.05 <= self.checkpoint_interval_seconds <= 60:
            raise SettingsError("--checkpoint-interval-seconds must be in [0.05, 60]")
        if self.idle_subscription_seconds < 1:
            raise SettingsError("--idle-subscription-seconds must be at least 1")
        if self.shutdown_grace_seconds < 0:
            raise SettingsError("--shutdown-grace-seconds must not be negative")
        bound = self.shutdown_timeout_seconds
        if bound < 0 or 0 < bound < 2 * self.shutdown_grace_seconds:
            raise SettingsError(
                "--shutdown-timeout-seconds must be 0 (no bound) or at least twice "
                "--shutdown-grace-seconds (REST and gRPC each get that grace)"
            )
        if self.expiration_check_seconds <= 0 or self.min_expiration_ttl_seconds < 1:
            raise SettingsError(
                "--expiration-check-seconds and --min-expiration-ttl-seconds must be positive"
            )
        if self.stream_max_seconds < 1:
            raise SettingsError("--stream-max-seconds must be at least 1")
        if not 1 <= self.stream_run_ahead <= MAX_RUN_AHEAD:
            raise SettingsError(f"--stream-run-ahead must be 1..{MAX_RUN_AHEAD:g}")
        if not MIN_PULL_RESPONSE_BYTES <= self.pull_response_max_bytes <= MAX_GRPC_MESSAGE:
            raise SettingsError(
                f"--pull-response-max-bytes must be {MIN_PULL_RESPONSE_BYTES:,}.."
                f"{MAX_GRPC_MESSAGE:,} (the gateway's gRPC message limit)"
            )
        for key in FORCED_KAFKA_CONFIG:
            if key in self.kafka_config:
                raise SettingsError(
                    f"--kafka-config {key} cannot be set: the gateway creates every "
                    "topic explicitly, and never lets a client create one"
                )
        if why := reordering(self.kafka_config):
            raise SettingsError(f"--kafka-config: {why}")
        if self.kafka_heap_mb < 128:
            raise SettingsError("--kafka-heap-mb must be at least 128")
        if not 0 <= self.kafka_max_restarts <= 100:
            raise SettingsError("--kafka-max-restarts must be 0..100")
        if not names.valid_project(self.legacy_project):
            raise SettingsError(
                "--legacy-project must be a project id: letters, digits, '-', '_', '.', ':', "
                "starting with a letter or digit, at most 100 characters"
            )
        prefix = self.internal_prefix
        legal = all(c.isascii() and (c.isalnum() or c in "._-") for c in prefix)
        if not prefix or not legal or prefix.endswith("_"):
            raise SettingsError(
                "--internal-prefix may hold only letters, digits, '.', '_', '-' and must not end in '_'"
            )
        self._validate_push()
        self._validate_connections()
        if self.event_loop not in {"auto", "uvloop", "asyncio"}:
            raise SettingsError("--event-loop must be auto, uvloop or asyncio")
        if self.log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise SettingsError("--log-level must be DEBUG, INFO, WARNING or ERROR")
        return self

    def _validate_workers(self) -> None:
        if not 1 <= self.workers <= MAX_WORKERS:
            raise SettingsError(f"--workers must be 1..{MAX_WORKERS}, got {self.workers}")
        if not 0 <= self.worker_max_restarts <= 100:
            raise SettingsError(f"--worker-max-restarts must be 0..100, got {self.worker_max_restarts}")
        last = self.worker_ports_from + self.workers - 1
        if self.worker_ports_from and not 1 <= self.worker_ports_from <= last <= 65535:
            raise SettingsError(
                f"--worker-ports-from {self.worker_ports_from}: ports up to {last} must be 1..65535"
            )
        if self.worker_ports_from and self.workers == 1:
            raise SettingsError(
                "--worker-ports-from applies with --workers above 1: one process has no worker ports"
            )
        if self.workers > 1 and not sys.platform.startswith("linux"):
            # Elsewhere SO_REUSEPORT does not spread connections: the last process bound gets all.
            raise SettingsError(
                f"--workers {self.workers} needs Linux (SO_REUSEPORT spreading connections); "
                f"run one process per core instead on {sys.platform}"
            )

    def _validate_limits(self) -> None:
        for flag, value in (
            ("--max-partitions-per-topic", self.max_partitions_per_topic),
            ("--max-topics-per-project", self.max_topics_per_project),
            ("--max-subscriptions-per-project", self.max_subscriptions_per_project),
            ("--max-snapshots-per-project", self.max_snapshots_per_project),
            ("--max-schemas-per-project", self.max_schemas_per_project),
        ):
            if value < 1:
                raise SettingsError(f"{flag} must be at least 1, got {value}")
        if self.default_partitions > self.max_partitions_per_topic:
            raise SettingsError(
                f"--default-partitions ({self.default_partitions}) must not exceed "
                f"--max-partitions-per-topic ({self.max_partitions_per_topic})"
            )

    def _validate_push(self) -> None:
        if self.push_max_outstanding < 1:
            raise SettingsError("--push-max-outstanding must be at least 1")
        if self.push_max_connections < 1:
            raise SettingsError("--push-max-connections must be at least 1")
        if self.push_auth_issuer and not self.push_auth_issuer.startswith(("http://", "https://")):
            raise SettingsError("--push-auth-issuer must be an http(s) URL")
        if self.push_auth_key_rotation_hours < 1:
            raise SettingsError("--push-auth-key-rotation-hours must be at least 1")
        if self.push_destinations not in endpoints.POLICIES:
            raise SettingsError(_DESTINATIONS_ERROR.format(self.push_destinations))

    def _validate_connections(self) -> None:
        for name in (
            "http_max_connections",
            "grpc_max_connections",
            "grpc_max_concurrent_rpcs",
            "grpc_max_streams_per_connection",
        ):
            if not 1 <= getattr(self, name) <= 1_000_000:
                raise SettingsError(f"{flag_of(name)} must be 1..1000000")
        for name in (
            "http_header_timeout_seconds",
            "http_body_timeout_seconds",
            "http_idle_timeout_seconds",
            "grpc_handshake_timeout_seconds",
            "grpc_idle_timeout_seconds",
        ):
            if not 0.1 <= getattr(self, name) <= 86_400:
                raise SettingsError(f"{flag_of(name)} must be in [0.1, 86400]")
        if not 1 <= self.max_pending_connections <= 1_000_000:
            raise SettingsError("--max-pending-connections must be 1..1000000")
        if not 0.1 <= self.first_bytes_timeout_seconds <= 86_400:
            raise SettingsError("--first-bytes-timeout-seconds must be in [0.1, 86400]")
        if not self.shares_port:
            # Accepted and ignored would be a lie: they bound a port this gateway does not have.
            for name in ("first_bytes_timeout_seconds", "max_pending_connections"):
                if getattr(self, name) != _FIELD_DEFAULTS[name]:
                    raise SettingsError(
                        f"{flag_of(name)} applies to a port shared by gRPC and REST; with "
                        f"--rest-port {self.rest_port}, REST has its own port and --port serves "
                        "gRPC alone"
                    )
        self._validate_security()
        age = self.grpc_max_connection_age_seconds
        if age != 0 and not 1 <= age <= 30 * 86_400:
            raise SettingsError("--grpc-max-connection-age-seconds must be 0 (no limit) or in [1, 2592000]")

    def _validate_security(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise SettingsError("--tls-cert-file and --tls-key-file go together")
        if self.tls_client_auth not in ("none", "optional", "require"):
            raise SettingsError(
                f"--tls-client-auth must be none, optional or require, got {self.tls_client_auth!r}"
            )
        if self.tls_client_auth != "none" and (self.tls_cert_file is None or self.tls_client_ca_file is None):
            raise SettingsError(
                f"--tls-client-auth {self.tls_client_auth} needs --tls-cert-file and --tls-client-ca-file"
            )
        if self.tls_client_ca_file is not None and self.tls_client_auth == "none":
            raise SettingsError(
                "--tls-client-ca-file is used only with --tls-client-auth optional or require"
            )
        if self.tls_peer_ca_file is not None and self.tls_cert_file is None:
            raise SettingsError("--tls-peer-ca-file applies only with --tls-cert-file")
        if self.auth_mtls and self.tls_client_auth == "none":
            raise SettingsError("--auth-mtls needs --tls-client-auth optional or require")
        for issuer in self.auth_oidc:
            if not issuer.startswith(("https://", "http://127.0.0.1", "http://localhost", "http://[::1]")):
                raise SettingsError(
                    f"--auth-oidc issuer must be an https URL (http only on loopback): {issuer!r}"
                )

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None

    @property
    def authenticates(self) -> bool:
        """Callers must prove who they are, and IAM policies are enforced."""
        return self.auth_token_file is not None or bool(self.auth_oidc) or self.auth_mtls

    @property
    def shares_port(self) -> bool:
        """gRPC and REST on one port (--port): --rest-port is `shared`, or the same nonzero port."""
        return self.rest_port is None or (self.rest_port == self.port and self.port != 0)

    @property
    def grpc_connection_age_grace_seconds(self) -> float:
        """How long a connection past its maximum age keeps its running calls: longer than any
        call may last (a StreamingPull ends at --stream-max-seconds, a Pull waits at most
        --pull-max-wait-seconds), so the age limit never cuts one; clients open new calls on
        a new connection."""
        return self.stream_max_seconds + self.pull_max_wait_seconds + 30.0

    def masked(self) -> dict[str, object]:
        """The settings as a dict fit for a log line: secret Kafka options are masked."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["kafka_config"] = {
            k: ("***" if any(w in k.lower() for w in _SECRET_WORDS) else v)
            for k, v in self.kafka_config.items()
        }
        return out


_FIELD_DEFAULTS: Final = {f.name: f.default for f in dataclasses.fields(Settings)}


def _parse_kafka_config(items: Sequence[str]) -> dict[str, str]:
    config: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"--kafka-config wants KEY=VALUE, got {_masked_item(item)!r}")
        config[key.strip()] = value.strip()
    return config


def _masked_item(item: str) -> str:
    """A malformed entry as an error may show it: without its value if it names a secret."""
    if not any(w in item.lower() for w in _SECRET_WORDS):
        return item
    key = re.split(r"[=:\s]", item.strip(), maxsplit=1)[0]
    return f"{key}***"


_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """A Java properties file, as Kafka's own `client.properties`: `key=value`, `key: value` or
    `key value` per line, `#` and `!` comments, backslash escapes (`\\=`, `\\:`, `\\ `,
    `\\t`, `\\uXXXX`, ...), and a trailing backslash continuing a line."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not logical else raw.lstrip(" \t\f")
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd number of backslashes: the line goes on
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        out[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        out[key] = value
    return out


def _split_property(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):  # the key ended at whitespace, an `=` or a `:`: one of the latter two
        rest = rest[1:].lstrip(" \t\f")
    return _unescape_property(key), _unescape_property(rest)


def _unescape_property(text: str) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise SettingsError(f"malformed \\uXXXX escape in the properties line {text[:40]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_PROPERTY_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def read_kafka_config_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"--kafka-config-file {path}: cannot read it ({exc})") from None
    config = parse_properties(text)
    for key in config:
        if not key.strip():
            raise SettingsError(f"--kafka-config-file {path}: an entry has no key")
    return config


def _kafka_settings(
    bootstrap: str | None, config_file: Path | None, items: Sequence[str]
) -> tuple[str | None, dict[str, str]]:
    """The bootstrap servers and the librdkafka options: the file's entries, then the flags'
    (and the variable's), later ones winning. `bootstrap.servers` among them is the bootstrap,
    as in Kafka's client.properties; given twice with different values, it is refused."""
    config = read_kafka_config_file(config_file) if config_file else {}
    config.update(_parse_kafka_config(items))
    from_config = config.pop("bootstrap.servers", None)
    if from_config is not None and bootstrap and from_config != bootstrap:
        raise SettingsError(
            f"--kafka-bootstrap {bootstrap} and bootstrap.servers={from_config} "
            "(--kafka-config or --kafka-config-file) differ: give one"
        )
    return bootstrap or from_config or None, config


@dataclasses.dataclass(frozen=True, slots=True)
class Option:
    """A setting as the command line and the environment give it, all of it derived from its
    field in Settings."""

    name: str  # the field's
    flag: str  # --kafka-port
    variable: str  # PUBSUB_GATEWAY_KAFKA_PORT
    default: object  # the field's; dataclasses.MISSING for a repeatable flag (its entries start empty)
    help: str | None
    metavar: str | None
    # What argparse makes of a string, the flag's or the variable's (argparse's `type`).
    type: Callable[[str], Any] | None
    # What argparse gave to the field's value.
    convert: Callable[[Any], Any]
    # A repeatable flag: how its variable splits into entries.
    split_env: Callable[[str], list[str]] | None
    # A repeatable flag: its entries from other variables than its own.
    other_env: Callable[[Mapping[str, str]], list[str]] | None = None


def _plain(kind: Callable[[Any], T]) -> Callable[[Any], T]:
    return lambda value: kind("" if value is None else value)


def _optional_path(value: object) -> Path | None:
    return Path(str(value)) if value else None


def _optional_str(value: object) -> str | None:
    return str(value) if value else None


# A declared type: argparse's `type` for the flag, and the field's value from what argparse gave.
_BY_TYPE: dict[object, tuple[Callable[[str], Any] | None, Callable[[Any], Any]]] = {
    int: (int, _plain(int)),
    float: (float, _plain(float)),
    str: (None, _plain(str)),
    str | None: (None, _optional_str),
    Path | None: (Path, _optional_path),
}


def options_of(settings_class: type[Any]) -> tuple[Option, ...]:
    """The options of a settings dataclass (Settings), one per field, in their order. A field of
    a type _BY_TYPE does not know, declared without a convert function, is refused."""
    hints = get_type_hints(settings_class)
    options = []
    for field in dataclasses.fields(settings_class):
        declared = field.metadata.get(_DECLARED, _Declared())
        arg_type, by_type = _BY_TYPE.get(hints[field.name], (None, None))
        convert = declared.convert or by_type
        if convert is None:
            raise TypeError(
                f"{settings_class.__name__}.{field.name}: no flag reads a {hints[field.name]}; "
                "declare it with setting(..., convert=...)"
            )
        options.append(
            Option(
                name=field.name,
                flag=flag_of(field.name),
                variable=variable_of(field.name),
                default=field.default,
                help=declared.help,
                metavar=declared.metavar,
                type=arg_type,
                convert=convert,
                split_env=declared.split_env,
                other_env=declared.other_env,
            )
        )
    return tuple(options)


OPTIONS: Final = options_of(Settings)


def add_arguments(parser: argparse.ArgumentParser, env: Mapping[str, str] | None = None) -> None:
    """Add one flag per setting to `parser`, each defaulting to its environment variable."""
    env = os.environ if env is None else env
    for option in OPTIONS:
        value = env.get(option.variable)
        if option.split_env is not None:
            entries = option.other_env(env) if option.other_env is not None else []
            entries += option.split_env(value or "")
            parser.add_argument(
                option.flag, action="append", default=entries, metavar=option.metavar, help=_help(option)
            )
        else:
            # A string default (the variable's) goes through `type` as the flag's value would.
            typed: dict[str, Any] = {} if option.type is None else {"type": option.type}
            parser.add_argument(
                option.flag,
                **typed,
                default=option.default if value is None else value,
                metavar=option.metavar,
                help=_help(option),
            )


def _help(option: Option) -> str:
    """A flag's help, naming its environment variable (and its default, unless it says it)."""
    text = option.help or ""
    shown = shown_default(option.default)
    if "default" not in text and shown is not None:
        text = f"{text} (default {shown})"
    return f"{text} [{option.variable}]".strip().replace("%", "%%")


def shown_default(default: object) -> str | None:
    """A default as a user would type it (60, not 60.0; false, not False), or None when there is
    none to show: unset, empty, or a repeatable flag, whose entries start empty."""
    if default is dataclasses.MISSING or default in (None, "", [], (), {}):
        return None
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


# Resolved together and first: `bootstrap.servers` may come from --kafka-config or the file.
_KAFKA = ("kafka_bootstrap", "kafka_config", "kafka_config_file")


def from_namespace(ns: argparse.Namespace) -> Settings:
    """Build and validate Settings from parsed flags."""
    values: dict[str, Any] = {o.name: o.convert(getattr(ns, o.name)) for o in OPTIONS if o.name in _KAFKA}
    values["kafka_bootstrap"], values["kafka_config"] = _kafka_settings(
        values["kafka_bootstrap"], values["kafka_config_file"], values["kafka_config"]
    )
    for option in OPTIONS:
        if option.name not in values:
            values[option.name] = option.convert(getattr(ns, option.name))
    return Settings(**values).validate()
