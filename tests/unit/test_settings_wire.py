"""Settings of the wire: Kafka options with commas (newline form, properties files) and the
connection limits of both ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import FailedPrecondition
from gateway.settings import Settings, SettingsError, parse_properties
from gateway.wire import connections
from tests.unit.test_settings import parse

# -- Kafka options whose values hold commas -------------------------------------------------------


def test_env_commas_separate_simple_entries_as_before() -> None:
    s = parse([], {"PUBSUB_GATEWAY_KAFKA_CONFIG": "security.protocol=SSL,client.id=a"})
    assert s.kafka_config == {"security.protocol": "SSL", "client.id": "a"}


def test_env_newlines_separate_entries_whose_values_hold_commas() -> None:
    env = {
        "PUBSUB_GATEWAY_KAFKA_CONFIG": "sasl.password=p,ss=w,rd\n# a comment\n\n"
        "  sasl.username = alice  \r\nssl.cipher.suites=A,B\n"
    }
    s = parse([], env)
    assert s.kafka_config == {
        "sasl.password": "p,ss=w,rd",
        "sasl.username": "alice",
        "ssl.cipher.suites": "A,B",
    }
    # one entry with a comma: a trailing newline says so
    assert parse([], {"PUBSUB_GATEWAY_KAFKA_CONFIG": "sasl.password=a,b\n"}).kafka_config == {
        "sasl.password": "a,b"
    }
    assert "p,ss=w,rd" not in repr(s.masked())


def test_flags_take_commas_as_they_are() -> None:
    assert parse(["--kafka-config", "sasl.password=a,b"]).kafka_config == {"sasl.password": "a,b"}


def test_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# Kafka's client.properties form\n"
        "! also a comment\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "sasl.username alice\n"
        "sasl.password=a,b=c\\=d\\\\e\n"
        "ssl.cipher.suites = ECDHE-RSA-AES256-GCM-SHA384,\\\n"
        "                    ECDHE-RSA-AES128-GCM-SHA256\n"
        "client.id=caf\\u00e9\n",
        encoding="utf-8",
    )
    s = parse(["--kafka-config-file", str(path), "--kafka-config", "client.id=flag"])
    assert s.kafka_config == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "a,b=c=d\\e",
        "ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384,ECDHE-RSA-AES128-GCM-SHA256",
        "client.id": "flag",  # flags win over the file
    }
    assert s.kafka_config_file == path
    masked = repr(s.masked())
    assert "a,b=c=d" not in masked and "'sasl.password': '***'" in masked
    assert parse([], {"PUBSUB_GATEWAY_KAFKA_CONFIG_FILE": str(path)}).kafka_config["client.id"] == "caf\u00e9"


def test_properties_parsing_details() -> None:
    assert parse_properties("a=1\n  b = 2 \nc\nd:\ne\\ f=g\\nh\nk=v\\\n") == {
        "a": "1",
        "b": "2 ",
        "c": "",
        "d": "",
        "e f": "g\nh",
        "k": "v",
    }
    with pytest.raises(SettingsError, match="uXXXX"):
        parse_properties("a=\\u12")


def test_properties_file_errors_name_the_flag(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="--kafka-config-file"):
        parse(["--kafka-config-file", str(tmp_path / "missing.properties")])
    bad = tmp_path / "bad.properties"
    bad.write_bytes(b"a=\xff\n")
    with pytest.raises(SettingsError, match="--kafka-config-file"):
        parse(["--kafka-config-file", str(bad)])


def test_bootstrap_servers_in_the_options_is_the_bootstrap(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("bootstrap.servers=broker:9092\nsecurity.protocol=SSL\n")
    s = parse(["--kafka-config-file", str(path)])
    assert s.kafka_bootstrap == "broker:9092"
    assert s.kafka_config == {"security.protocol": "SSL"}
    same = parse(["--kafka-config-file", str(path), "--kafka-bootstrap", "broker:9092"])
    assert same.kafka_bootstrap == "broker:9092"
    with pytest.raises(SettingsError, match="differ"):
        parse(["--kafka-config-file", str(path), "--kafka-bootstrap", "other:9092"])


def test_bad_entries_do_not_echo_secrets() -> None:
    with pytest.raises(SettingsError) as caught:
        parse(["--kafka-config", "=hunter2"])
    assert "--kafka-config" in str(caught.value)
    for item in ("sasl.password hunter2", "sasl.password:hunter2"):
        with pytest.raises(SettingsError) as caught:
            parse([], {"PUBSUB_GATEWAY_KAFKA_CONFIG": f"{item}\n"})
        assert "hunter2" not in str(caught.value) and "sasl.password***" in str(caught.value)


@pytest.mark.parametrize(
    "key",
    [
        "sasl.jaas.config",
        "sasl.oauthbearer.config",
        "ssl.key.pem",
        "ssl.keystore.password",
        "sasl.oauthbearer.client.secret",
    ],
)
def test_more_secrets_are_masked(key: str) -> None:
    assert Settings(kafka_config={key: "s3cret"}).masked()["kafka_config"] == {key: "***"}


# -- connection limits ------------------------------------------------------------------------------


def test_connection_limit_flags_and_env() -> None:
    s = parse(
        [
            "--http-max-connections",
            "10",
            "--http-header-timeout-seconds",
            "2.5",
            "--grpc-max-connection-age-seconds",
            "0",
        ],
        {"PUBSUB_GATEWAY_GRPC_IDLE_TIMEOUT_SECONDS": "30", "PUBSUB_GATEWAY_GRPC_MAX_CONCURRENT_RPCS": "50"},
    )
    assert (s.http_max_connections, s.http_header_timeout_seconds) == (10, 2.5)
    assert (s.grpc_idle_timeout_seconds, s.grpc_max_concurrent_rpcs) == (30.0, 50)
    assert s.grpc_max_connection_age_seconds == 0


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("http_max_connections", 0, "--http-max-connections"),
        ("grpc_max_connections", 0, "--grpc-max-connections"),
        ("grpc_max_concurrent_rpcs", 0, "--grpc-max-concurrent-rpcs"),
        ("grpc_max_streams_per_connection", 0, "--grpc-max-streams-per-connection"),
        ("http_header_timeout_seconds", 0.0, "--http-header-timeout-seconds"),
        ("http_body_timeout_seconds", -1.0, "--http-body-timeout-seconds"),
        ("http_idle_timeout_seconds", float("nan"), "--http-idle-timeout-seconds"),
        ("grpc_handshake_timeout_seconds", 0.0, "--grpc-handshake-timeout-seconds"),
        ("grpc_idle_timeout_seconds", 0.0, "--grpc-idle-timeout-seconds"),
        ("grpc_max_connection_age_seconds", 0.5, "--grpc-max-connection-age-seconds"),
        ("grpc_max_connection_age_seconds", -1.0, "--grpc-max-connection-age-seconds"),
    ],
)
def test_connection_limits_are_validated(field: str, value: object, flag: str) -> None:
    with pytest.raises(SettingsError, match=flag):
        Settings(**{field: value}).validate()  # type: ignore[arg-type]


def test_grpc_options_honour_the_settings() -> None:
    s = Settings(
        grpc_max_connections=7,
        grpc_max_streams_per_connection=9,
        grpc_handshake_timeout_seconds=1.5,
        grpc_idle_timeout_seconds=2,
        grpc_max_connection_age_seconds=60,
        stream_max_seconds=100,
        pull_max_wait_seconds=5,
    )
    options = dict(connections.grpc_options(s))
    assert options["grpc.max_allowed_incoming_connections"] == 7
    assert options["grpc.max_concurrent_streams"] == 9
    assert options["grpc.server_handshake_timeout_ms"] == 1500
    assert options["grpc.max_connection_idle_ms"] == 2000
    assert options["grpc.max_connection_age_ms"] == 60_000
    # a connection past its age keeps its calls longer than any of them lasts
    assert options["grpc.max_connection_age_grace_ms"] == (100 + 5 + 30) * 1000
    assert options["grpc.http2.min_ping_interval_without_data_ms"] <= 30_000  # Python pings every 30 s
    assert "grpc.max_connection_age_ms" not in dict(
        connections.grpc_options(Settings(grpc_max_connection_age_seconds=0))
    )


def test_the_open_file_limit_is_raised_or_the_start_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    limits = {"soft": 1024, "hard": 4096}
    monkeypatch.setattr(resource, "getrlimit", lambda _: (limits["soft"], limits["hard"]))
    monkeypatch.setattr(resource, "setrlimit", lambda _, v: limits.update(soft=v[0], hard=v[1]))
    connections.raise_file_limit(1000)
    assert limits["soft"] == 1024
    connections.raise_file_limit(3000)
    assert limits == {"soft": 3000, "hard": 4096}
    with pytest.raises(FailedPrecondition, match="ulimit -n"):
        connections.raise_file_limit(5000)
