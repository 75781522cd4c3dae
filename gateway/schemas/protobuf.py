"""Protocol Buffer schemas: a definition is the text of one `.proto` file (proto2 or proto3, as
Pub/Sub supports) that defines exactly one top-level type, a message, and imports nothing
("you must define only one top-level type. Import statements that reference other types are not
supported"). A message is that type in the protobuf wire format, or in protobuf's JSON mapping.

The definition is compiled by protoc, the one bundled with grpcio-tools, into a
FileDescriptorSet, which is loaded into a descriptor pool of the schema's own: never protobuf's
default pool, where the official client registers `google.pubsub.v1`, nor the gateway's
(gateway/_pb/_pool.py), so a user's `message Topic` in `package google.pubsub.v1` harms no one.

protoc runs as a subprocess (`python -m grpc_tools.protoc`, ~50 ms): its diagnostics go to its
stderr, which an in-process call would write to the gateway's; a crash or a hang on hostile
input ends it, not the gateway; and it is bounded in time. Callers on the event loop run
`compile_proto` in an executor.

Binary validation follows protobuf's own parsers: fields of numbers the schema does not have
are kept as unknown fields and accepted (a publisher on a newer revision of the message stays
valid); but a field the schema has, sent with another wire type (a string written as a varint),
is refused, as are malformed data, a proto2 message missing a required field, and anything
nested deeper than protobuf's limit (100). JSON validation is `json_format.Parse`: unknown
fields and values of the wrong type are refused.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from gateway.errors import Unavailable
from gateway.schemas.model import Encoding, SchemaError, SchemaType, check_size, fingerprint

PROTOC_TIMEOUT_S = 30.0
_FILE = "schema.proto"
_OUT = "schema.desc"
# protoc's own log lines (abseil), e.g. the warning that a file names no syntax: not errors.
_LOG_LINE = re.compile(r"^(WARNING: All log messages before absl|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ )")
_POSITION = re.compile(rf"^{re.escape(_FILE)}:(\d+):(\d+): ")
_MAX_DIAGNOSTICS = 600
_SYNTAXES = ("", "proto2", "proto3")  # "" is proto2 without a syntax statement


@dataclass(frozen=True, slots=True)
class ProtoSchema:
    """A compiled Protocol Buffer definition. `root_message` (the full name of its one message)
    and `descriptor_set` (the serialized FileDescriptorSet) are what a subscriber needs to decode
    its messages without protoc."""

    fingerprint: str
    root_message: str
    descriptor_set: bytes = field(repr=False)
    message_class: type[Message] = field(repr=False, compare=False)
    # Whether any message of the file has a required field (proto2): if none does, no message can
    # miss one, and validation skips IsInitialized (~1 us of the ~6 us a 1 KiB message takes).
    has_required: bool = field(default=True, repr=False, compare=False)

    @property
    def type(self) -> SchemaType:
        return SchemaType.PROTOCOL_BUFFER

    def validate(self, data: bytes, encoding: Encoding) -> None:
        """Return if `data` is a `root_message` in `encoding`; raise `SchemaError` saying why not."""
        encoding = Encoding.of(encoding)
        message = self.message_class()
        try:
            if encoding is Encoding.BINARY:
                message.ParseFromString(data)
                problem = self._wrong_wire_type(message, data)
            else:
                problem = _parse_json(data.decode("utf-8"), message)
        except DecodeError:
            problem = "the data is not a message in the protobuf wire format (truncated or malformed)"
        except UnicodeDecodeError:
            problem = "the message is not UTF-8 text"
        except json_format.ParseError as exc:
            problem = " ".join(str(exc).split()).rstrip(".")
        except RecursionError:
            problem = "the message is nested too deeply"
        if problem is None and self.has_required and not message.IsInitialized():
            missing: list[str] = message.FindInitializationErrors()  # type: ignore[attr-defined]  # not in the stubs
            problem = f"required fields are missing: {', '.join(missing)}"
        if problem is not None:
            raise SchemaError(
                f"Invalid Protocol Buffer {encoding.name} message ({self.root_message}): {problem}."
            )

    def _wrong_wire_type(self, message: Message, data: bytes) -> str | None:
        """Walking every submessage for unknown fields costs ~15x the parse, so first ask
        whether there are any: serialized, they are kept verbatim, so the size shrinks when they
        are discarded. Only then walk a fresh parse (`message` has lost them)."""
        size = len(message.SerializePartialToString())  # ByteSize() refuses missing required fields
        message.DiscardUnknownFields()
        if len(message.SerializePartialToString()) == size:
            return None
        return _wrong_wire_type(self.message_class.FromString(data), "")


def _parse_json(text: str, message: Message) -> str | None:
    """`json_format.Parse` into `message`; it takes a JSON array as an empty message, so the
    value must first be an object."""
    if not text.lstrip(" \t\r\n").startswith("{"):
        return "the message must be a JSON object"
    json_format.Parse(text, message)
    return None


def _wrong_wire_type(message: Message, path: str) -> str | None:
    """The first field the schema knows that arrived with another wire type (protobuf keeps
    it as an unknown field), anywhere in `message`; None if there is none."""
    descriptor = message.DESCRIPTOR
    unknowns = UnknownFieldSet(message)
    for index in range(len(unknowns)):  # the stubs know no __iter__
        unknown = unknowns[index]
        known = descriptor.fields_by_number.get(unknown.field_number)
        if known is not None:
            return (
                f"field {path}{known.name} (number {unknown.field_number}) arrived with wire type "
                f"{unknown.wire_type}, which a field of type {_type_name(known)} never has"
            )
    for field_descriptor, value in message.ListFields():
        nested = field_descriptor.message_type
        if nested is None:
            continue
        name = f"{path}{field_descriptor.name}"
        if nested.GetOptions().map_entry:
            if nested.fields_by_name["value"].message_type is not None:
                items = [(f"{name}[{key!r}].", item) for key, item in value.items()]
            else:
                items = []
        elif field_descriptor.is_repeated:
            items = [(f"{name}[{index}].", item) for index, item in enumerate(value)]
        else:
            items = [(f"{name}.", value)]
        for item_path, item in items:
            problem = _wrong_wire_type(item, item_path)
            if problem is not None:
                return problem
    return None


def _type_name(descriptor: FieldDescriptor | Any) -> str:
    return descriptor_pb2.FieldDescriptorProto.Type.Name(descriptor.type).removeprefix("TYPE_").lower()  # type: ignore[arg-type]


def compile_proto(definition: str) -> ProtoSchema:
    """Compile `definition`; raise `SchemaError` naming what is wrong (protoc's own words for
    what does not compile), or `Unavailable` if protoc does not finish in time."""
    raw = check_size(definition)
    file = _single_file(_run_protoc(raw))
    if file.dependency:
        raise SchemaError(
            f"Invalid Protocol Buffer schema: imports are not supported (it imports "
            f"{', '.join(file.dependency)}); define every type the message uses inside it."
        )
    if file.syntax not in _SYNTAXES:
        raise SchemaError(
            f"Invalid Protocol Buffer schema: only proto2 and proto3 are supported, not {file.syntax}."
        )
    others = [f"enum {e.name}" for e in file.enum_type] + [f"service {s.name}" for s in file.service]
    others += [f"extension {x.name}" for x in file.extension]
    if len(file.message_type) != 1 or others:
        found = [f"message {m.name}" for m in file.message_type] + others
        raise SchemaError(
            "Invalid Protocol Buffer schema: it must define exactly one top-level type, a message "
            f"(nest the others inside it); found {', '.join(found) or 'none'}."
        )
    root = f"{file.package}.{file.message_type[0].name}" if file.package else file.message_type[0].name
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(file.SerializeToString())
    message_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(root))
    descriptor_set = descriptor_pb2.FileDescriptorSet(file=[file]).SerializeToString()
    return ProtoSchema(
        fingerprint(SchemaType.PROTOCOL_BUFFER, definition),
        root,
        descriptor_set,
        message_class,
        _has_required(file.message_type),
    )


def _has_required(messages: Iterable[descriptor_pb2.DescriptorProto]) -> bool:
    """Whether a field of these messages, or of the messages nested in them, is `required`."""
    pending = list(messages)
    while pending:  # not recursive: protoc does not bound how deep messages nest
        message = pending.pop()
        if any(f.label == descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED for f in message.field):
            return True
        pending.extend(message.nested_type)
    return False


def _run_protoc(source: bytes) -> bytes:
    """protoc's FileDescriptorSet for `source`. `-P`: the temporary directory protoc runs in is
    not put on the subprocess's module path."""
    with tempfile.TemporaryDirectory(prefix="pubsub-schema-") as tmp:
        Path(tmp, _FILE).write_bytes(source)
        command = [
            sys.executable,
            "-P",
            "-m",
            "grpc_tools.protoc",
            "--proto_path=.",
            f"--descriptor_set_out={_OUT}",
            _FILE,
        ]
        try:
            done = subprocess.run(
                command, cwd=tmp, capture_output=True, timeout=PROTOC_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise Unavailable(
                f"Compiling the Protocol Buffer schema took over {PROTOC_TIMEOUT_S:.0f} s; try again."
            ) from None
        if done.returncode != 0:
            raise SchemaError(f"Invalid Protocol Buffer schema: {_diagnostics(done.stderr, done.returncode)}")
        return Path(tmp, _OUT).read_bytes()


def _diagnostics(stderr: bytes, returncode: int) -> str:
    """protoc's error lines, positions as `line L, column C`, log lines dropped, bounded."""
    lines = [
        _POSITION.sub(lambda m: f"line {m[1]}, column {m[2]}: ", line.strip())
        for line in stderr.decode("utf-8", "replace").splitlines()
        if line.strip() and not _LOG_LINE.match(line)
    ]
    text = "; ".join(lines) or f"protoc failed (exit status {returncode})"
    return text if len(text) <= _MAX_DIAGNOSTICS else text[: _MAX_DIAGNOSTICS - 1] + "\u2026"


def _single_file(blob: bytes) -> descriptor_pb2.FileDescriptorProto:
    files = descriptor_pb2.FileDescriptorSet.FromString(blob).file
    if len(files) != 1:  # without --include_imports protoc writes the one file asked for
        raise SchemaError(f"Invalid Protocol Buffer schema: protoc produced {len(files)} files.")
    return files[0]
