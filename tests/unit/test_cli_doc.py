"""docs/cli.md is what the admin commands' parser says (gateway/clidoc.py renders it)."""

from __future__ import annotations

from gateway import admin_cli, clidoc


def test_the_reference_is_rendered_from_the_parser() -> None:
    assert clidoc.DOC.read_text(encoding="utf-8") == clidoc.render(), "run: python -m gateway.clidoc"


def test_every_command_and_subcommand_is_in_it() -> None:
    text = clidoc.render()
    parser = clidoc.admin_parser()
    for name, command in clidoc._subcommands(parser).items():
        assert name in admin_cli.COMMANDS
        for action in clidoc._subcommands(command) or {"": command}:
            words = " ".join(w for w in ("pubsub-gateway", name, action) if w)
            assert f"### `{words}`" in text
    for gcloud in ("topics publish", "subscriptions pull", "subscriptions seek", "schemas validate-message"):
        assert f"### `pubsub-gateway {gcloud}`" in text
