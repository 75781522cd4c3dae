"""Settings from flags and environment variables (gateway.settings)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from gateway.settings import Settings, SettingsError, add_arguments, from_namespace


def parse(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser, env=env or {})
    return from_namespace(parser.parse_args(argv))


def test_defaults() -> None:
    s = parse([])
    assert s == Settings()
    assert s.port == 8085
    assert s.kafka_bootstrap is None
    assert s.kafka_config == {}
    assert s.kafka_data_dir is None


def test_defaults_ignore_unrelated_env() -> None:
    assert parse([], {"PORT": "1", "PUBSUB_GATEWAY": "x", "pubsub_gateway_port": "2"}) == Settings()


def test_env_defaults() -> None:
    env = {
        "PUBSUB_GATEWAY_HOST": "0.0.0.0",
        "PUBSUB_GATEWAY_PORT": "9999",
        "PUBSUB_GATEWAY_KAFKA_BOOTSTRAP": "kafka:9092",
        "PUBSUB_GATEWAY_KAFKA_CONFIG": "security.protocol=SSL,sasl.password=s3cret",
        "PUBSUB_GATEWAY_KAFKA_DATA_DIR": "/var/lib/kafka",
        "PUBSUB_GATEWAY_KAFKA_PORT": "19092",
        "PUBSUB_GATEWAY_KAFKA_HEAP_MB": "512",
        "PUBSUB_GATEWAY_INTERNAL_PREFIX": "gw",
        "PUBSUB_GATEWAY_DEFAULT_PARTITIONS": "8",
        "PUBSUB_GATEWAY_REPLICATION_FACTOR": "3",
        "PUBSUB_GATEWAY_PULL_MAX_WAIT_SECONDS": "2.5",
        "PUBSUB_GATEWAY_SESSION_TIMEOUT_MS": "30000",
        "PUBSUB_GATEWAY_IDLE_SUBSCRIPTION_SECONDS": "60",
        "PUBSUB_GATEWAY_CHECKPOINT_INTERVAL_SECONDS": "0.5",
        "PUBSUB_GATEWAY_SHUTDOWN_GRACE_SECONDS": "2",
        "PUBSUB_GATEWAY_STREAM_MAX_SECONDS": "90",
        "PUBSUB_GATEWAY_LOG_LEVEL": "debug",
    }
    s = parse([], env)
    assert s == Settings(
        host="0.0.0.0",
        port=9999,
        kafka_bootstrap="kafka:9092",
        kafka_config={"security.protocol": "SSL", "sasl.password": "s3cret"},
        kafka_data_dir=Path("/var/lib/kafka"),
        kafka_port=19092,
        kafka_heap_mb=512,
        internal_prefix="gw",
        default_partitions=8,
        replication_factor=3,
        pull_max_wait_seconds=2.5,
        session_timeout_ms=30000,
        idle_subscription_seconds=60.0,
        checkpoint_interval_seconds=0.5,
        shutdown_grace_seconds=2.0,
        stream_max_seconds=90.0,
        log_level="DEBUG",
    )
    assert isinstance(s.port, int) and isinstance(s.pull_max_wait_seconds, float)


def test_every_field_has_a_flag() -> None:
    names = {f.name for f in dataclasses.fields(Settings)}
    parser = argparse.ArgumentParser()
    add_arguments(parser, env={})
    dests = {a.dest for a in parser._actions if a.dest != "help"}
    assert dests == names


def test_flag_wins_over_env() -> None:
    env = {
        "PUBSUB_GATEWAY_PORT": "9999",
        "PUBSUB_GATEWAY_HOST": "0.0.0.0",
        "PUBSUB_GATEWAY_KAFKA_CONFIG": "acks=all,client.id=env",
    }
    s = parse(["--port", "1234", "--host", "::1", "--kafka-config", "client.id=flag"], env)
    assert s.port == 1234
    assert s.host == "::1"
    assert s.kafka_config["client.id"] == "flag"


def test_kafka_config_flags() -> None:
    s = parse(["--kafka-config", "a=1", "--kafka-config", " b = x=y ", "--kafka-config", "c="])
    assert s.kafka_config == {"a": "1", "b": "x=y", "c": ""}


@pytest.mark.parametrize("item", ["novalue", "=x", " =x"])
def test_kafka_config_bad(item: str) -> None:
    with pytest.raises(SettingsError, match="--kafka-config"):
        parse(["--kafka-config", item])


def test_kafka_config_that_would_reorder_a_partition_is_refused() -> None:
    off = ["--kafka-config", "enable.idempotence=false"]
    with pytest.raises(SettingsError, match=re.escape("max.in.flight.requests.per.connection=3")):
        parse([*off, "--kafka-config", "max.in.flight.requests.per.connection=3"])
    assert parse(off).kafka_config["enable.idempotence"] == "false"  # then one at a time


def test_bad_env_value_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse([], {"PUBSUB_GATEWAY_PORT": "eighty"})
    assert "--port" in capsys.readouterr().err


def test_empty_bootstrap_means_embedded() -> None:
    assert parse([], {"PUBSUB_GATEWAY_KAFKA_BOOTSTRAP": ""}).kafka_bootstrap is None


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("port", -1, "--port"),
        ("port", 65536, "--port"),
        ("kafka_port", -1, "--kafka-port"),
        ("kafka_port", 70000, "--kafka-port"),
        ("default_partitions", 0, "--default-partitions"),
        ("replication_factor", 0, "--replication-factor"),
        ("replication_factor", -2, "--replication-factor"),
        ("pull_max_wait_seconds", 0.0, "--pull-max-wait-seconds"),
        ("pull_max_wait_seconds", 60.5, "--pull-max-wait-seconds"),
        ("pull_max_wait_seconds", float("nan"), "--pull-max-wait-seconds"),
        ("session_timeout_ms", 999, "--session-timeout-ms"),
        ("kafka_heap_mb", 127, "--kafka-heap-mb"),
        ("stream_max_seconds", 0.5, "--stream-max-seconds"),
        ("stream_run_ahead", 0.5, "--stream-run-ahead"),
        ("stream_run_ahead", 10.5, "--stream-run-ahead"),
        ("stream_run_ahead", float("nan"), "--stream-run-ahead"),
        ("internal_prefix", "", "--internal-prefix"),
        ("internal_prefix", "gw_", "--internal-prefix"),
        ("internal_prefix", "a/b", "--internal-prefix"),
        ("internal_prefix", "a b", "--internal-prefix"),
        ("log_level", "TRACE", "--log-level"),
    ],
)
def test_validation_names_the_flag(field: str, value: object, flag: str) -> None:
    with pytest.raises(SettingsError, match=flag):
        Settings(**{field: value}).validate()  # type: ignore[arg-type]


def test_validation_via_flags_names_the_flag() -> None:
    with pytest.raises(SettingsError, match="--default-partitions"):
        parse(["--default-partitions", "0"])
    with pytest.raises(SettingsError, match="--port"):
        parse([], {"PUBSUB_GATEWAY_PORT": "70000"})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("port", 0),
        ("port", 65535),
        ("kafka_port", 0),
        ("default_partitions", 1),
        ("replication_factor", -1),
        ("replication_factor", 1),
        ("pull_max_wait_seconds", 60.0),
        ("pull_max_wait_seconds", 0.001),
        ("session_timeout_ms", 1000),
        ("kafka_heap_mb", 128),
        ("stream_max_seconds", 1.0),
        ("stream_run_ahead", 1.0),
        ("stream_run_ahead", 10.0),
        ("internal_prefix", "a.b_c-D9"),
        ("log_level", "warning"),
    ],
)
def test_boundary_values_pass(field: str, value: object) -> None:
    s = Settings(**{field: value})  # type: ignore[arg-type]
    assert s.validate() is s


@pytest.mark.parametrize("prefix", ["pr\u00e9fix", "\uff50\uff52\uff45\uff46\uff49\uff58", "x\u0663"])
def test_internal_prefix_must_be_kafka_legal(prefix: str) -> None:
    with pytest.raises(SettingsError, match="--internal-prefix"):
        Settings(internal_prefix=prefix).validate()


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("checkpoint_interval_seconds", 0.0, "--checkpoint-interval-seconds"),
        ("checkpoint_interval_seconds", -1.0, "--checkpoint-interval-seconds"),
        ("idle_subscription_seconds", 0.0, "--idle-subscription-seconds"),
        ("idle_subscription_seconds", -1.0, "--idle-subscription-seconds"),
    ],
)
def test_intervals_are_validated(field: str, value: float, flag: str) -> None:
    with pytest.raises(SettingsError, match=flag):
        Settings(**{field: value}).validate()  # type: ignore[arg-type]


def test_masked_hides_secrets() -> None:
    config = {
        "sasl.password": "s3cret",
        "ssl.key.password": "k",
        "sasl.oauthbearer.client.secret": "c",
        "security.protocol": "SASL_SSL",
        "sasl.username": "alice",
    }
    s = Settings(kafka_config=config, kafka_bootstrap="kafka:9092")
    masked = s.masked()
    assert masked["kafka_config"] == {
        "sasl.password": "***",
        "ssl.key.password": "***",
        "sasl.oauthbearer.client.secret": "***",
        "security.protocol": "SASL_SSL",
        "sasl.username": "alice",
    }
    assert "s3cret" not in repr(masked)
    assert masked["kafka_bootstrap"] == "kafka:9092"
    assert masked["port"] == 8085
    assert set(masked) == {f.name for f in dataclasses.fields(Settings)}
    assert s.kafka_config["sasl.password"] == "s3cret"  # the settings themselves are unchanged


def test_masked_hides_env_password() -> None:
    s = parse([], {"PUBSUB_GATEWAY_KAFKA_CONFIG": "sasl.password=hunter2"})
    assert s.kafka_config == {"sasl.password": "hunter2"}
    assert "hunter2" not in repr(s.masked())


def test_legacy_project_is_a_project_id() -> None:
    assert parse([]).legacy_project == "legacy"
    assert parse(["--legacy-project", "old-systems"]).validate().legacy_project == "old-systems"
    assert parse([], {"PUBSUB_GATEWAY_LEGACY_PROJECT": "p1"}).legacy_project == "p1"
    for bad in ("", "a/b", "-x", "x" * 101):
        with pytest.raises(SettingsError, match="--legacy-project"):
            Settings(legacy_project=bad).validate()
