"""docs/cli.md, the admin commands' reference, rendered from their parser (gateway/admin_cli.py).

`python -m gateway.clidoc` writes it; `python -m gateway.clidoc --check` exits 1 when the file
differs from what the parser says (the unit tier checks the same), so the reference cannot
drift from the commands.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from gateway import admin_cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
# The options every admin command takes (admin_cli's `common` parent), listed once.
COMMON_GROUP = "connection and output"

INTRO = """# The admin CLI

`pubsub-gateway` administers a running gateway the way `gcloud pubsub` administers Google's:
a gcloud command line works with `gcloud pubsub` replaced by `pubsub-gateway` for the commands
below (today's shorter forms, `pubsub-gateway publish`, `pull` and `seek`, stay). The gateway is
`--address` or `PUBSUB_EMULATOR_HOST`; short names take their project from `--project` or
`PUBSUB_PROJECT_ID`. Output is for people, or JSON with `--format json` (the REST API's field
names; `pull` writes one JSON object per message and line, as the messages come).

A drain, `pull --all --ack` (or `subscriptions pull --all --auto-ack`), acknowledges each batch
only once it has been written and flushed (and synced to disk when stdout is a file), so an
interruption part-way (Ctrl-C, a closed pipe, a full disk, the gateway lost) loses no message:
what was not written is delivered again.

This page is rendered from the commands' parser by `python -m gateway.clidoc`; a unit test fails
when it differs.
"""


# What a positional argument without help of its own names.
_NAMED = {
    "name": "the resource: a short name (of `--project`) or `projects/P/...` in full",
    "topic": "the topic: a short name or `projects/P/topics/T`",
    "subscription": "the subscription: a short name or `projects/P/subscriptions/S`",
    "messages": "the data of each message to publish (without any, stdin: one message a line)",
}


def admin_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pubsub-gateway")
    admin_cli.add_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def render() -> str:
    parser = admin_parser()
    statuses = admin_cli.EXIT_STATUSES.removeprefix("exit status: ")
    out = [INTRO, "## Exit status", "", statuses[0].upper() + statuses[1:], ""]
    commands = _subcommands(parser)
    leaf = next(iter(_subcommands(next(iter(commands.values()))).values()))
    out += ["## Options of every command", "", *_table(_options(leaf, common=True)), ""]
    for name, command in commands.items():
        actions = _subcommands(command)
        out += [f"## {name}", ""]
        for title, sub in actions.items() if actions else [("", command)]:
            words = " ".join(w for w in ("pubsub-gateway", name, title) if w)
            what = _help_of(command, title) if title else _help_of(parser, name)
            out += [
                f"### `{words}`",
                "",
                what[0].upper() + what[1:] + ".",
                "",
                "```text",
                _usage(words, sub),
                "```",
                "",
            ]
            if sub.description:
                out += [sub.description, ""]
            rows = _options(sub, common=False)
            if rows:
                out += [*_table(rows), ""]
    return "\n".join(out).rstrip() + "\n"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    """The help line of subcommand `name` of `parser` (the parser's own description if none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name and choice.help:
                    return str(choice.help)
    return (parser.description or "").split(".")[0]


def _arguments(parser: argparse.ArgumentParser, common: bool) -> Iterator[argparse.Action]:
    for group in parser._action_groups:
        if (group.title == COMMON_GROUP) != common:
            continue
        for action in group._group_actions:
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                yield action


def _spelled(action: argparse.Action) -> str:
    if not action.option_strings:
        return str(action.metavar or action.dest).upper()
    flags = ", ".join(f"`{f}`" for f in action.option_strings)
    if action.nargs == 0:
        return flags
    return f"{flags} {action.metavar or action.dest.upper()}"


def _options(parser: argparse.ArgumentParser, common: bool) -> list[tuple[str, str]]:
    rows = []
    for action in _arguments(parser, common):
        text = action.help or ("" if action.option_strings else _NAMED.get(action.dest, ""))
        if action.choices and action.option_strings:
            text = f"{text} (one of {', '.join(map(str, action.choices))})".strip()
        if action.required and action.option_strings:
            text = f"required. {text}".strip()
        rows.append((_spelled(action), text))
    return rows


def _table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| argument | meaning |", "|---|---|", *(f"| {a} | {m.replace('|', '/')} |" for a, m in rows)]


def _usage(words: str, parser: argparse.ArgumentParser) -> str:
    parts = [words]
    for action in _arguments(parser, common=False):
        if not action.option_strings:
            named = str(action.metavar or action.dest).upper()
            parts.append(f"[{named} ...]" if action.nargs == "*" else named)
            continue
        flag = action.option_strings[0]
        spelled = flag if action.nargs == 0 else f"{flag} {action.metavar or action.dest.upper()}"
        parts.append(spelled if action.required else f"[{spelled}]")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    text = render()
    if check:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} differs from the parser: run python -m gateway.clidoc", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
