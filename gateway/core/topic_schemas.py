"""Topics with a schema: their `schema_settings` checked when a topic is created or updated, and
every message published to them validated against the schema's revisions.

A topic names its schema and encoding, and optionally the first and last revision allowed.
Those bounds are kept as the revisions' commit numbers in the topic's record (`TopicMeta`), so a
bound whose revision is deleted later still bounds: the next revision (for a first) or the one
before (for a last) takes its place, and revisions deleted inside the range are skipped, as
Pub/Sub documents. A message is valid if it matches one allowed revision, tried from the newest
to the oldest; the publish then adds the attributes `googclient_schemaname`,
`googclient_schemaencoding` and `googclient_schemarevisionid` (the revision it matched). One
message that matches none refuses the whole request with INVALID_ARGUMENT.

`SchemaMarks` rewrites those attributes as messages are delivered, once their schema or revision
is deleted (`_deleted-schema_`, `_deleted-schema-revision_`), as Pub/Sub's subscribers see them.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.core.resources import ResourceStore, StoredSchema, StoredSchemaRevision, StoredTopic
from gateway.core.schemas import SchemaService
from gateway.errors import FailedPrecondition, InvalidArgument, NotFound, quote
from gateway.schemas import (
    ATTR_SCHEMA_ENCODING,
    ATTR_SCHEMA_NAME,
    ATTR_SCHEMA_REVISION_ID,
    DELETED_REVISION,
    DELETED_SCHEMA,
    CompiledSchema,
    Encoding,
    SchemaError,
    schema_name,
)
from gateway.translate.limits import OutgoingMessage

# Compiled revisions by record (name and op: a revision's content never changes), so that the
# publish path does not hash a definition of up to 300 KB per request to find it in the cache.
_KEEP = 1024

# Messages are validated on the event loop while that is cheap, the rest of a request in a worker
# thread. The hop costs ~45 us of CPU per request (asyncio.to_thread on uvloop, measured), more
# than validating a few small messages (~2 us for a 1 KiB Avro record): a publish of one message
# paid 20 times its validation for the hop. On the loop, a request validates messages for at most
# _INLINE_SECONDS and none larger than _INLINE_MESSAGE_BYTES: the slowest input measured, Protocol
# Buffer JSON (~0.7 us a byte through json_format), then holds the loop ~3 ms at worst, less than
# the 5 ms a worker thread may hold the GIL before the loop gets it back.
_INLINE_SECONDS = 0.0005
_INLINE_MESSAGE_BYTES = 4096


class TopicSchemas:
    def __init__(self, schemas: SchemaService) -> None:
        self._schemas = schemas
        self._compiled: OrderedDict[tuple[str, str], CompiledSchema] = OrderedDict()

    def check(self, settings: pubsub_pb2.SchemaSettings) -> tuple[int, int]:
        """Refuse settings that cannot be applied: the schema must exist, the encoding be JSON
        or BINARY, the bounds be revisions of the schema, the first not after the last. The
        bounds as commit numbers (0: none)."""
        if not settings.schema:
            raise InvalidArgument("schema_settings.schema is required when schema_settings is set.")
        try:
            name = schema_name(settings.schema)
        except InvalidArgument:
            raise InvalidArgument(
                f"Invalid schema name in schema_settings: {quote(settings.schema)}."
            ) from None
        head = self._schemas.schema(name)
        Encoding.of(settings.encoding)
        first = self._seq(head, settings.first_revision_id)
        last = self._seq(head, settings.last_revision_id)
        if first and last and first > last:
            raise InvalidArgument(
                f"schema_settings: the first revision {quote(settings.first_revision_id)} was "
                f"committed after the last revision {quote(settings.last_revision_id)}."
            )
        return first, last

    def _seq(self, head: StoredSchema, revision_id: str) -> int:
        return self._schemas.revision(head, revision_id).meta.seq if revision_id else 0

    async def stamp(self, topic: StoredTopic, messages: Sequence[OutgoingMessage]) -> list[OutgoingMessage]:
        """The messages with the schema attributes added, each validated against the topic's
        allowed revisions; INVALID_ARGUMENT when one matches none."""
        settings = topic.proto.schema_settings
        try:
            if settings.schema == DELETED_SCHEMA:
                raise NotFound(settings.schema)
            head = self._schemas.schema(schema_name(settings.schema))
        except NotFound:
            raise FailedPrecondition(
                f"The schema of topic {topic.name} was deleted: messages cannot be validated."
            ) from None
        form = Encoding.of(settings.encoding)
        allowed = self._allowed(head, topic.meta.schema_first_seq, topic.meta.schema_last_seq)
        if not allowed:
            raise FailedPrecondition(
                f"No revision of {head.name} is in the range topic {topic.name} allows: "
                "messages cannot be validated."
            )
        checks = [(rev.proto.revision_id, await self._compile(rev)) for rev in allowed]
        payloads = [m.data for m in messages]
        matched = _match(checks, payloads, form, head.name, until=time.perf_counter() + _INLINE_SECONDS)
        if len(matched) < len(payloads):
            matched += await asyncio.to_thread(_match, checks, payloads, form, head.name, len(matched))
        common = {ATTR_SCHEMA_NAME: head.name, ATTR_SCHEMA_ENCODING: form.name}
        return [
            OutgoingMessage(
                m.data, {**m.attributes, **common, ATTR_SCHEMA_REVISION_ID: rid}, m.ordering_key, m.numeric
            )
            for m, rid in zip(messages, matched, strict=True)
        ]

    def _allowed(self, head: StoredSchema, first: int, last: int) -> list[StoredSchemaRevision]:
        """The revisions within the bounds, newest first."""
        revisions = self._schemas.revisions(head)
        return [r for r in reversed(revisions) if first <= r.meta.seq and (not last or r.meta.seq <= last)]

    async def _compile(self, rev: StoredSchemaRevision) -> CompiledSchema:
        key = (rev.name, rev.op)
        found = self._compiled.get(key)
        if found is None:
            found = await self._schemas.compiled(rev.proto.type, rev.proto.definition)
            self._compiled[key] = found
            while len(self._compiled) > _KEEP:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(key)
        return found


def _match(
    checks: Sequence[tuple[str, CompiledSchema]],
    payloads: Sequence[bytes],
    form: Encoding,
    schema: str,
    start: int = 0,
    until: float | None = None,
) -> list[str]:
    """The id of the revision each payload from `start` on matches (the first of `checks` that
    accepts it). With `until` (a `time.perf_counter()`), only those up to the first larger than
    `_INLINE_MESSAGE_BYTES` or met past that time: the caller validates the rest elsewhere."""
    out = []
    for i in range(start, len(payloads)):
        data = payloads[i]
        if until is not None and (len(data) > _INLINE_MESSAGE_BYTES or time.perf_counter() > until):
            break
        first_error: SchemaError | None = None
        for revision_id, compiled in checks:
            try:
                compiled.validate(data, form)
            except SchemaError as err:
                first_error = first_error or err
                continue
            out.append(revision_id)
            break
        else:
            assert first_error is not None
            raise SchemaError(
                f"Invalid data in message: Message failed schema validation (message {i}, "
                f"{form.name} of {schema}: {first_error.message})."
            )
    return out


class SchemaMarks:
    """The schema attributes of a message about to be delivered, as they read now: the gateway
    alone sets `googclient_*` attributes (publishers may not send `goog` keys), so a message that
    has them was validated; its schema or revision may have been deleted since."""

    def __init__(self, store: ResourceStore) -> None:
        self._store = store

    def apply(self, attributes: dict[str, str]) -> None:
        name = attributes.get(ATTR_SCHEMA_NAME)
        if name is None or name == DELETED_SCHEMA:
            return
        head = self._store.get("schema", name)
        revision = attributes.get(ATTR_SCHEMA_REVISION_ID)
        if head is None:
            attributes[ATTR_SCHEMA_NAME] = DELETED_SCHEMA
        if revision is not None and (head is None or revision not in head.meta.revisions):
            attributes[ATTR_SCHEMA_REVISION_ID] = DELETED_REVISION
