"""Settings of the wire: Kafka options with commas (newline form, properties files)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gateway.settings import Settings, SettingsError, add_arguments, from_namespace, parse_properties


def parse(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser, env=env or {})
    return from_namespace(parser.parse_args(argv))


# -- Kafka options whose values hold commas -------------------------------------------------------


def test_env_commas_separate_simple_entries_as_before() -> None:
    s = parse([], {"PUBSUB_GATEWAY_KAFKA_CONFIG": "security.protocol=SSL,client.id=a"})
    assert s.kafka_config == {"security.protocol": "SSL", "client.id": "a"}


def test_env_newlines_separate_entries_whose_values_hold_commas() -> None:
    env = {"PUBSUB_GATEWAY_KAFKA_CONFIG": "sasl.password=p,ss=w,rd\n# a comment\n\n"
                                          "  sasl.username = alice  \r\nssl.cipher.suites=A,B\n"}
    s = parse([], env)
    assert s.kafka_config == {"sasl.password": "p,ss=w,rd", "sasl.username": "alice",
                              "ssl.cipher.suites": "A,B"}
    # one entry with a comma: a trailing newline says so
    assert parse([], {"PUBSUB_GATEWAY_KAFKA_CONFIG": "sasl.password=a,b\n"}).kafka_config == {
        "sasl.password": "a,b"}
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
        "a": "1", "b": "2 ", "c": "", "d": "", "e f": "g\nh", "k": "v"}
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


@pytest.mark.parametrize("key", ["sasl.jaas.config", "sasl.oauthbearer.config", "ssl.key.pem",
                                 "ssl.keystore.password", "sasl.oauthbearer.client.secret"])
def test_more_secrets_are_masked(key: str) -> None:
    assert Settings(kafka_config={key: "s3cret"}).masked()["kafka_config"] == {key: "***"}
