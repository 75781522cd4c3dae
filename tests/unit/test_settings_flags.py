"""The flags and environment variables of `pubsub-gateway serve`, pinned (issue 16).

The list below is the one `pubsub-gateway serve --help` printed before the settings were declared
once in gateway/settings.py, flags and variables derived from the fields: the derived parser
must offer the same flags, in the same order, and each variable must set the same field.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

import gateway.settings
import gateway.workers
from gateway.settings import OPTIONS, Settings, add_arguments, options_of, setting
from tests.unit.test_settings import parse

# flag, its environment variable, a value that passes validation, the field's value from it (a
# value other than the default, of the field's type)
FLAGS: list[tuple[str, str, str, object]] = [
    ("--host", "PUBSUB_GATEWAY_HOST", "0.0.0.0", "0.0.0.0"),
    ("--port", "PUBSUB_GATEWAY_PORT", "9000", 9000),
    ("--rest-port", "PUBSUB_GATEWAY_REST_PORT", "9001", 9001),
    ("--kafka-bootstrap", "PUBSUB_GATEWAY_KAFKA_BOOTSTRAP", "kafka:9092", "kafka:9092"),
    ("--workers", "PUBSUB_GATEWAY_WORKERS", "4", 4),
    ("--worker-ports-from", "PUBSUB_GATEWAY_WORKER_PORTS_FROM", "9100", 9100),
    ("--worker-max-restarts", "PUBSUB_GATEWAY_WORKER_MAX_RESTARTS", "2", 2),
    ("--kafka-config", "PUBSUB_GATEWAY_KAFKA_CONFIG", "acks=all", {"acks": "all"}),
    ("--kafka-config-file", "PUBSUB_GATEWAY_KAFKA_CONFIG_FILE", "/dev/null", Path("/dev/null")),
    ("--kafka-data-dir", "PUBSUB_GATEWAY_KAFKA_DATA_DIR", "/var/lib/kafka", Path("/var/lib/kafka")),
    ("--kafka-port", "PUBSUB_GATEWAY_KAFKA_PORT", "19092", 19092),
    ("--kafka-heap-mb", "PUBSUB_GATEWAY_KAFKA_HEAP_MB", "512", 512),
    ("--kafka-max-restarts", "PUBSUB_GATEWAY_KAFKA_MAX_RESTARTS", "5", 5),
    ("--internal-prefix", "PUBSUB_GATEWAY_INTERNAL_PREFIX", "gw", "gw"),
    ("--default-partitions", "PUBSUB_GATEWAY_DEFAULT_PARTITIONS", "8", 8),
    ("--max-partitions-per-topic", "PUBSUB_GATEWAY_MAX_PARTITIONS_PER_TOPIC", "128", 128),
    ("--max-topics-per-project", "PUBSUB_GATEWAY_MAX_TOPICS_PER_PROJECT", "100", 100),
    ("--max-subscriptions-per-project", "PUBSUB_GATEWAY_MAX_SUBSCRIPTIONS_PER_PROJECT", "200", 200),
    ("--max-snapshots-per-project", "PUBSUB_GATEWAY_MAX_SNAPSHOTS_PER_PROJECT", "50", 50),
    ("--max-schemas-per-project", "PUBSUB_GATEWAY_MAX_SCHEMAS_PER_PROJECT", "60", 60),
    ("--bootstrap-file", "PUBSUB_GATEWAY_BOOTSTRAP_FILE", "/etc/gw/boot.yaml", Path("/etc/gw/boot.yaml")),
    ("--bootstrap", "PUBSUB_GATEWAY_BOOTSTRAP", "shop,orders:worker", ("shop,orders:worker",)),
    ("--replication-factor", "PUBSUB_GATEWAY_REPLICATION_FACTOR", "3", 3),
    ("--pull-max-wait-seconds", "PUBSUB_GATEWAY_PULL_MAX_WAIT_SECONDS", "2.5", 2.5),
    ("--session-timeout-ms", "PUBSUB_GATEWAY_SESSION_TIMEOUT_MS", "30000", 30_000),
    ("--idle-subscription-seconds", "PUBSUB_GATEWAY_IDLE_SUBSCRIPTION_SECONDS", "60", 60.0),
    ("--checkpoint-interval-seconds", "PUBSUB_GATEWAY_CHECKPOINT_INTERVAL_SECONDS", "0.5", 0.5),
    ("--shutdown-grace-seconds", "PUBSUB_GATEWAY_SHUTDOWN_GRACE_SECONDS", "2", 2.0),
    ("--shutdown-timeout-seconds", "PUBSUB_GATEWAY_SHUTDOWN_TIMEOUT_SECONDS", "60", 60.0),
    ("--expiration-check-seconds", "PUBSUB_GATEWAY_EXPIRATION_CHECK_SECONDS", "30", 30.0),
    ("--legacy-project", "PUBSUB_GATEWAY_LEGACY_PROJECT", "old-systems", "old-systems"),
    ("--min-expiration-ttl-seconds", "PUBSUB_GATEWAY_MIN_EXPIRATION_TTL_SECONDS", "60", 60),
    ("--advertise-address", "PUBSUB_GATEWAY_ADVERTISE_ADDRESS", "gw:8085", "gw:8085"),
    ("--stream-max-seconds", "PUBSUB_GATEWAY_STREAM_MAX_SECONDS", "90", 90.0),
    ("--stream-run-ahead", "PUBSUB_GATEWAY_STREAM_RUN_AHEAD", "3", 3.0),
    ("--pull-response-max-bytes", "PUBSUB_GATEWAY_PULL_RESPONSE_MAX_BYTES", "8388608", 8 * 1024 * 1024),
    ("--push-max-outstanding", "PUBSUB_GATEWAY_PUSH_MAX_OUTSTANDING", "10", 10),
    ("--push-max-connections", "PUBSUB_GATEWAY_PUSH_MAX_CONNECTIONS", "5", 5),
    ("--push-auth-issuer", "PUBSUB_GATEWAY_PUSH_AUTH_ISSUER", "https://gw.example", "https://gw.example"),
    ("--push-auth-key-file", "PUBSUB_GATEWAY_PUSH_AUTH_KEY_FILE", "/etc/gw/key.pem", Path("/etc/gw/key.pem")),
    ("--push-auth-key-rotation-hours", "PUBSUB_GATEWAY_PUSH_AUTH_KEY_ROTATION_HOURS", "12", 12.0),
    ("--push-destinations", "PUBSUB_GATEWAY_PUSH_DESTINATIONS", " Public ", "public"),
    ("--grpc-push-tls", "PUBSUB_GATEWAY_GRPC_PUSH_TLS", "System", "system"),
    ("--http-max-connections", "PUBSUB_GATEWAY_HTTP_MAX_CONNECTIONS", "10", 10),
    ("--http-header-timeout-seconds", "PUBSUB_GATEWAY_HTTP_HEADER_TIMEOUT_SECONDS", "5", 5.0),
    ("--http-body-timeout-seconds", "PUBSUB_GATEWAY_HTTP_BODY_TIMEOUT_SECONDS", "30", 30.0),
    ("--http-idle-timeout-seconds", "PUBSUB_GATEWAY_HTTP_IDLE_TIMEOUT_SECONDS", "30", 30.0),
    ("--grpc-max-connections", "PUBSUB_GATEWAY_GRPC_MAX_CONNECTIONS", "10", 10),
    ("--grpc-max-concurrent-rpcs", "PUBSUB_GATEWAY_GRPC_MAX_CONCURRENT_RPCS", "100", 100),
    ("--grpc-max-streams-per-connection", "PUBSUB_GATEWAY_GRPC_MAX_STREAMS_PER_CONNECTION", "10", 10),
    ("--grpc-handshake-timeout-seconds", "PUBSUB_GATEWAY_GRPC_HANDSHAKE_TIMEOUT_SECONDS", "5", 5.0),
    ("--grpc-idle-timeout-seconds", "PUBSUB_GATEWAY_GRPC_IDLE_TIMEOUT_SECONDS", "60", 60.0),
    ("--grpc-max-connection-age-seconds", "PUBSUB_GATEWAY_GRPC_MAX_CONNECTION_AGE_SECONDS", "0", 0.0),
    ("--first-bytes-timeout-seconds", "PUBSUB_GATEWAY_FIRST_BYTES_TIMEOUT_SECONDS", "2", 2.0),
    ("--max-pending-connections", "PUBSUB_GATEWAY_MAX_PENDING_CONNECTIONS", "50", 50),
    ("--metrics-max-subscriptions", "PUBSUB_GATEWAY_METRICS_MAX_SUBSCRIPTIONS", "10", 10),
    ("--metrics-max-topics", "PUBSUB_GATEWAY_METRICS_MAX_TOPICS", "20", 20),
    ("--metrics-open", "PUBSUB_GATEWAY_METRICS_OPEN", "true", True),
    ("--kafka-statistics-seconds", "PUBSUB_GATEWAY_KAFKA_STATISTICS_SECONDS", "0", 0.0),
    ("--tracing", "PUBSUB_GATEWAY_TRACING", "log", "log"),
    ("--log-format", "PUBSUB_GATEWAY_LOG_FORMAT", " JSON ", "json"),
    ("--tls-cert-file", "PUBSUB_GATEWAY_TLS_CERT_FILE", "/etc/gw/cert.pem", Path("/etc/gw/cert.pem")),
    ("--tls-key-file", "PUBSUB_GATEWAY_TLS_KEY_FILE", "/etc/gw/key.pem", Path("/etc/gw/key.pem")),
    ("--tls-client-ca-file", "PUBSUB_GATEWAY_TLS_CLIENT_CA_FILE", "/etc/gw/ca.pem", Path("/etc/gw/ca.pem")),
    ("--tls-client-auth", "PUBSUB_GATEWAY_TLS_CLIENT_AUTH", " Require ", "require"),
    ("--tls-peer-ca-file", "PUBSUB_GATEWAY_TLS_PEER_CA_FILE", "/etc/gw/peers.pem", Path("/etc/gw/peers.pem")),
    ("--auth-token-file", "PUBSUB_GATEWAY_AUTH_TOKEN_FILE", "/etc/gw/tokens", Path("/etc/gw/tokens")),
    (
        "--auth-oidc",
        "PUBSUB_GATEWAY_AUTH_OIDC",
        "https://accounts.google.com/=a|b",
        {"https://accounts.google.com": "a|b"},
    ),
    ("--auth-mtls", "PUBSUB_GATEWAY_AUTH_MTLS", "true", True),
    ("--iam-policy-file", "PUBSUB_GATEWAY_IAM_POLICY_FILE", "/etc/gw/iam.json", Path("/etc/gw/iam.json")),
    ("--event-loop", "PUBSUB_GATEWAY_EVENT_LOOP", "asyncio", "asyncio"),
    ("--log-level", "PUBSUB_GATEWAY_LOG_LEVEL", "debug", "DEBUG"),
]

# Flags that take something other than their name in capitals in the usage line.
METAVARS = {
    "--kafka-config": "KEY=VALUE",
    "--kafka-config-file": "FILE",
    "--grpc-push-tls": "off|system|FILE",
    **dict.fromkeys(
        [
            "--tls-cert-file",
            "--tls-key-file",
            "--tls-client-ca-file",
            "--tls-peer-ca-file",
            "--auth-token-file",
            "--iam-policy-file",
            "--bootstrap-file",
        ],
        "FILE",
    ),
    "--bootstrap": "PROJECT,TOPIC:SUB",
    "--auth-oidc": "ISSUER=AUDIENCE",
}
REPEATABLE = ("--kafka-config", "--bootstrap", "--auth-oidc")

# The settings a flag is valid only with (validation refuses it alone): field -> (text, value).
_TLS = {"tls_cert_file": ("/c.pem", Path("/c.pem")), "tls_key_file": ("/k.pem", Path("/k.pem"))}
_CLIENT_AUTH = {
    **_TLS,
    "tls_client_ca_file": ("/ca.pem", Path("/ca.pem")),
    "tls_client_auth": ("optional", "optional"),
}
COMPANIONS: dict[str, dict[str, tuple[str, object]]] = {
    "--tls-cert-file": {"tls_key_file": _TLS["tls_key_file"]},
    "--tls-key-file": {"tls_cert_file": _TLS["tls_cert_file"]},
    "--tls-client-ca-file": {**_TLS, "tls_client_auth": ("optional", "optional")},
    "--tls-client-auth": {**_TLS, "tls_client_ca_file": _CLIENT_AUTH["tls_client_ca_file"]},
    "--tls-peer-ca-file": _TLS,
    "--auth-mtls": _CLIENT_AUTH,
    "--worker-ports-from": {"workers": ("2", 2)},
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser, env={})
    return parser


def test_the_same_flags_in_the_same_order() -> None:
    options = [s for a in _parser()._actions for s in a.option_strings]
    assert options == ["-h", "--help", *(flag for flag, *_ in FLAGS)]


def test_metavars_and_repeatable_flags() -> None:
    for action in _parser()._actions[1:]:
        (flag,) = action.option_strings
        assert action.metavar == METAVARS.get(flag)
        assert isinstance(action, argparse._AppendAction) == (flag in REPEATABLE)


def test_every_flag_has_a_field_of_its_name() -> None:
    fields = [f.name for f in dataclasses.fields(Settings)]
    assert fields == [flag[2:].replace("-", "_") for flag, *_ in FLAGS]
    assert [(o.flag, o.variable) for o in OPTIONS] == [(flag, variable) for flag, variable, *_ in FLAGS]


@pytest.mark.parametrize(("flag", "variable", "text", "value"), FLAGS, ids=[f[0] for f in FLAGS])
def test_flag_and_variable_set_the_same_field(flag: str, variable: str, text: str, value: object) -> None:
    name = flag[2:].replace("-", "_")
    companions = COMPANIONS.get(flag, {})
    others = {field: v for field, (_, v) in companions.items()}
    expected = dataclasses.replace(Settings(), **others, **{name: value})  # type: ignore[arg-type]
    assert expected != dataclasses.replace(Settings(), **others)  # type: ignore[arg-type]
    other_flags = [f"--{field.replace('_', '-')}={t}" for field, (t, _) in companions.items()]
    from_flag = parse([*other_flags, f"{flag}={text}"])
    from_variable = parse(other_flags, {variable: text})
    assert from_flag == expected
    assert from_variable == expected
    assert type(getattr(from_flag, name)) is type(value)
    assert type(getattr(from_variable, name)) is type(value)


def test_variables_are_the_prefix_and_the_field_name() -> None:
    for flag, variable, *_ in FLAGS:
        assert variable == "PUBSUB_GATEWAY_" + flag[2:].replace("-", "_").upper()


def test_messages_name_flags_that_exist() -> None:
    """Error messages spell their flags out: each must still be one (a renamed field renames its flag)."""
    flags = {o.flag for o in OPTIONS}
    for module in (gateway.settings, gateway.workers):
        text = Path(module.__file__ or "").read_text(encoding="utf-8")
        named = set(re.findall(r"--[a-z][a-z0-9-]*", text)) - {"--some-flag"}  # the docstring's example
        assert named, module.__name__
        assert named <= flags, module.__name__


def test_a_field_of_a_type_no_flag_reads_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Odd:
        ratio: complex = 1j

    with pytest.raises(TypeError, match=r"Odd.ratio: no flag reads a <class 'complex'>"):
        options_of(Odd)

    @dataclasses.dataclass(frozen=True)
    class Converted:
        ratio: complex = setting(1j, "a ratio", convert=complex)

    (option,) = options_of(Converted)
    assert (option.flag, option.variable, option.help) == ("--ratio", "PUBSUB_GATEWAY_RATIO", "a ratio")
    assert option.convert("2j") == 2j


def test_grpc_push_tls_takes_off_system_or_a_ca_file(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert parse(["--grpc-push-tls", str(ca)]).grpc_push_tls == str(ca.resolve())
    assert parse([]).grpc_push_tls == "off"
    for bad in ("on", str(tmp_path / "missing.pem"), ""):
        with pytest.raises(gateway.settings.SettingsError, match="expected off, system, or the path"):
            parse(["--grpc-push-tls", bad])
