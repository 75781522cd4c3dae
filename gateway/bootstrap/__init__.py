"""Resources declared at start: --bootstrap-file (YAML or JSON, the API's own field names) and
--bootstrap's short form, applied by every gateway process before it is ready (docs/bootstrap.md).

    declared = load(settings.bootstrap_file, settings.bootstrap)   # BootstrapError: file, line, why
    outcome = await Bootstrap(store, topics, subscriptions, schemas).apply(declared)

`declaration.py` reads (shape only: fields, types, names); `plan.py` checks every entry with the
core services' own checks before anything is written, then makes the changes.
"""

from gateway.bootstrap.declaration import (
    BootstrapError,
    Declaration,
    Entry,
    Where,
    load,
    read_file,
    short_form,
)
from gateway.bootstrap.plan import Bootstrap, Outcome, Step

__all__ = [
    "Bootstrap",
    "BootstrapError",
    "Declaration",
    "Entry",
    "Outcome",
    "Step",
    "Where",
    "load",
    "read_file",
    "short_form",
]
