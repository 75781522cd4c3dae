"""A declaration applied: checked whole against the resources stored, then written.

Every entry is first checked by the core services' own checks of the same fields
(`TopicService.check_new`, `SubscriptionService.prepare`, `checked_update`, `SchemaService.
check_commit`, the quotas), with what the declaration itself makes counted as there; one bad
entry refuses the whole declaration, naming its line, before anything is written. Then the
changes run as the API's calls would make them: schemas, topics, subscriptions (each kind's
calls a few at once), deletions last, subscriptions first.

Several processes applying one declaration at once agree: a create that another process's
create beat (ALREADY_EXISTS) is checked again against what that one stored, and becomes an
update, or nothing; a commit of a definition that is the latest revision already commits
nothing (`SchemaService.commit(unless_latest=True)`); updates are compare-and-set.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from google.protobuf import json_format
from google.protobuf.message import Message

from gateway._pb.google.pubsub.v1 import pubsub_pb2, schema_pb2
from gateway.bootstrap.declaration import BootstrapError, Declaration, Entry, Kind, differs, error, only
from gateway.core import subscriptions as subscriptions_mod
from gateway.core import topics as topics_mod
from gateway.core.resources import Quota, ResourceStore
from gateway.core.schemas import SchemaService
from gateway.core.subscriptions import SubscriptionService
from gateway.core.topics import TopicService
from gateway.errors import AlreadyExists, GatewayError, InvalidArgument, NotFound, quote
from gateway.schemas import Encoding

log = logging.getLogger(__name__)
Action = Literal["create", "update", "commit", "delete"]
CONCURRENCY = 8  # calls of one kind at once: each waits mostly on Kafka (a topic made, a log written)
ATTEMPTS = 4  # a step beaten by another process's write, checked again and run again


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    action: Action
    entry: Entry[Any]
    mask: tuple[str, ...] = ()  # an update's fields


@dataclasses.dataclass(slots=True)
class Outcome:
    """What one application changed, by action; `unchanged` entries held what they declare."""

    counts: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    unchanged: int = 0

    def __str__(self) -> str:
        done = [f"{n} {action}" for action, n in sorted(self.counts.items())]
        return ", ".join([*done, f"{self.unchanged} as declared already"])


# The order the steps run in: what a step names is there before it.
_PHASES: tuple[tuple[Kind, tuple[Action, ...]], ...] = (
    ("schema", ("create", "commit")),
    ("topic", ("create", "update")),
    ("subscription", ("create", "update")),
    ("subscription", ("delete",)),
    ("topic", ("delete",)),
    ("schema", ("delete",)),
)
_PAST = {"create": "created", "update": "updated", "commit": "committed", "delete": "deleted"}


class Bootstrap:
    def __init__(
        self,
        store: ResourceStore,
        topics: TopicService,
        subscriptions: SubscriptionService,
        schemas: SchemaService,
    ) -> None:
        self._store = store
        self._topics = topics
        self._subs = subscriptions
        self._schemas = schemas
        self._declared = Declaration()

    async def apply(self, declared: Declaration) -> Outcome:
        """Check every entry, then make the changes; BootstrapError (before any write) for an
        entry that cannot be applied."""
        steps = await self.plan(declared)
        outcome = Outcome(unchanged=len(declared) - len({id(s.entry) for s in steps}))
        for kind, actions in _PHASES:
            phase = [s for s in steps if s.entry.kind == kind and s.action in actions]
            limit = asyncio.Semaphore(CONCURRENCY)
            tasks = [asyncio.ensure_future(self._run(step, limit, outcome)) for step in phase]
            try:
                await asyncio.gather(*tasks)
            except BaseException:  # the first failure, as it is (not an ExceptionGroup): the rest stop
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
        return outcome

    async def plan(self, declared: Declaration) -> list[Step]:
        """The steps that make the stored resources what `declared` says, every one checked."""
        self._declared = declared
        steps: list[Step] = []
        for entry in declared.entries():
            steps += await self._steps(entry)
        self._check_quotas(steps)
        return steps

    async def _steps(self, entry: Entry[Any]) -> list[Step]:
        """What `entry` needs done, as things are stored now."""
        if entry.delete:
            gone = self._store.get(entry.kind, entry.name) is None
            return [] if gone else [Step("delete", entry)]
        if entry.kind == "schema":
            with self._checking(entry, "definition"):  # what compiling and compatibility judge
                return await self._schema_steps(entry)
        with self._checking(entry):
            if entry.kind == "topic":
                return await self._topic_steps(entry)
            return self._subscription_steps(entry)

    # -- checking ------------------------------------------------------------------------------

    async def _schema_steps(self, entry: Entry[schema_pb2.Schema]) -> list[Step]:
        schema = entry.message
        if not {"type", "definition"} <= entry.named:
            raise error(entry.where, "a schema needs its type (AVRO or PROTOCOL_BUFFER) and its definition")
        await self._schemas.compiled(schema.type, schema.definition)
        head = self._store.get("schema", entry.name)
        if head is None:
            return [Step("create", entry)]
        latest = self._schemas.revision(head, None).proto
        if (latest.type, latest.definition) == (schema.type, schema.definition):
            return []
        await self._schemas.check_commit(entry.name, schema)  # the type kept, the revision compatible
        return [Step("commit", entry)]

    async def _topic_steps(self, entry: Entry[pubsub_pb2.Topic]) -> list[Step]:
        topic = entry.message
        schema = topic.schema_settings.schema
        if schema:
            self._check_reference(entry, "schema", schema, "schema_settings")
        pending = bool(schema) and self._store.get("schema", schema) is None  # made by this declaration
        res = self._store.get("topic", entry.name)
        if res is None:
            await self._topics.check_new(topic)
            self._check_schema_settings(topic, pending)
            return [Step("create", entry)]
        fields = sorted(entry.named - {"name"})
        self._check_fixed(entry, fields, topics_mod.UPDATABLE, topic, res.proto)
        checked = [f for f in fields if not (pending and f == "schema_settings")]
        new = self._topics.checked_update(topic, checked, res).proto if checked else res.proto
        changed = [f for f in checked if differs(new, res.proto, f)]
        if pending:
            self._check_schema_settings(topic, pending)
            changed.append("schema_settings")
        return [Step("update", entry, tuple(changed))] if changed else []

    def _check_schema_settings(self, topic: pubsub_pb2.Topic, pending: bool) -> None:
        if not pending:
            self._topics.check_schema(topic)
            return
        settings = topic.schema_settings
        Encoding.of(settings.encoding)
        if settings.first_revision_id or settings.last_revision_id:
            raise InvalidArgument(
                f"schema_settings: {settings.schema} is made by this declaration and has no "
                "revision ids yet; leave firstRevisionId and lastRevisionId out"
            )

    def _subscription_steps(self, entry: Entry[pubsub_pb2.Subscription]) -> list[Step]:
        sub = entry.message
        self._check_reference(entry, "topic", sub.topic, "topic")
        dead_letter = sub.dead_letter_policy.dead_letter_topic
        if dead_letter:
            self._check_reference(entry, "topic", dead_letter, "dead_letter_policy")
        prepared = self._subs.prepare(sub)
        res = self._store.get("subscription", entry.name)
        if res is None:
            topic = self._store.get("topic", sub.topic)
            if topic is not None:
                self._subs.check_source(prepared, topic)
            return [Step("create", entry)]
        fields = sorted(entry.named - {"name"})
        self._check_fixed(entry, fields, subscriptions_mod.UPDATABLE, prepared, res.proto)
        updatable = [f for f in fields if f in subscriptions_mod.UPDATABLE]
        if not updatable:
            return []
        new = self._subs.checked_update(sub, updatable, res).proto
        changed = [f for f in updatable if differs(new, res.proto, f)]
        return [Step("update", entry, tuple(changed))] if changed else []

    def _check_fixed(
        self, entry: Entry[Any], fields: Sequence[str], updatable: set[str], wanted: Message, stored: Message
    ) -> None:
        """A field no update may change must hold what the entry says already, as the API
        refuses to change it (a subscription's topic, its ordering, its filter)."""
        for field in fields:
            if field not in updatable and differs(wanted, stored, field):
                json_name = wanted.DESCRIPTOR.fields_by_name[field].json_name
                raise error(
                    entry.where_of(field),
                    f"{entry.kind} {entry.name}: {json_name} cannot change once it exists (it is "
                    f"{shown(stored, field)}, the declaration says {shown(wanted, field)}); delete it "
                    "first (`delete: true`, and start again with the entry back), or give it another name",
                )

    def _check_reference(self, entry: Entry[Any], kind: Kind, name: str, field: str) -> None:
        """`name` (a topic, a schema) must be declared and not deleted here, or exist."""
        found = next((e for e in self._declared.entries(kind) if e.name == name), None)
        if found is not None and found.delete:
            raise error(entry.where_of(field), f"it names the {kind} {name}, deleted at {found.where}")
        if found is None and self._store.get(kind, name) is None:
            raise error(
                entry.where_of(field), f"it names the {kind} {name}, which is not declared and does not exist"
            )

    def _check_quotas(self, steps: Sequence[Step]) -> None:
        """The per-project quotas hold with every create counted (deletions, made last, not)."""
        creates: dict[tuple[Kind, str], list[Entry[Any]]] = collections.defaultdict(list)
        for step in steps:
            if step.action == "create":
                creates[step.entry.kind, step.entry.name.split("/")[1]].append(step.entry)
        for (kind, project), entries in creates.items():
            quota = self._quota(kind, project)
            current = self._store.count(kind, quota.prefix)
            room = max(quota.limit - current, 0)
            if len(entries) > room:
                entry = entries[room]
                raise error(entry.where, f"{kind} {entry.name}: {quota.refusal(current + room)}")

    def _quota(self, kind: Kind, project: str) -> Quota:
        if kind == "topic":
            return self._topics.quota(project)
        if kind == "subscription":
            return self._subs.quota(project)
        return self._schemas.quota(project)

    @contextlib.contextmanager
    def _checking(self, entry: Entry[Any], about: str = "") -> Iterator[None]:
        """A core service's refusal of the entry, as a BootstrapError naming the line of the
        field it names (else of `about`, else the entry's first line)."""
        try:
            yield
        except BootstrapError:
            raise
        except GatewayError as exc:
            where = entry.where_of(field_named(exc.message, entry) or about)
            raise error(where, f"{entry.kind} {entry.name}: {exc}") from None

    # -- writing -------------------------------------------------------------------------------

    async def _run(self, step: Step, limit: asyncio.Semaphore, outcome: Outcome) -> None:
        """One step; when another process's write beat it (the name taken, the resource gone),
        what the entry needs is checked again and done, or found done."""
        entry = step.entry
        async with limit:
            for _ in range(ATTEMPTS):
                try:
                    await self._do(step)
                except (AlreadyExists, NotFound) as exc:
                    if step.action == "delete":  # deleted meanwhile, by another process
                        outcome.unchanged += 1
                        return
                    if self._store.get(entry.kind, entry.name) is None and isinstance(exc, AlreadyExists):
                        raise self._failed(entry, exc) from None  # not a race: taken by something else
                    log.info("bootstrap: %s %s changed meanwhile; checking it again", entry.kind, entry.name)
                    again = await self._steps(entry)
                    if not again:  # the other process made it as declared
                        outcome.unchanged += 1
                        return
                    step = again[0]
                    continue
                except GatewayError as exc:
                    raise self._failed(entry, exc) from None
                outcome.counts[_PAST[step.action]] += 1
                what = f" ({', '.join(step.mask)})" if step.mask else ""
                log.info(
                    "bootstrap: %s %s %s%s (%s)",
                    _PAST[step.action],
                    entry.kind,
                    entry.name,
                    what,
                    entry.where,
                )
                return
        raise error(entry.where, f"{entry.kind} {entry.name} kept changing while it was applied: start again")

    def _failed(self, entry: Entry[Any], exc: GatewayError) -> BootstrapError:
        where = entry.where_of(field_named(exc.message, entry))
        return error(where, f"{entry.kind} {entry.name} could not be applied: {exc}")

    async def _do(self, step: Step) -> None:
        """The API call a step is, on the core service: one place for all of them."""
        entry, action = step.entry, step.action
        if entry.kind == "schema":
            schema = entry.message
            if action == "create":
                project, schema_id = entry.name.split("/")[1], entry.name.split("/")[3]
                body = schema_pb2.Schema(type=schema.type, definition=schema.definition)
                await self._schemas.create(f"projects/{project}", body, schema_id)
            elif action == "commit":
                body = schema_pb2.Schema(type=schema.type, definition=schema.definition)
                await self._schemas.commit(entry.name, body, unless_latest=True)
            else:
                await self._schemas.delete(entry.name)
        elif entry.kind == "topic":
            if action == "create":
                await self._topics.create(entry.message)
            elif action == "update":
                await self._topics.update(entry.message, step.mask)
            else:
                await self._topics.delete(entry.name)
        elif action == "create":
            await self._subs.create(entry.message)
        elif action == "update":
            await self._subs.update(entry.message, step.mask)
        else:
            await self._subs.delete(entry.name)


def shown(message: Message, field: str) -> str:
    """`field` of `message` as its JSON, for an error message."""
    json_name = message.DESCRIPTOR.fields_by_name[field].json_name
    value = json_format.MessageToDict(only(message, field), always_print_fields_with_no_presence=True)
    return quote(json.dumps(value.get(json_name)), 120) if json_name in value else "unset"


def field_named(message: str, entry: Entry[Any]) -> str:
    """The field of `entry` an error message names (by its proto or JSON name), or ""."""
    for field in sorted(entry.named - {"name"}, key=len, reverse=True):
        json_name = entry.message.DESCRIPTOR.fields_by_name[field].json_name
        if re.search(rf"\b({re.escape(field)}|{re.escape(json_name)})\b", message):
            return field
    return ""
