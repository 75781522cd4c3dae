"""Cross-check our hand-written Pub/Sub protos against the official client.

The official ``google-cloud-pubsub`` package carries its own descriptors for
``google.pubsub.v1`` (proto-plus types) plus the REST bindings of every RPC.
Both packages register the same symbols, so they cannot be imported into one
process (duplicate symbol in the default descriptor pool). We therefore:

* read our descriptors straight out of the generated ``*_pb2.py`` files
  (the serialized ``FileDescriptorProto`` literal; nothing is imported), and
* dump the client's descriptors and HTTP rules from a child interpreter.
"""

from __future__ import annotations

import ast
import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.api import annotations_pb2, http_pb2
from google.protobuf import descriptor_pb2

GEN_DIR = Path(__file__).resolve().parents[2] / "gateway" / "_pb" / "google" / "pubsub" / "v1"
PACKAGE = "google.pubsub.v1"

_CLIENT_DUMP = r"""
import base64, importlib, json, pathlib
import google.pubsub_v1 as root
from google.protobuf import descriptor_pb2
from google.pubsub_v1.types import pubsub, schema

files = []
for mod in (schema, pubsub):
    cls = next(
        getattr(mod, n) for n in sorted(mod.__protobuf__.manifest)
        if hasattr(getattr(mod, n), "pb")
    )
    fdp = descriptor_pb2.FileDescriptorProto()
    cls.pb().DESCRIPTOR.file.CopyToProto(fdp)
    files.append(base64.b64encode(fdp.SerializeToString()).decode())

meta = json.loads((pathlib.Path(root.__file__).parent / "gapic_metadata.json").read_text())
http = {}
modules = {"Publisher": "publisher", "Subscriber": "subscriber", "SchemaService": "schema_service"}
for service, body in meta["services"].items():
    rest = importlib.import_module(f"google.pubsub_v1.services.{modules[service]}.transports.rest_base")
    base = getattr(rest, f"_Base{service}RestTransport")
    for rpc in body["clients"]["grpc"]["rpcs"]:
        holder = getattr(base, f"_Base{rpc}", None)
        options = getattr(holder, "_get_http_options", None)
        http[f"{service}.{rpc}"] = options() if options else None
print(json.dumps({"files": files, "http": http}))
"""


def _serialized_descriptor(path: Path) -> bytes:
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
        ):
            literal = node.args[0]
            assert isinstance(literal, ast.Constant) and isinstance(literal.value, bytes)
            return literal.value
    raise AssertionError(f"no serialized descriptor in {path}")


def _ours() -> list[descriptor_pb2.FileDescriptorProto]:
    return [
        descriptor_pb2.FileDescriptorProto.FromString(_serialized_descriptor(GEN_DIR / name))
        for name in ("schema_pb2.py", "pubsub_pb2.py")
    ]


@pytest.fixture(scope="module")
def client_dump() -> dict[str, object]:
    probe = subprocess.run(
        [sys.executable, "-c", "import google.pubsub_v1"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("google-cloud-pubsub is not installed")
    out = subprocess.run([sys.executable, "-c", _CLIENT_DUMP], capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def _client_files(dump: dict[str, object]) -> list[descriptor_pb2.FileDescriptorProto]:
    files = dump["files"]
    assert isinstance(files, list)
    return [descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(f)) for f in files]


def _walk(
    prefix: str, messages: list[descriptor_pb2.DescriptorProto]
) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto]]:
    for msg in messages:
        name = f"{prefix}.{msg.name}"
        yield name, msg
        yield from _walk(name, list(msg.nested_type))


def _messages(
    files: list[descriptor_pb2.FileDescriptorProto],
) -> dict[str, descriptor_pb2.DescriptorProto]:
    return {name: msg for f in files for name, msg in _walk(f".{f.package}", list(f.message_type))}


def _enums(
    files: list[descriptor_pb2.FileDescriptorProto],
) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for f in files:
        scopes = [(f".{f.package}", list(f.enum_type))]
        scopes += [(name, list(m.enum_type)) for name, m in _walk(f".{f.package}", list(f.message_type))]
        for scope, enums in scopes:
            for e in enums:
                out[f"{scope}.{e.name}"] = {v.name: v.number for v in e.value}
    return out


def _field_sig(
    msg: descriptor_pb2.DescriptorProto, f: descriptor_pb2.FieldDescriptorProto
) -> tuple[object, ...]:
    oneof = msg.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None
    return (f.number, f.type, f.label, f.type_name, oneof, f.proto3_optional)


def _client_field_name(f: descriptor_pb2.FieldDescriptorProto) -> str:
    # proto-plus appends "_" to names that clash with Python (e.g. Schema.type).
    return str(f.name).removesuffix("_")


def test_same_package_and_files() -> None:
    assert [f.package for f in _ours()] == [PACKAGE, PACKAGE]
    assert [f.name for f in _ours()] == [
        "google/pubsub/v1/schema.proto",
        "google/pubsub/v1/pubsub.proto",
    ]


def test_every_client_message_and_field_matches(client_dump: dict[str, object]) -> None:
    ours = _messages(_ours())
    theirs = _messages(_client_files(client_dump))
    assert len(theirs) > 50
    problems = [f"missing message {name}" for name in sorted(set(theirs) - set(ours))]
    for name in sorted(set(theirs) & set(ours)):
        our_msg, their_msg = ours[name], theirs[name]
        if our_msg.options.map_entry != their_msg.options.map_entry:
            problems.append(f"{name}: map_entry differs")
        our_fields = {f.name: f for f in our_msg.field}
        our_numbers = {f.number: f.name for f in our_msg.field}
        for tf in their_msg.field:
            fname = _client_field_name(tf)
            if fname not in our_fields:
                problems.append(f"{name}.{fname} (= {tf.number}) missing")
                continue
            got, want = (
                _field_sig(our_msg, our_fields[fname]),
                _field_sig(their_msg, tf),
            )
            if got != want:
                problems.append(f"{name}.{fname}: ours {got} != client {want}")
            if our_numbers.get(tf.number, fname) != fname:
                problems.append(f"{name}: number {tf.number} used by {our_numbers[tf.number]}")
    assert not problems, "\n".join(problems)


def test_every_client_enum_matches(client_dump: dict[str, object]) -> None:
    ours, theirs = _enums(_ours()), _enums(_client_files(client_dump))
    assert len(theirs) > 10
    problems = [
        f"{name}: ours {ours.get(name)} != client {values}"
        for name, values in sorted(theirs.items())
        if ours.get(name) != values
    ]
    assert not problems, "\n".join(problems)


def _http_rules(rule: http_pb2.HttpRule) -> list[dict[str, str]]:
    out = []
    for r in [rule, *rule.additional_bindings]:
        verb = r.WhichOneof("pattern")
        assert verb is not None and verb != "custom"
        entry = {"method": verb, "uri": getattr(r, verb)}
        if r.body:
            entry["body"] = r.body
        out.append(entry)
    return out


def test_rpcs_and_http_bindings_match(client_dump: dict[str, object]) -> None:
    ours: dict[str, list[dict[str, str]] | None] = {}
    for f in _ours():
        for svc in f.service:
            for m in svc.method:
                key = f"{svc.name}.{m.name}"
                has_rule = m.options.HasExtension(annotations_pb2.http)
                ours[key] = _http_rules(m.options.Extensions[annotations_pb2.http]) if has_rule else None
    theirs = client_dump["http"]
    assert isinstance(theirs, dict) and len(theirs) >= 35
    assert sorted(ours) == sorted(theirs)
    mismatched = {k: (ours[k], v) for k, v in theirs.items() if ours[k] != v}
    assert not mismatched


def test_streaming_pull_is_bidi() -> None:
    (pubsub,) = [f for f in _ours() if f.name.endswith("pubsub.proto")]
    (sub,) = [s for s in pubsub.service if s.name == "Subscriber"]
    streaming = {m.name for m in sub.method if m.client_streaming or m.server_streaming}
    (pull,) = [m for m in sub.method if m.name == "StreamingPull"]
    assert streaming == {"StreamingPull"}
    assert pull.client_streaming and pull.server_streaming
