"""What a bootstrap declares, read from --bootstrap-file (YAML or JSON) and --bootstrap's short
form, every entry knowing the line it came from (docs/bootstrap.md).

Reading checks the shape only: keys the API's resources have (the REST/JSON spelling,
`ackDeadlineSeconds`, or the proto one), values of the types those fields take (protobuf's
json_format, with the REST wire's own shape check: `wire/rest_json.py`), resource names
resolved in their project. Whether the values are valid is the core services' question, asked
by `gateway/bootstrap/plan.py` before anything is written.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, cast

import yaml
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from gateway._pb.google.pubsub.v1 import pubsub_pb2, schema_pb2
from gateway.errors import InvalidArgument, quote
from gateway.translate import names, unsupported
from gateway.wire.rest_json import BadRequest, check_shape

Kind = Literal["schema", "topic", "subscription"]
M = TypeVar("M", bound=Message)
MAX_FILE_BYTES = 10 * 1024 * 1024  # a declaration of thousands of resources; schemas' definitions besides
COLLECTIONS: Mapping[Kind, str] = {"schema": "schemas", "topic": "topics", "subscription": "subscriptions"}
# Fields the service sets (or, `tags`, takes on create and never returns): a file naming one
# could never be compared with what is stored, so it is refused rather than ignored.
OUTPUT_ONLY: Mapping[Kind, frozenset[str]] = {
    "topic": frozenset({*unsupported.TOPIC_SCRUBBED, "state"}),
    "subscription": frozenset({*unsupported.SUBSCRIPTION_SCRUBBED, "state"}),
    "schema": frozenset({"revision_id", "revision_create_time"}),
}
DELETE = "delete"
DEFINITION_FILE = "definitionFile"
_PROJECT_KEYS = ("id", "schemas", "topics", "subscriptions")
_PARSE_PREFIX = re.compile(r"^(Failed to parse \w+ field: )+")


class BootstrapError(InvalidArgument):
    """The declaration cannot be applied: the message names where (file and line) and why.
    Raised before anything is written; `pubsub-gateway serve` then cannot start (status 1)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Where:
    """Where an entry, or one of its fields, was declared."""

    source: str  # "--bootstrap-file FILE", or "--bootstrap 'ENTRY'"
    line: int | None = None  # from 1
    item: str = ""  # in the short form: the item ("TOPIC:SUB") of the entry

    def at(self, line: int | None) -> Where:
        return dataclasses.replace(self, line=line)

    def __str__(self) -> str:
        if self.line is not None:
            return f"{self.source}, line {self.line}"
        return f"{self.source}, item {self.item!r}" if self.item else self.source


def error(where: Where, problem: str) -> BootstrapError:
    return BootstrapError(f"{where}: {problem}")


@dataclasses.dataclass(frozen=True, slots=True)
class Entry(Generic[M]):
    """One resource the declaration names: what it must hold, or that it must go (`delete`)."""

    kind: Kind
    name: str  # the full resource name
    where: Where  # the entry's first line
    message: M  # the fields the entry gives, names resolved (a Topic, a Subscription, a Schema)
    named: frozenset[str]  # the proto names of the top-level fields the entry names (null: cleared)
    lines: Mapping[str, int]  # field (proto name) -> its line
    delete: bool = False

    def where_of(self, field: str) -> Where:
        return self.where.at(self.lines.get(field, self.where.line))

    def joined(self, other: Entry[M]) -> Entry[M] | None:
        """One entry declaring what both do (a topic named by the short form and given its
        settings in the file), or None when they disagree on a field or one deletes."""
        if self.delete or other.delete:
            return self if self.delete and other.delete else None
        if any(differs(self.message, other.message, f) for f in self.named & other.named):
            return None
        message = type(self.message)()
        message.CopyFrom(self.message)
        for field in other.named - self.named:
            message.MergeFrom(only(other.message, field))
        lines = {**other.lines, **self.lines}
        return dataclasses.replace(self, message=message, named=self.named | other.named, lines=lines)


@dataclasses.dataclass(frozen=True, slots=True)
class Declaration:
    schemas: tuple[Entry[schema_pb2.Schema], ...] = ()
    topics: tuple[Entry[pubsub_pb2.Topic], ...] = ()
    subscriptions: tuple[Entry[pubsub_pb2.Subscription], ...] = ()

    def __len__(self) -> int:
        return len(self.entries())

    def entries(self, kind: Kind | None = None) -> tuple[Entry[Any], ...]:
        """The entries of `kind` (every kind's: schemas, topics, subscriptions)."""
        every: dict[Kind, tuple[Entry[Any], ...]] = {
            "schema": self.schemas,
            "topic": self.topics,
            "subscription": self.subscriptions,
        }
        return every[kind] if kind is not None else tuple(e for k in every.values() for e in k)

    def __add__(self, other: Declaration) -> Declaration:
        return Declaration(
            self.schemas + other.schemas,
            self.topics + other.topics,
            self.subscriptions + other.subscriptions,
        )


def load(file: Path | None, short_forms: Sequence[str]) -> Declaration:
    """Everything --bootstrap-file and --bootstrap declare; a resource declared twice (other
    than the same way twice) is refused, naming both places."""
    out = read_file(file) if file is not None else Declaration()
    for text in short_forms:
        out = out + short_form(text)
    return Declaration(_once(out.schemas), _once(out.topics), _once(out.subscriptions))


def _once(entries: tuple[Entry[M], ...]) -> tuple[Entry[M], ...]:
    seen: dict[str, Entry[M]] = {}
    for entry in entries:
        first = seen.setdefault(entry.name, entry)
        if first is entry:
            continue
        joined = first.joined(entry)
        if joined is None:
            raise error(entry.where, f"the {entry.kind} {entry.name} is declared otherwise at {first.where}")
        seen[entry.name] = joined
    return tuple(seen.values())


def only(message: M, field: str) -> M:
    """A copy of `message` holding `field` alone."""
    out = type(message)()
    out.CopyFrom(message)
    for other in out.DESCRIPTOR.fields:
        if other.name != field:
            out.ClearField(other.name)
    return out


def differs(a: Message, b: Message, field: str) -> bool:
    """Whether two messages of one type hold different values of `field` (of any kind)."""
    return only(a, field) != only(b, field)


# -- the short form ------------------------------------------------------------------------------


def short_form(text: str) -> Declaration:
    """`PROJECT,TOPIC[:SUBSCRIPTION...][,TOPIC...]`, the form community emulator images read
    from PUBSUB_PROJECT1, ...: topics and their pull subscriptions, by id, with the API's
    defaults. Spaces around the items are ignored."""
    where = Where(f"--bootstrap {text.strip()!r}")
    project, *items = (item.strip() for item in text.split(","))
    if not names.valid_project(project):
        raise error(where, f"{quote(project)!r} is not a project id (PROJECT,TOPIC[:SUBSCRIPTION...],...)")
    topics: list[Entry[pubsub_pb2.Topic]] = []
    subs: list[Entry[pubsub_pb2.Subscription]] = []
    for item in items:
        if not item:
            continue
        at = dataclasses.replace(where, item=item)
        if "+" in item:  # an id may hold a `+`, but here it would be some images' push endpoint
            raise error(at, "a push subscription (SUBSCRIPTION+ENDPOINT) is declared in --bootstrap-file")
        topic_id, *sub_ids = (part.strip() for part in item.split(":"))
        topic = _resolve(project, "topic", topic_id, at)
        topics.append(Entry("topic", topic, at, pubsub_pb2.Topic(name=topic), frozenset({"name"}), {}))
        for sub_id in sub_ids:
            sub = _resolve(project, "subscription", sub_id, at)
            message = pubsub_pb2.Subscription(name=sub, topic=topic)
            subs.append(Entry("subscription", sub, at, message, frozenset({"name", "topic"}), {}))
    if not topics:
        raise error(where, "it names no topic (PROJECT,TOPIC[:SUBSCRIPTION...],...)")
    return Declaration((), tuple(topics), tuple(subs))


def _resolve(project: str, kind: Kind, value: str, where: Where) -> str:
    """A resource id in `project`, or a full name (`projects/P/topics/T`) as it is; validated."""
    name = value if "/" in value else f"projects/{project}/{COLLECTIONS[kind]}/{value}"
    try:
        names.parse(name, COLLECTIONS[kind])
    except InvalidArgument as exc:
        raise error(where, exc.message) from None
    return name


# -- the file --------------------------------------------------------------------------------------


class _Located(dict[str, Any]):
    """A YAML mapping, with the line of its start and of each key."""

    line: int
    lines: dict[str, int]


class _Loader(yaml.SafeLoader):
    """YAML (JSON too) whose mappings are _Located; a key given twice is refused (PyYAML
    would keep the last silently)."""


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> _Located:
    loader.flatten_mapping(node)
    out = _Located()
    out.line, out.lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise _YamlProblem(line, f"the key {quote(key)!r} is not text")
        if key in out:
            raise _YamlProblem(line, f"{key!r} is given twice (also at line {out.lines[key]})")
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


class _YamlProblem(Exception):
    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line, self.problem = line, problem


def read_file(path: Path) -> Declaration:
    where = Where(f"--bootstrap-file {path}")
    try:
        raw = path.read_bytes()
        if len(raw) > MAX_FILE_BYTES:
            raise error(where, f"it holds {len(raw)} bytes; at most {MAX_FILE_BYTES} are read")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(where, f"cannot read it ({exc})") from None
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except _YamlProblem as exc:
        raise error(where.at(exc.line), exc.problem) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise error(where.at(line), f"not YAML or JSON: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise error(where, f"not YAML or JSON: {exc}") from None
    if doc is None:
        return Declaration()
    if not isinstance(doc, _Located):
        raise error(where.at(1), "the file holds a mapping: `projects:`, a list of projects")
    _only_keys(doc, ("projects",), where)
    out = Declaration()
    for project in _list(doc, "projects", where):
        out = out + _project(project, where, path.parent)
    return out


def _only_keys(raw: _Located, allowed: Sequence[str], where: Where, what: str = "") -> None:
    for key in raw:
        if key not in allowed:
            listed = ", ".join(allowed)
            raise error(where.at(raw.lines[key]), f"unknown key {key!r}{what}; the keys are {listed}")


def _list(raw: _Located, key: str, where: Where) -> list[_Located]:
    value = raw.get(key)
    if value is None:
        return []
    at = where.at(raw.lines[key])
    if not isinstance(value, list):
        raise error(at, f"{key} holds a list")
    for item in value:
        if not isinstance(item, _Located):
            raise error(at, f"each item of {key} is a mapping, not {quote(item)!r}")
    return value


def _project(raw: _Located, where: Where, base: Path) -> Declaration:
    at = where.at(raw.line)
    _only_keys(raw, _PROJECT_KEYS, where, " in a project")
    project = raw.get("id")
    if not isinstance(project, str) or not names.valid_project(project):
        raise error(at, f"a project needs its id (`id: my-project`), got {quote(project)!r}")
    return Declaration(
        tuple(_entry("schema", item, project, where, base) for item in _list(raw, "schemas", where)),
        tuple(_entry("topic", item, project, where, base) for item in _list(raw, "topics", where)),
        tuple(
            _entry("subscription", item, project, where, base) for item in _list(raw, "subscriptions", where)
        ),
    )


_CLASSES: Mapping[Kind, type[Message]] = {
    "schema": schema_pb2.Schema,
    "topic": pubsub_pb2.Topic,
    "subscription": pubsub_pb2.Subscription,
}


def _entry(kind: Kind, raw: _Located, project: str, where: Where, base: Path) -> Entry[Any]:
    at = where.at(raw.line)
    delete = raw.get(DELETE, False)
    if not isinstance(delete, bool):
        raise error(where.at(raw.lines[DELETE]), "delete is true or false")
    value = raw.get("name")
    if not isinstance(value, str) or not value:
        raise error(at, f"each {kind} needs its name (`name: my-{kind}`)")
    lines: dict[str, int] = {"name": raw.lines["name"]}
    name = _resolve(project, kind, value, where.at(lines["name"]))
    if not name.startswith(f"projects/{project}/"):
        raise error(where.at(raw.lines["name"]), f"{name} is not in the project {project}")
    if delete:
        _only_keys(raw, ("name", DELETE), where, f" of a {kind} to delete (it names the {kind} only)")
        return Entry(kind, name, at, _CLASSES[kind](name=name), frozenset({"name"}), lines, delete=True)
    message = _CLASSES[kind](name=name)
    descriptor = cast(Descriptor, message.DESCRIPTOR)
    named: set[str] = set()
    for key, item in raw.items():
        line = raw.lines[key]
        if key == DELETE or key == "name":
            continue
        if kind == "schema" and key == DEFINITION_FILE:
            key, item = "definition", _definition(item, base, where.at(line))
        field = _field(descriptor, key)
        if field is None:
            known = ", ".join(f.json_name for f in descriptor.fields if f.name not in OUTPUT_ONLY[kind])
            raise error(where.at(line), f"a {kind} has no field {key!r}; its fields are {known}")
        if field.name in OUTPUT_ONLY[kind]:
            raise error(where.at(line), f"{key} is set by the service, not by a request: leave it out")
        if field.name in named and kind == "schema" and field.name == "definition":
            raise error(where.at(line), f"give definition or {DEFINITION_FILE}, not both")
        if field.name in named:  # the JSON and the proto spelling of one field
            raise error(where.at(line), f"{key} is given twice (also at line {lines[field.name]})")
        named.add(field.name)
        lines[field.name] = line
        if item is not None:  # null: named, to be cleared
            _merge(message, field, key, item, where.at(line), f"{kind}.{key}")
    _resolve_references(kind, message, project, named, lines, where)
    return Entry(kind, name, at, message, frozenset(named | {"name"}), lines)


def _definition(value: object, base: Path, where: Where) -> str:
    if not isinstance(value, str) or not value:
        raise error(where, f"{DEFINITION_FILE} is the path of a file (relative to this one)")
    path = base / value
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(where, f"cannot read {DEFINITION_FILE} {path} ({exc})") from None


def _field(descriptor: Descriptor, key: str) -> FieldDescriptor | None:
    for field in descriptor.fields:
        if key in (field.json_name, field.name):
            return field
    return None


def _merge(
    message: Message, field: FieldDescriptor, key: str, value: object, where: Where, path: str
) -> None:
    """`value`, the JSON of `field` (spelt `key`), into `message`; a mapping for a message
    field is taken key by key, so that an error names the line of the key at fault."""
    sub = field.message_type
    nested = sub is not None and not field.is_repeated and not sub.full_name.startswith("google.protobuf.")
    if nested and isinstance(value, _Located):
        target = getattr(message, field.name)
        target.SetInParent()  # `{}` is a message present, with every field at its default
        for sub_key, item in value.items():
            at = where.at(value.lines[sub_key])
            sub_field = _field(target.DESCRIPTOR, sub_key)
            if sub_field is None:
                known = ", ".join(f.json_name for f in target.DESCRIPTOR.fields)
                raise error(at, f"{path} has no field {sub_key!r}; its fields are {known}")
            if item is not None:
                _merge(target, sub_field, sub_key, item, at, f"{path}.{sub_key}")
        return
    _check_json(value, where, path)
    try:
        check_shape({key: value}, cast(Descriptor, message.DESCRIPTOR), path.rsplit(".", 1)[0])
        json_format.ParseDict({key: value}, message)
    except BadRequest as exc:
        raise error(where, exc.message.removeprefix("Invalid JSON payload received. ")) from None
    except (json_format.ParseError, ValueError, TypeError) as exc:
        detail = _PARSE_PREFIX.sub("", str(exc).split("\n", 1)[0]).rstrip(".")
        raise error(where, f"{path}: {detail[:300]}") from None


def _check_json(value: object, where: Where, path: str) -> None:
    """YAML has values JSON has not (dates, binary, sets): the API's fields take none of them."""
    if isinstance(value, dict):
        for item in value.values():
            _check_json(item, where, path)
    elif isinstance(value, list):
        for item in value:
            _check_json(item, where, path)
    elif isinstance(value, datetime.date | bytes | set):
        raise error(where, f"{path}: {quote(value)!r} is a YAML {type(value).__name__}: quote it as text")


def _resolve_references(
    kind: Kind, message: Message, project: str, named: set[str], lines: Mapping[str, int], where: Where
) -> None:
    """Short ids in the fields that name other resources, resolved in the entry's project."""
    if isinstance(message, pubsub_pb2.Subscription):
        if "topic" not in named or not message.topic:
            raise error(where.at(lines["name"]), "a subscription needs its topic (`topic: my-topic`)")
        message.topic = _resolve(project, "topic", message.topic, where.at(lines["topic"]))
        dead = message.dead_letter_policy
        if dead.dead_letter_topic:
            at = where.at(lines.get("dead_letter_policy"))
            dead.dead_letter_topic = _resolve(project, "topic", dead.dead_letter_topic, at)
    elif isinstance(message, pubsub_pb2.Topic) and message.schema_settings.schema:
        at = where.at(lines.get("schema_settings"))
        message.schema_settings.schema = _resolve(project, "schema", message.schema_settings.schema, at)
