"""What `pubsub-gateway --help`, `--version`, `serve --help` and `kafka --help` tell a user."""

from __future__ import annotations

import pytest

from gateway import cli
from gateway.settings import OPTIONS


def _printed(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main(list(argv))
    assert done.value.code == 0
    return capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    out = _printed(capsys, "--version")
    assert out.startswith("pubsub-gateway ") and out.split()[1][0].isdigit(), out


def test_serve_help_gives_every_flag_its_meaning_variable_and_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = " ".join(_printed(capsys, "serve", "--help").split())  # argparse wraps lines
    for option in OPTIONS:
        assert option.help, f"{option.flag} has no help"
        assert option.flag in out and f"[{option.variable}]" in out, option.flag
    assert "(default 4)" in out  # --default-partitions, said by its help
    assert "--log-level LOG_LEVEL DEBUG, INFO (the default)" in out
    # defaults as a user types them; none for repeatable flags, whose entries start empty
    assert "object at 0x" not in out and "MISSING" not in out
    assert "(default 60)" in out and "(default 60.0)" not in out and "(default False)" not in out


def test_kafka_help_names_its_own_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["kafka", "--help"])
    assert capsys.readouterr().out.startswith("usage: pubsub-gateway kafka ")
