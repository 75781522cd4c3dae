"""One settings object, from command-line flags and environment variables, validated at start-up.

Every flag `--some-flag` has an environment variable `PUBSUB_GATEWAY_SOME_FLAG`; a flag given on
the command line wins over the variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway.kafka import FORCED as FORCED_KAFKA_CONFIG
from gateway.push import endpoints
from gateway.translate.records import MAX_GRPC_MESSAGE

ENV_PREFIX = "PUBSUB_GATEWAY_"
MIN_PULL_RESPONSE_BYTES = 1024 * 1024
# Kafka options whose values are masked in logs: passwords, keys, and whole JAAS or OAuth configs.
_SECRET_WORDS = ("password", "secret", "token", "key", "jaas", "oauthbearer.config", "credential")


class SettingsError(ValueError):
    """A setting is missing or out of range; the message names it."""


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8085
    rest_port: int = 8086
    kafka_bootstrap: str | None = None
    kafka_config: Mapping[str, str] = dataclasses.field(default_factory=dict)
    kafka_config_file: Path | None = None  # its entries are in kafka_config; kept for the record
    kafka_data_dir: Path | None = None
    kafka_port: int = 0
    kafka_heap_mb: int = 384
    kafka_max_restarts: int = 3
    internal_prefix: str = "__pubsub_gateway"
    default_partitions: int = 4
    # Resource limits (docs/limits.md). Every subscription gets a lease/ack log with as many
    # partitions as its topic: a topic of N partitions with S subscriptions costs N * (1 + S).
    max_partitions_per_topic: int = 64
    max_topics_per_project: int = 10_000  # Google's limits
    max_subscriptions_per_project: int = 10_000
    max_snapshots_per_project: int = 5_000
    replication_factor: int = -1
    pull_max_wait_seconds: float = 5.0
    # Longer than a dead group coordinator takes to move (the broker's session, 9 s, and an
    # election): a shorter one costs every member its partitions when a coordinator dies.
    session_timeout_ms: int = 20_000
    idle_subscription_seconds: float = 300.0
    checkpoint_interval_seconds: float = 1.0
    shutdown_grace_seconds: float = 5.0
    stream_max_seconds: float = 1800.0
    # gRPC's default limit on a received message: what the official clients keep when they are
    # pointed at an emulator (PUBSUB_EMULATOR_HOST makes them open a plain channel).
    pull_response_max_bytes: int = 4 * 1024 * 1024
    advertise_address: str = ""
    expiration_check_seconds: float = 60.0
    min_expiration_ttl_seconds: int = 86_400
    push_max_outstanding: int = 1000
    push_max_connections: int = 50
    push_auth_issuer: str = ""
    push_auth_key_file: Path | None = None
    push_auth_key_rotation_hours: float = 24.0
    # Where pushes may go besides the addresses refused always (link-local, metadata, ...):
    # "any" or "public" (no loopback, private or other non-global addresses). docs/push.md
    push_destinations: endpoints.Policy = endpoints.DEFAULT_POLICY
    # Connection limits and timeouts (docs/connections.md).
    http_max_connections: int = 1000
    http_header_timeout_seconds: float = 10.0
    http_body_timeout_seconds: float = 60.0
    http_idle_timeout_seconds: float = 60.0
    grpc_max_connections: int = 1000
    grpc_max_concurrent_rpcs: int = 10_000
    grpc_max_streams_per_connection: int = 1000
    grpc_handshake_timeout_seconds: float = 10.0
    grpc_idle_timeout_seconds: float = 300.0
    grpc_max_connection_age_seconds: float = 3600.0  # 0: no limit
    event_loop: str = "auto"  # uvloop where installed, else asyncio's own
    log_level: str = "INFO"

    def validate(self) -> Settings:
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"--port must be 0..65535, got {self.port}")
        if not 0 <= self.rest_port <= 65535:
            raise SettingsError(f"--rest-port must be 0..65535, got {self.rest_port}")
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
        if self.expiration_check_seconds <= 0 or self.min_expiration_ttl_seconds < 1:
            raise SettingsError(
                "--expiration-check-seconds and --min-expiration-ttl-seconds must be positive"
            )
        if self.stream_max_seconds < 1:
            raise SettingsError("--stream-max-seconds must be at least 1")
        if not MIN_PULL_RESPONSE_BYTES <= self.pull_response_max_bytes <= MAX_GRPC_MESSAGE:
            raise SettingsError(f"--pull-response-max-bytes must be {MIN_PULL_RESPONSE_BYTES:,}.."
                                f"{MAX_GRPC_MESSAGE:,} (the gateway's gRPC message limit)")
        for key in FORCED_KAFKA_CONFIG:
            if key in self.kafka_config:
                raise SettingsError(f"--kafka-config {key} cannot be set: the gateway creates every "
                                    "topic explicitly, and never lets a client create one")
        if self.kafka_heap_mb < 128:
            raise SettingsError("--kafka-heap-mb must be at least 128")
        if not 0 <= self.kafka_max_restarts <= 100:
            raise SettingsError("--kafka-max-restarts must be 0..100")
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

    def _validate_limits(self) -> None:
        for flag, value in (("--max-partitions-per-topic", self.max_partitions_per_topic),
                            ("--max-topics-per-project", self.max_topics_per_project),
                            ("--max-subscriptions-per-project", self.max_subscriptions_per_project),
                            ("--max-snapshots-per-project", self.max_snapshots_per_project)):
            if value < 1:
                raise SettingsError(f"{flag} must be at least 1, got {value}")
        if self.default_partitions > self.max_partitions_per_topic:
            raise SettingsError(
                f"--default-partitions ({self.default_partitions}) must not exceed "
                f"--max-partitions-per-topic ({self.max_partitions_per_topic})")

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
        for name in ("http_max_connections", "grpc_max_connections", "grpc_max_concurrent_rpcs",
                     "grpc_max_streams_per_connection"):
            if not 1 <= getattr(self, name) <= 1_000_000:
                raise SettingsError(f"--{name.replace('_', '-')} must be 1..1000000")
        for name in ("http_header_timeout_seconds", "http_body_timeout_seconds",
                     "http_idle_timeout_seconds", "grpc_handshake_timeout_seconds",
                     "grpc_idle_timeout_seconds"):
            if not 0.1 <= getattr(self, name) <= 86_400:
                raise SettingsError(f"--{name.replace('_', '-')} must be in [0.1, 86400]")
        age = self.grpc_max_connection_age_seconds
        if age != 0 and not 1 <= age <= 30 * 86_400:
            raise SettingsError("--grpc-max-connection-age-seconds must be 0 (no limit) or in [1, 2592000]")

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


_DESTINATIONS_ERROR = "--push-destinations must be any or public, got {!r}"


def _push_destinations(value: object) -> endpoints.Policy:
    try:
        return endpoints.policy(str(value).strip().lower())
    except ValueError:
        raise SettingsError(_DESTINATIONS_ERROR.format(value)) from None


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


def split_env_kafka_config(raw: str) -> list[str]:
    """The entries of PUBSUB_GATEWAY_KAFKA_CONFIG: separated by newlines when the value holds
    one (so values may contain commas), otherwise by commas. Blank lines and lines starting
    with `#` are skipped in the newline form."""
    if "\n" in raw:
        lines = (line.strip() for line in raw.splitlines())
        return [line for line in lines if line and not line.startswith("#")]
    return [item for item in raw.split(",") if item.strip()]


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
            digits = text[i + 2:i + 6]
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


def _kafka_settings(bootstrap: str | None, config_file: Path | None,
                    items: Sequence[str]) -> tuple[str | None, dict[str, str]]:
    """The bootstrap servers and the librdkafka options: the file's entries, then the flags'
    (and the variable's), later ones winning. `bootstrap.servers` among them is the bootstrap,
    as in Kafka's client.properties; given twice with different values, it is refused."""
    config = read_kafka_config_file(config_file) if config_file else {}
    config.update(_parse_kafka_config(items))
    from_config = config.pop("bootstrap.servers", None)
    if from_config is not None and bootstrap and from_config != bootstrap:
        raise SettingsError(f"--kafka-bootstrap {bootstrap} and bootstrap.servers={from_config} "
                            "(--kafka-config or --kafka-config-file) differ: give one")
    return bootstrap or from_config or None, config


def add_arguments(parser: argparse.ArgumentParser, env: Mapping[str, str] | None = None) -> None:
    """Add one flag per setting to `parser`, each defaulting to its environment variable."""
    env = os.environ if env is None else env
    defaults = Settings()

    def default(name: str) -> object:
        return env.get(ENV_PREFIX + name.upper(), getattr(defaults, name))

    p = parser.add_argument
    p("--host", default=default("host"), help="address to listen on (default 127.0.0.1)")
    p("--port", type=int, default=default("port"), help="gRPC port (default 8085; 0 picks one)")
    p("--rest-port", type=int, default=default("rest_port"),
      help="REST/JSON port (default 8086; 0 picks one)")
    p(
        "--kafka-bootstrap",
        default=default("kafka_bootstrap"),
        help="HOST:PORT of an existing Kafka cluster; without it an embedded local broker runs",
    )
    env_config = split_env_kafka_config(env.get(ENV_PREFIX + "KAFKA_CONFIG", ""))
    p(
        "--kafka-config",
        action="append",
        default=env_config,
        metavar="KEY=VALUE",
        help="extra librdkafka option for every client (repeatable), e.g. security.protocol=SSL; "
             "the variable separates entries by commas, or by newlines when it holds one",
    )
    p("--kafka-config-file", type=Path, default=default("kafka_config_file"), metavar="FILE",
      help="librdkafka options in a Java properties file (Kafka's client.properties form); "
           "--kafka-config entries win over it")
    p("--kafka-data-dir", type=Path, default=default("kafka_data_dir"), help="embedded broker data")
    p("--kafka-port", type=int, default=default("kafka_port"), help="embedded broker port (0 = free)")
    p("--kafka-heap-mb", type=int, default=default("kafka_heap_mb"), help="embedded broker heap")
    p("--kafka-max-restarts", type=int, default=default("kafka_max_restarts"),
      help="restarts of a dead embedded broker allowed within 5 minutes; one more death and the "
           "gateway exits with status 3 (default 3; 0 exits at the first)")
    p("--internal-prefix", default=default("internal_prefix"), help="prefix of the gateway's own topics")
    p("--default-partitions", type=int, default=default("default_partitions"))
    p("--max-partitions-per-topic", type=int, default=default("max_partitions_per_topic"),
      help="most partitions of a topic (label kafka-partitions, or an adopted Kafka topic); each "
           "subscription's lease/ack log gets as many (default 64)")
    p("--max-topics-per-project", type=int, default=default("max_topics_per_project"),
      help="topics per project; more answer RESOURCE_EXHAUSTED (default 10,000, as Google's)")
    p("--max-subscriptions-per-project", type=int, default=default("max_subscriptions_per_project"),
      help="subscriptions per project; more answer RESOURCE_EXHAUSTED (default 10,000)")
    p("--max-snapshots-per-project", type=int, default=default("max_snapshots_per_project"),
      help="snapshots per project; more answer RESOURCE_EXHAUSTED (default 5,000)")
    p("--replication-factor", type=int, default=default("replication_factor"))
    p("--pull-max-wait-seconds", type=float, default=default("pull_max_wait_seconds"))
    p("--session-timeout-ms", type=int, default=default("session_timeout_ms"),
      help="consumer-group session of each subscription's member (default 20,000): how long a "
           "crashed process holds its partitions, and how long a dead group coordinator may "
           "take to move before members lose theirs")
    p("--idle-subscription-seconds", type=float, default=default("idle_subscription_seconds"))
    p("--checkpoint-interval-seconds", type=float, default=default("checkpoint_interval_seconds"))
    p("--shutdown-grace-seconds", type=float, default=default("shutdown_grace_seconds"))
    p("--expiration-check-seconds", type=float, default=default("expiration_check_seconds"),
      help="how often the elected process looks for expired subscriptions")
    p("--min-expiration-ttl-seconds", type=int, default=default("min_expiration_ttl_seconds"),
      help="smallest expiration_policy.ttl accepted (the API's is 1 day; lower it only for tests)")
    p("--advertise-address", default=default("advertise_address"),
      help="HOST:PORT where other gateway processes reach this one (default: --host:--port)")
    p("--stream-max-seconds", type=float, default=default("stream_max_seconds"),
      help="StreamingPull streams are ended with UNAVAILABLE after this long; clients reconnect")
    p("--pull-response-max-bytes", type=int, default=default("pull_response_max_bytes"),
      help="each Pull and StreamingPull response stays under this size, but holds one message at "
           "least (default 4 MiB: gRPC's own limit, which the official clients keep against an "
           "emulator host; up to 20 MiB for clients that accept more)")
    p("--push-max-outstanding", type=int, default=default("push_max_outstanding"),
      help="largest push window: pushes outstanding per subscription and process (default 1000)")
    p("--push-max-connections", type=int, default=default("push_max_connections"),
      help="HTTP connections to push endpoints, all subscriptions together, and the most requests "
           "one subscription has in flight (default 50)")
    p("--push-auth-issuer", default=default("push_auth_issuer"),
      help="`iss` of push tokens and base URL of their key set (default http://HOST:REST-PORT)")
    p("--push-auth-key-file", type=Path, default=default("push_auth_key_file"),
      help="PEM RSA private key that signs push tokens (default: keys kept in Kafka, rotated)")
    p("--push-auth-key-rotation-hours", type=float, default=default("push_auth_key_rotation_hours"))
    p("--push-destinations", default=default("push_destinations"),
      help="where push endpoints may be: any (the default) or public (not loopback, private or "
           "other non-global addresses, checked after DNS resolution). Link-local addresses, "
           "the cloud metadata address among them, are refused always")
    p("--http-max-connections", type=int, default=default("http_max_connections"),
      help="open connections of the REST port; one past it is answered 503 and closed (default 1000)")
    p("--http-header-timeout-seconds", type=float, default=default("http_header_timeout_seconds"),
      help="a request's line and headers must arrive within this long of its first byte (default 10)")
    p("--http-body-timeout-seconds", type=float, default=default("http_body_timeout_seconds"),
      help="a request's body must arrive within this long of its headers, or 408 (default 60)")
    p("--http-idle-timeout-seconds", type=float, default=default("http_idle_timeout_seconds"),
      help="a REST connection without a request for this long is closed (default 60)")
    p("--grpc-max-connections", type=int, default=default("grpc_max_connections"),
      help="open connections of the gRPC port; more are closed at once (default 1000)")
    p("--grpc-max-concurrent-rpcs", type=int, default=default("grpc_max_concurrent_rpcs"),
      help="calls in progress, streams included; more fail with RESOURCE_EXHAUSTED (default 10000)")
    p("--grpc-max-streams-per-connection", type=int, default=default("grpc_max_streams_per_connection"),
      help="HTTP/2 MAX_CONCURRENT_STREAMS of each gRPC connection (default 1000)")
    p("--grpc-handshake-timeout-seconds", type=float, default=default("grpc_handshake_timeout_seconds"),
      help="a gRPC connection must open HTTP/2 within this long, or it is closed (default 10)")
    p("--grpc-idle-timeout-seconds", type=float, default=default("grpc_idle_timeout_seconds"),
      help="a gRPC connection without calls for this long is closed with GOAWAY (default 300)")
    p("--grpc-max-connection-age-seconds", type=float, default=default("grpc_max_connection_age_seconds"),
      help="gRPC connections older than this get GOAWAY; their calls run to their end (default 3600; "
           "0: no limit)")
    p("--event-loop", default=default("event_loop"),
      help="auto (uvloop where installed, the default), uvloop, or asyncio (the standard loop)")
    p("--log-level", default=default("log_level"))


# Fields taken from their flag as they are, converted by their declared type (a flag's default
# from the environment is a string); the others are built in from_namespace.
_PLAIN = {"int": int, "float": float, "str": str}


def from_namespace(ns: argparse.Namespace) -> Settings:
    """Build and validate Settings from parsed flags."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(Settings):
        convert = _PLAIN.get(str(field.type))
        if convert is not None:
            value = getattr(ns, field.name)
            values[field.name] = convert("" if value is None else value)
    config_file = Path(ns.kafka_config_file) if ns.kafka_config_file else None
    bootstrap, kafka_config = _kafka_settings(ns.kafka_bootstrap or None, config_file, ns.kafka_config)
    key_file, data_dir = ns.push_auth_key_file, ns.kafka_data_dir
    return Settings(**{
        **values,
        "kafka_bootstrap": bootstrap,
        "kafka_config": kafka_config,
        "kafka_config_file": config_file,
        "kafka_data_dir": Path(data_dir) if data_dir else None,
        "push_auth_key_file": Path(key_file) if key_file else None,
        "push_destinations": _push_destinations(ns.push_destinations),
        "log_level": str(ns.log_level).upper(),
    }).validate()
