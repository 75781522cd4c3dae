"""Schemas: the SchemaService's semantics on records of the resource log.

A schema is two kinds of record (translate/meta.py): its own small record (`schema`: name, type,
IAM policy, and the ids of its revisions, oldest first) and one record per revision
(`schema_revision`, named `projects/P/schemas/S@R`: type, definition, id, creation time), so
that 20 revisions of 300 KB each never make one record past Kafka's 1 MB limit. Counting schema
records counts schemas, as the per-project quota must.

Every change to the list of revisions (commit, rollback, deleting a revision) writes the new
revision's record first and then the schema's record by compare-and-set (`ResourceStore.replace`):
processes racing on one schema are decided by log order, the loser tries again on what the winner
wrote, and a schema never lists a revision whose record is not before it in the log. A revision
record whose schema does not list it (left by an interrupted call, or by a schema deleted and
created again under its name: `uid` tells them apart) is ignored.

Definitions are compiled by gateway/schemas in a worker thread (protoc runs as a subprocess),
through a cache that the publish path shares. A commit must be compatible with the latest
revision (gateway/schemas/compat.py), checked in a worker thread too; a rollback is not checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid

from gateway._pb.google.pubsub.v1 import pubsub_pb2, schema_pb2
from gateway.clock import now_ms
from gateway.core.paging import page
from gateway.core.resources import (
    Quota,
    Resource,
    ResourceStore,
    StoredSchema,
    StoredSchemaRevision,
    StoredTopic,
)
from gateway.errors import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    quote,
)
from gateway.schemas import (
    DELETED_SCHEMA,
    MAX_REVISIONS_PER_SCHEMA,
    CompiledSchema,
    Encoding,
    RevisionId,
    SchemaCache,
    SchemaError,
    SchemaName,
    SchemaType,
    check_compatible,
    new_revision_id,
    schema_name,
    schema_name_for,
    split_revision,
    with_revision,
)
from gateway.translate import names
from gateway.translate.meta import SchemaMeta, SchemaRevisionMeta

log = logging.getLogger(__name__)
# How often a change of a schema's revisions is tried again when another change came first.
ATTEMPTS = 8
# ListSchemaRevisions pages by sequence number, newest first: `page` walks sorted names, so each
# revision is named by the distance of its number from this one.
_SEQ_TOP = 10**12
BASIC, FULL = schema_pb2.BASIC, schema_pb2.FULL


class SchemaService:
    def __init__(self, store: ResourceStore, cache: SchemaCache, max_per_project: int) -> None:
        self._store = store
        self._cache = cache
        self._max_per_project = max_per_project

    # -- reading -----------------------------------------------------------------------------

    def schema(self, name: SchemaName) -> StoredSchema:
        """The schema's own record, or NOT_FOUND."""
        res = self._store.get("schema", name)
        if res is None:
            raise NotFound(f"Schema does not exist (resource={name}).")
        return res

    def revision(self, head: StoredSchema, revision_id: str | None) -> StoredSchemaRevision:
        """One revision of the schema (the latest when `revision_id` is None), or NOT_FOUND."""
        if revision_id is None:
            found = self.revisions(head)
            if not found:  # only while its first revision's record is missing: never stored
                raise NotFound(f"Schema does not exist (resource={head.name}).")
            return found[-1]
        res = self._record(head, revision_id) if revision_id in head.meta.revisions else None
        if res is None:
            raise NotFound(f"Schema revision does not exist (resource={head.name}@{quote(revision_id)}).")
        return res

    def revisions(self, head: StoredSchema) -> list[StoredSchemaRevision]:
        """The schema's revisions, oldest first."""
        found = (self._record(head, r) for r in head.meta.revisions)
        return [r for r in found if r is not None]

    def _record(self, head: StoredSchema, revision_id: str) -> StoredSchemaRevision | None:
        res = self._store.get(
            "schema_revision", with_revision(SchemaName(head.name), RevisionId(revision_id))
        )
        return res if res is not None and res.meta.schema_uid == head.meta.uid else None

    def get(self, name: str, view: int) -> schema_pb2.Schema:
        _check_view(view)
        schema, revision_id = split_revision(name)
        return _view(self.revision(self.schema(schema), revision_id), view, FULL)

    def list_page(
        self, parent: str, view: int, page_size: int, page_token: str
    ) -> tuple[list[schema_pb2.Schema], str]:
        names.project_name(parent)
        _check_view(view)
        chunk, token = page(self._store.names("schema", f"{parent}/schemas/"), page_size, page_token)
        out = []
        for name in chunk:
            head = self._store.get("schema", name)
            found = self.revisions(head) if head is not None else []
            if found:
                out.append(_view(found[-1], view, BASIC))
        return out, token

    def list_revisions(
        self, name: str, view: int, page_size: int, page_token: str
    ) -> tuple[list[schema_pb2.Schema], str]:
        """The schema's revisions, newest first."""
        _check_view(view)
        by_key = {f"{_SEQ_TOP - r.meta.seq:013d}": r for r in self.revisions(self.schema(schema_name(name)))}
        chunk, token = page(sorted(by_key), page_size, page_token)
        return [_view(by_key[k], view, BASIC) for k in chunk], token

    # -- validating --------------------------------------------------------------------------

    async def compiled(self, schema_type: int, definition: str) -> CompiledSchema:
        """The definition compiled (in a worker thread: protoc is a subprocess), or
        INVALID_ARGUMENT with the compiler's message."""
        kind = SchemaType.of(schema_type)
        try:
            return await asyncio.to_thread(self._cache.get, kind, definition)
        except SchemaError as err:
            raise SchemaError(f"Invalid schema definition: {err.message}") from None

    async def validate_schema(self, parent: str, schema: schema_pb2.Schema) -> None:
        names.project_name(parent)
        await self.compiled(schema.type, schema.definition)

    async def validate_message(
        self, parent: str, name: str, schema: schema_pb2.Schema | None, message: bytes, encoding: int
    ) -> None:
        """ValidateMessage: `message` against the schema `name` (a revision with `@R`, else
        the latest), or against the inline `schema` when `name` is empty."""
        names.project_name(parent)
        form = Encoding.of(encoding)
        if name:
            schema_, revision_id = split_revision(name)
            rev = self.revision(self.schema(schema_), revision_id)
            compiled = await self.compiled(rev.proto.type, rev.proto.definition)
        elif schema is not None:
            compiled = await self.compiled(schema.type, schema.definition)
        else:
            raise InvalidArgument("Either name or schema must be set.")
        try:
            await asyncio.to_thread(compiled.validate, message, form)
        except SchemaError as err:
            raise SchemaError(f"Invalid data in message: {err.message}") from None

    # -- changing ----------------------------------------------------------------------------

    def quota(self, project: str) -> Quota:
        return Quota.per_project("schemas", project, self._max_per_project, "--max-schemas-per-project")

    async def create(self, parent: str, schema: schema_pb2.Schema, schema_id: str) -> schema_pb2.Schema:
        if schema_id:
            name = schema_name_for(parent, schema_id)
        elif schema.name:
            name = schema_name(schema.name)
            if not name.startswith(f"{parent}/"):
                raise InvalidArgument(f"The schema {name} is not in {quote(parent)}.")
        else:
            raise InvalidArgument("schema_id is required.")
        kind = SchemaType.of(schema.type)
        if self._store.get("schema", name) is not None:
            raise AlreadyExists(f"Schema already exists: {name}")
        quota = self.quota(name.split("/")[1])
        self._store.check_quota("schema", quota)
        await self.compiled(kind, schema.definition)
        uid = uuid.uuid4().hex
        first = new_revision_id()
        rev = _revision(name, uid, first, 1, kind, schema.definition)
        head = Resource(
            name,
            schema_pb2.Schema(name=name, type=kind.name),
            SchemaMeta(uid, (first,), commits=1),
            op=uuid.uuid4().hex,
        )
        self._store.check_size(rev)
        await self._store.create(rev)
        try:
            await self._store.create(head, quota)
        except BaseException as exc:
            # Unanswered, the schema's record may be stored yet: its revision then stays.
            if not isinstance(exc, (Unavailable, asyncio.CancelledError)):
                await asyncio.shield(self._store.delete("schema_revision", rev.name))
            raise
        log.info("created schema %s (%s, revision %s)", name, kind.name, first)
        return _view(rev, FULL, FULL)

    async def commit(
        self, name: str, schema: schema_pb2.Schema, *, unless_latest: bool = False
    ) -> schema_pb2.Schema:
        """CommitSchema. `unless_latest`: when the latest revision has the definition already,
        that revision, and nothing committed (decided on each attempt, so processes committing
        one definition at once make one revision of it: the bootstrap file's)."""
        target = schema_name(name)
        kind = SchemaType.of(schema.type)
        _check_type(self.schema(target), kind)
        compiled = await self.compiled(kind, schema.definition)
        rev = await self._add_revision(target, kind, schema.definition, compiled, unless_latest=unless_latest)
        return _view(rev, FULL, FULL)

    async def check_commit(self, name: str, schema: schema_pb2.Schema) -> None:
        """Every check CommitSchema makes before it writes, against the schema as it is now."""
        target = schema_name(name)
        kind = SchemaType.of(schema.type)
        head = self.schema(target)
        _check_type(head, kind)
        _check_room(head)
        await self._check_follows(self.revision(head, None), await self.compiled(kind, schema.definition))

    async def rollback(self, name: str, revision_id: str) -> schema_pb2.Schema:
        """A copy of `revision_id` as the new latest revision, not checked for compatibility:
        Pub/Sub documents the check for commits only, and the copy was a revision of the schema
        already (rolling back past an incompatible step is what a rollback is for)."""
        target = schema_name(name)
        if not revision_id:
            raise InvalidArgument("revision_id is required.")
        source = self.revision(self.schema(target), revision_id)
        kind = SchemaType.of(source.proto.type)
        return _view(await self._add_revision(target, kind, source.proto.definition), FULL, FULL)

    async def _add_revision(
        self,
        name: SchemaName,
        kind: SchemaType,
        definition: str,
        checked: CompiledSchema | None = None,
        *,
        unless_latest: bool = False,
    ) -> StoredSchemaRevision:
        """A new latest revision: its record, then the schema's record listing it (compare-and-set,
        tried again when another change of the schema came first). `checked`, the definition
        compiled, must be compatible with the latest revision (checked again on each attempt:
        a concurrent change may have made another revision the latest)."""
        for _ in range(ATTEMPTS):
            head = self.schema(name)
            _check_type(head, kind)
            if unless_latest and (latest := self.revision(head, None)).proto.definition == definition:
                return latest
            _check_room(head)
            if checked is not None:
                await self._check_follows(self.revision(head, None), checked)
            seq = head.meta.commits + 1
            rev = _revision(name, head.meta.uid, new_revision_id(head.meta.revisions), seq, kind, definition)
            self._store.check_size(rev)
            await self._store.create(rev)
            meta = dataclasses.replace(
                head.meta, revisions=(*head.meta.revisions, rev.proto.revision_id), commits=seq
            )
            try:
                await self._store.replace(dataclasses.replace(head, meta=meta), head.op)
            except (Aborted, NotFound) as exc:
                await asyncio.shield(self._store.delete("schema_revision", rev.name))
                if isinstance(exc, NotFound):
                    raise self._gone(name) from None
                continue
            log.info("schema %s: revision %s committed", name, rev.proto.revision_id)
            return rev
        raise Aborted(f"The schema {name} kept changing concurrently: try again.")

    async def _check_follows(self, latest: StoredSchemaRevision, new: CompiledSchema) -> None:
        """INVALID_ARGUMENT unless `new` may follow the `latest` revision (Pub/Sub's rules,
        gateway/schemas/compat.py), compared in a worker thread as compiling is."""
        old = await self.compiled(latest.proto.type, latest.proto.definition)
        try:
            await asyncio.to_thread(check_compatible, old, new)
        except SchemaError as err:
            raise SchemaError(
                f"{err.message.removesuffix('.')}; the latest revision of {latest.proto.name} is "
                f"{latest.proto.revision_id}."
            ) from None

    def _gone(self, name: SchemaName) -> NotFound:
        return NotFound(f"Schema does not exist (resource={name}).")

    async def delete_revision(self, name: str, revision_id: str) -> schema_pb2.Schema:
        """DeleteSchemaRevision: `name` is `projects/P/schemas/S@R`; the deprecated field
        `revision_id` is taken when the name has no revision."""
        target, named = split_revision(name)
        if revision_id and named is not None and named != revision_id:
            raise InvalidArgument(
                f"The revision in the name ({quote(named)}) and revision_id ({quote(revision_id)}) differ."
            )
        wanted = named or revision_id
        if not wanted:
            raise InvalidArgument(
                f"The name of the revision to delete must end with @REVISION_ID (got {quote(name)})."
            )
        for _ in range(ATTEMPTS):
            head = self.schema(target)
            rev = self.revision(head, wanted)
            if len(head.meta.revisions) == 1:
                raise FailedPrecondition(
                    f"Cannot delete the only revision of the schema {target}: delete the schema instead."
                )
            left = tuple(r for r in head.meta.revisions if r != wanted)
            try:
                await self._store.replace(
                    dataclasses.replace(head, meta=dataclasses.replace(head.meta, revisions=left)), head.op
                )
            except Aborted:
                continue
            except NotFound:
                raise self._gone(target) from None
            await self._store.delete("schema_revision", rev.name)
            log.info("schema %s: revision %s deleted", target, wanted)
            return _view(rev, FULL, FULL)
        raise Aborted(f"The schema {target} kept changing concurrently: try again.")

    async def delete(self, name: str) -> None:
        target = schema_name(name)
        head = self.schema(target)
        await self._store.delete("schema", target)
        # Its revisions' records, and any a concurrent commit left (same uid); records of a
        # schema created again under the name meanwhile have another uid and stay.
        for rev_name in self._store.names("schema_revision", f"{target}@"):
            rev = self._store.get("schema_revision", rev_name)
            if rev is not None and rev.meta.schema_uid == head.meta.uid:
                await self._store.delete("schema_revision", rev_name)
        # Topics that name it show it deleted, as Pub/Sub's do; publishing to them is refused.
        for topic in list(self._store.all("topic")):
            if topic.proto.schema_settings.schema == target:

                def marked(topic: StoredTopic) -> StoredTopic | None:
                    if topic.proto.schema_settings.schema != target:
                        return None  # changed meanwhile: another schema now, or none
                    proto = pubsub_pb2.Topic()
                    proto.CopyFrom(topic.proto)
                    proto.schema_settings.schema = DELETED_SCHEMA
                    return dataclasses.replace(topic, proto=proto)

                with contextlib.suppress(NotFound):  # the topic went meanwhile
                    await self._store.change(topic, marked)
        log.info("deleted schema %s (%d revisions)", target, len(head.meta.revisions))


def _check_room(head: StoredSchema) -> None:
    if len(head.meta.revisions) >= MAX_REVISIONS_PER_SCHEMA:
        raise ResourceExhausted(
            f"The schema {head.name} has {len(head.meta.revisions)} revisions, the most a schema "
            f"may have ({MAX_REVISIONS_PER_SCHEMA}): delete a revision before committing another."
        )


def _check_type(head: StoredSchema, kind: SchemaType) -> None:
    if SchemaType.of(head.proto.type) is not kind:
        current = SchemaType.of(head.proto.type)
        raise InvalidArgument(
            f"The schema {head.name} is of type {current.name}; a revision cannot change it to {kind.name}."
        )


def _revision(
    name: SchemaName, uid: str, revision_id: RevisionId, seq: int, kind: SchemaType, definition: str
) -> StoredSchemaRevision:
    proto = schema_pb2.Schema(
        name=name,
        type=kind.name,
        definition=definition,
        revision_id=revision_id,
    )
    proto.revision_create_time.FromMilliseconds(now_ms())
    return Resource(with_revision(name, revision_id), proto, SchemaRevisionMeta(uid, seq))


def _check_view(view: int) -> None:
    if view not in (schema_pb2.SCHEMA_VIEW_UNSPECIFIED, BASIC, FULL):
        raise InvalidArgument(f"Invalid view: {view}; it must be BASIC or FULL.")


def _view(rev: StoredSchemaRevision, view: int, default: int) -> schema_pb2.Schema:
    """A revision as the API returns it: named by its schema; BASIC leaves out the definition.
    `default` is the view of SCHEMA_VIEW_UNSPECIFIED (FULL for GetSchema, BASIC for the lists)."""
    out = schema_pb2.Schema()
    out.CopyFrom(rev.proto)
    if (view or default) == BASIC:
        out.ClearField("definition")
    return out
