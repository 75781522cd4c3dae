"""docs/configuration.md is what gateway/settings.py declares (gateway/configdoc.py renders it)."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

import pytest

from gateway import configdoc, settings
from gateway.settings import Settings, options_of

_ROW = re.compile(r"^\| `(--[a-z0-9-]+)[^`]*` \| `([A-Z0-9_]+)` \| ([^|]+) \|")


def _table_rows(text: str) -> list[tuple[str, str, str]]:
    """(flag, variable, default cell) of each row of the settings table."""
    return [(m[1], m[2], m[3].strip()) for line in text.splitlines() if (m := _ROW.match(line))]


def test_the_page_is_rendered_from_the_settings() -> None:
    assert configdoc.DOC.read_text(encoding="utf-8") == configdoc.render(), "run: python -m gateway.configdoc"


def test_check_exits_1_with_a_diff_when_the_page_is_stale(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(configdoc.render().replace("`8085`", "`8086`"), encoding="utf-8")
    monkeypatch.setattr(configdoc, "DOC", stale)
    assert configdoc.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "-| `--port` | `PUBSUB_GATEWAY_PORT` | `8086` |" in err
    assert "+| `--port` | `PUBSUB_GATEWAY_PORT` | `8085` |" in err
    stale.write_text(configdoc.render(), encoding="utf-8")
    assert configdoc.main(["--check"]) == 0


def test_every_option_is_in_the_table_exactly_once() -> None:
    rows = _table_rows(configdoc.render())
    options = options_of(Settings)
    assert Counter(flag for flag, _, _ in rows) == Counter(o.flag for o in options)
    assert Counter(variable for _, variable, _ in rows) == Counter(o.variable for o in options)
    assert [flag for flag, _, _ in rows] == [o.flag for o in options]  # in the declaration's order


def test_each_default_is_what_serve_gets_with_no_flag_and_no_variable() -> None:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, env={})
    parsed = settings.from_namespace(parser.parse_args([]))
    cells = {flag: default for flag, _, default in _table_rows(configdoc.render())}
    for option in options_of(Settings):
        assert cells[option.flag] == configdoc.shown(getattr(parsed, option.name)), option.flag
    assert cells["--port"] == "`8085`"
    assert cells["--rest-port"] == configdoc.UNSET  # shared: REST beside gRPC on --port
    assert cells["--stream-run-ahead"] == "`1`"
    assert cells["--metrics-open"] == "`false`"


def test_every_setting_says_what_it_means() -> None:
    assert [o.flag for o in options_of(Settings) if not o.help] == []


def test_cells_escape_the_pipe() -> None:
    text = configdoc.render()
    assert "`--grpc-push-tls off\\|system\\|FILE`" in text
    for line in text.splitlines():
        if line.startswith("| `--"):
            assert len(re.findall(r"(?<!\\)\|", line)) == 5, line  # four cells, no stray pipe


@pytest.mark.parametrize(("value", "words"), configdoc.SWITCH_WORDS.items())
def test_the_switch_words_are_those_serve_reads(value: bool, words: tuple[str, ...]) -> None:
    for word in words:
        parser = argparse.ArgumentParser()
        settings.add_arguments(parser, env={"PUBSUB_GATEWAY_METRICS_OPEN": word})
        assert settings.from_namespace(parser.parse_args([])).metrics_open is value


def test_kafka_config_combines_as_the_page_says(tmp_path: Path) -> None:
    """The file's entries, then the variable's, then the flags': a later value of a key wins."""
    config_file = tmp_path / "client.properties"
    config_file.write_text("a = file\nb = file\nc = file\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, env={"PUBSUB_GATEWAY_KAFKA_CONFIG": "b=variable,c=variable"})
    args = parser.parse_args(["--kafka-config-file", str(config_file), "--kafka-config", "c=flag"])
    assert dict(settings.from_namespace(args).kafka_config) == {"a": "file", "b": "variable", "c": "flag"}
    prose = " ".join(configdoc.render().split())
    assert "first the file's entries, then the variable's, then the flags'" in prose
