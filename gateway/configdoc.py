"""docs/configuration.md, every setting of `pubsub-gateway serve` in one table, rendered from
gateway/settings.py: each row's flag, variable, default and meaning are the declaration's.

`python -m gateway.configdoc` writes it; `python -m gateway.configdoc --check` exits 1 with a
diff when the file differs from what the settings say (the unit tier checks the same), so the
page cannot drift from the code.
"""

from __future__ import annotations

import difflib
import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

from gateway import settings
from gateway.kafka import FORCED as FORCED_KAFKA_CONFIG

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
WIDTH = 100  # of the prose
UNSET = "unset"  # the default column of a setting that is empty unless given


def _words(items: Iterable[str], conjunction: str = "or") -> str:
    """`a`, `b` or `c`."""
    quoted = [f"`{item}`" for item in items]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} {conjunction} {quoted[-1]}"


_OPTIONS = settings.options_of(settings.Settings)
_REPEATABLE = [o.flag for o in _OPTIONS if o.split_env is not None]
_SWITCHES = [o.flag for o in _OPTIONS if isinstance(o.default, bool)]
# What the switches take, each word as settings' parser of a switch reads it.
SWITCH_WORDS = {True: ("true", "on", "yes", "1"), False: ("false", "off", "no", "0")}

INTRO = f"""# Configuration

Every setting of `pubsub-gateway serve` is a flag and an environment variable: `--kafka-port`
is `{settings.variable_of("kafka_port")}`. A flag given on the command line wins over its
variable, except that the repeatable ones ({_words(_REPEATABLE, "and")}) keep both: the
variable's entries, then the flags'. The settings are checked together before the gateway
listens: a value out of range, or two that contradict each other, stops `serve` with exit
status 2 and a message naming the flag. Once they pass, the gateway logs them at INFO
(`settings: {{...}}`), Kafka options whose key holds {_words(settings._SECRET_WORDS)} shown
as `***`.

Topics, subscriptions and schemas that must exist before clients come (a dev stack's) are
declared with `--bootstrap-file` (YAML in the API's own field names) or `--bootstrap`'s short
form, and applied by every gateway process before it is ready: [bootstrap.md](bootstrap.md).

Switches ({_words(_SWITCHES, "and")}) take {_words(SWITCH_WORDS[True])}, and
{_words(SWITCH_WORDS[False])}. Durations are seconds unless the name says otherwise.
`make run` is `pubsub-gateway serve --kafka-data-dir .cache/kafka-data`: every default below,
and an embedded Kafka broker whose data survives restarts; without `--kafka-data-dir` the
embedded broker keeps its data in a temporary directory, removed when the gateway stops.
`pubsub-gateway serve --help` says the same as this table.

This page is rendered from gateway/settings.py by `python -m gateway.configdoc`; a unit test
fails when it differs.
"""

KAFKA_CONFIG = f"""## Kafka client options: `--kafka-config` and `--kafka-config-file`

Both give librdkafka options to every Kafka client the gateway makes, as `KEY=VALUE`:

- `--kafka-config KEY=VALUE` is repeatable, one option each time. Its variable,
  `{settings.variable_of("kafka_config")}`, holds several: separated by commas, or by newlines when
  the value holds one (then values may contain commas, and blank lines and lines starting with `#`
  are skipped). The variable's entries and the flags' are both kept, the flags' after the
  variable's.
- `--kafka-config-file FILE` is a Java properties file, the form of Kafka's own
  `client.properties`: `key=value`, `key: value` or `key value` per line, `#` and `!` comments,
  backslash escapes (`\\=`, `\\:`, `\\uXXXX`, ...) and a trailing backslash continuing a line.

They combine key by key: first the file's entries, then the variable's, then the flags', a later
value of a key replacing an earlier one, so `--kafka-config` overrides the file. A
`bootstrap.servers` among them is the cluster to use, as in `client.properties`; given as well
as `--kafka-bootstrap` with another value, it is refused. {_words(sorted(FORCED_KAFKA_CONFIG))}
cannot be set (the gateway creates every topic itself), nor `enable.idempotence=false` with more
than one request in flight per connection (a retried request could land out of order).
"""


def shown(value: object) -> str:
    """A default as a table cell: as the flag would be given (`true`, `5`, `off`), or `unset`."""
    text = settings.shown_default(value)
    return UNSET if text is None else f"`{text}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rows() -> list[tuple[str, str, str, str]]:
    """(flag, variable, default, meaning) of each setting, in the order Settings declares them.
    Defaults are those of a Settings() made with none given (a repeatable flag's empty dict)."""
    defaults = settings.Settings()
    out = []
    for option in settings.options_of(settings.Settings):
        flag = f"{option.flag} {option.metavar}" if option.metavar else option.flag
        out.append(
            (
                f"`{flag}`",
                f"`{option.variable}`",
                shown(getattr(defaults, option.name)),
                option.help or "",
            )
        )
    return out


def render() -> str:
    table = ["| flag | environment variable | default | meaning |", "|---|---|---|---|"]
    table += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows()]
    prose = [_reflow(INTRO), "## Settings", "", *table, "", _reflow(KAFKA_CONFIG)]
    return "\n".join(prose).rstrip() + "\n"


def _reflow(text: str, width: int = WIDTH) -> str:
    """Markdown prose refilled to `width`: each paragraph, and each `- ` item of a list, as one
    run of words (the text above fills its names in, so its line lengths vary)."""
    out = []
    for paragraph in text.strip("\n").split("\n\n"):
        if paragraph.startswith("#"):
            out.append(paragraph)
            continue
        items = re.split(r"\n(?=- )", paragraph)
        out.append(
            "\n".join(
                textwrap.fill(
                    " ".join(item.split()),
                    width,
                    subsequent_indent="  " if item.startswith("- ") else "",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
                for item in items
            )
        )
    return "\n\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    text = render()
    if check:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"{DOC.name} (committed)",
                tofile=f"{DOC.name} (rendered)",
            )
            sys.stderr.writelines(diff)
            print(f"{DOC} differs from the settings: run python -m gateway.configdoc", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
