"""Schema resource names and revision ids, and the published facts the SchemaService and the
publish path will need (limits, the attributes a validated message carries).

A schema is `projects/{project}/schemas/{schema}`; its id follows the same rules as a topic's
(`gateway.translate.names`, reused here, not restated). A revision is named by appending
`@{revision_id}`, as GetSchema and DeleteSchemaRevision accept.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Collection
from typing import NewType

from gateway.errors import InvalidArgument, quote
from gateway.translate import names

SchemaName = NewType("SchemaName", str)
RevisionId = NewType("RevisionId", str)

COLLECTION = "schemas"
REVISION_SEPARATOR = "@"

# Pub/Sub's schema limits: schemas per project, revisions per schema.
MAX_SCHEMAS_PER_PROJECT = 10_000
MAX_REVISIONS_PER_SCHEMA = 20

# Attributes Pub/Sub adds to a message published to a topic with a schema, and the values they
# take once the schema or the revision is deleted.
ATTR_SCHEMA_NAME = "googclient_schemaname"
ATTR_SCHEMA_ENCODING = "googclient_schemaencoding"
ATTR_SCHEMA_REVISION_ID = "googclient_schemarevisionid"
DELETED_SCHEMA = "_deleted-schema_"
DELETED_REVISION = "_deleted-schema-revision_"

# "an auto-generated eight-character UUID"; every published example is lowercase hex
# ("0a0b0c0d", "c7cfa2a8").
REVISION_ID_LENGTH = 8
_REVISION_ID = re.compile(r"[0-9a-f]{8}")


def _invalid(name: str) -> InvalidArgument:
    return InvalidArgument(f"Invalid resource name given (name={quote(name)}).")


def schema_name(name: str) -> SchemaName:
    """Validate `projects/P/schemas/S` (no revision)."""
    names.parse(name, COLLECTION)
    return SchemaName(name)


def schema_name_for(parent: str, schema_id: str) -> SchemaName:
    """The name CreateSchema gives `schema_id` under `parent` (`projects/P`), both validated."""
    names.project_name(parent)
    return schema_name(f"{parent}/{COLLECTION}/{schema_id}")


def split_revision(name: str) -> tuple[SchemaName, RevisionId | None]:
    """`projects/P/schemas/S[@R]` -> (the schema's name, R or None). Whether R exists is the
    caller's question (NOT_FOUND); here R only has to be non-empty."""
    base, sep, revision = name.partition(REVISION_SEPARATOR)
    try:
        schema = schema_name(base)
    except InvalidArgument:
        raise _invalid(name) from None
    if not sep:
        return schema, None
    if not revision:
        raise _invalid(name)
    return schema, RevisionId(revision)


def with_revision(name: SchemaName, revision: RevisionId) -> str:
    """`projects/P/schemas/S@R`: how requests (GetSchema, DeleteSchemaRevision, ...) and the
    revision's record in the resource log name one revision. The Schema messages the API returns
    are named by their schema, with the revision in `revision_id`."""
    return f"{name}{REVISION_SEPARATOR}{revision}"


def is_revision_id(text: str) -> bool:
    """Has `text` the form of a revision id this gateway hands out?"""
    return _REVISION_ID.fullmatch(text) is not None


def new_revision_id(
    taken: Collection[str] = (), token: Callable[[int], str] = secrets.token_hex
) -> RevisionId:
    """A fresh revision id: 8 lowercase hex characters, none of `taken` (the schema's other
    revisions: 32 random bits collide rarely, but a schema keeps up to 20 and ids must stay
    unique within it). `token(n)` gives n random bytes as hex; tests pass their own."""
    while True:
        revision = token(REVISION_ID_LENGTH // 2)
        if not is_revision_id(revision):
            raise ValueError(f"token gave {revision!r}, not {REVISION_ID_LENGTH} lowercase hex characters")
        if revision not in taken:
            return RevisionId(revision)
