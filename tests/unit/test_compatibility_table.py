"""docs/compatibility.md against the protos and the servicers the gateway registers.

What this checks, without a broker:

- every method of every service in the gateway's generated modules (gateway/_pb/**/*_pb2.py) and
  of google.iam.v1.IAMPolicy has exactly one row, and every row names a method that exists;
- every status is served, differs or refused; a differs or refused row says why, and a refused
  one names the gRPC code it gets;
- the handlers gRPC would run: gateway/server.py calls `grpc_api.add_to_server` and the early
  API's `add_to_server` (read from its source; no other module registers a service but the
  health service). Both are called here on a recording server, with servicers built on nothing.
  A served or differs method must get a handler bound to the gateway's own servicer, not the
  generated base class's default (which answers UNIMPLEMENTED); a refused one must get none, and
  a real grpc.aio server with the same registrations, on loopback, answers it with the code the
  row names (UNIMPLEMENTED: the gateway's interceptor passes unknown methods through,
  gateway/observe/rpc.py);
- the REST column matches the routes of `gateway.wire.rest.RestApi`, built as gateway/server.py
  builds it, and each route calls the gateway's own method;
- the features table: statuses and reasons as above; every row links a doc page, and the heading
  its anchor names, that exist; the refused features, and the notes of CreateTopic and
  CreateSubscription, name exactly the fields gateway/translate/unsupported.py refuses.

What it cannot check: that an RPC marked served behaves as Pub/Sub's does, or that a note is
right. The e2e and conformance tiers test the behaviour; the notes are for people to keep true.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pathlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any, cast

import grpc
import pytest
from google.iam.v1 import iam_policy_pb2
from google.protobuf.descriptor import ServiceDescriptor

import gateway
from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.legacy import servicers as legacy_servicers
from gateway.translate import unsupported
from gateway.wire import grpc_api, grpc_schemas, rest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGE = DOCS / "compatibility.md"
STATUSES = ("served", "differs", "refused")
CODES = frozenset(code.name for code in grpc.StatusCode if code is not grpc.StatusCode.OK)
SERVICE_CELL = re.compile(r"`([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*\.[A-Z]\w*)`")
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#([^)\s]+))?\)")
# The calls that put services on the gateway's gRPC server, by module (gateway/server.py's two
# and the health service, which is not part of the Pub/Sub API): a new one must come here and
# to the page.
REGISTRATIONS = {
    ("gateway/server.py", "grpc_api.add_to_server"),
    ("gateway/server.py", "legacy_servicers.add_to_server"),
    ("gateway/observe/health.py", "health_pb2_grpc.add_HealthServicer_to_server"),
}


@dataclasses.dataclass(frozen=True)
class Rpc:
    service: str
    method: str
    status: str
    rest: str
    note: str


@dataclasses.dataclass(frozen=True)
class Feature:
    feature: str
    status: str
    what: str
    more: str


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def rpc_rows() -> list[Rpc]:
    """The rows of the RPC tables: those whose first cell is a backquoted service name."""
    out = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        named = SERVICE_CELL.fullmatch(cells[0])
        if named is None:
            continue
        assert len(cells) == 5, f"an RPC row has 5 cells (service, method, status, REST, note): {line}"
        out.append(Rpc(named.group(1), cells[1].strip("`"), cells[2], cells[3], cells[4]))
    return out


def feature_rows() -> list[Feature]:
    """The rows of the table under `## Features`."""
    lines = PAGE.read_text(encoding="utf-8").split("\n## Features\n", 1)[1].split("\n## ", 1)[0]
    rows = [_cells(line) for line in lines.splitlines() if line.startswith("|")]
    assert rows[0] == ["feature", "status", "what the gateway does", "more"], rows[0]
    out = []
    for cells in rows[2:]:  # after the header and its rule
        assert len(cells) == 4, f"a feature row has 4 cells: {cells}"
        out.append(Feature(*cells))
    return out


def generated_modules() -> list[ModuleType]:
    """Every generated `_pb2` module of the gateway, and IAM's, which the gateway serves."""
    pb = importlib.import_module("gateway._pb")
    found = [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(pb.__path__, "gateway._pb.")
        if info.name.endswith("_pb2")
    ]
    return [*found, iam_policy_pb2]


def services() -> dict[str, tuple[ServiceDescriptor, ModuleType]]:
    """Full service name -> (descriptor, the `_pb2` module that defines it)."""
    out: dict[str, tuple[ServiceDescriptor, ModuleType]] = {}
    for module in generated_modules():
        for desc in module.DESCRIPTOR.services_by_name.values():
            out[desc.full_name] = (desc, module)
    return out


def generated_base(full_name: str) -> type:
    """The generated servicer base class of a service, whose methods answer UNIMPLEMENTED."""
    desc, module = services()[full_name]
    grpc_module = importlib.import_module(module.__name__ + "_grpc")
    base: type = getattr(grpc_module, f"{desc.name}Servicer")
    return base


def methods() -> set[tuple[str, str]]:
    return {(name, m.name) for name, (desc, _) in services().items() for m in desc.methods}


class RecordingServer:
    """What `grpc_api.register` asks of a server, recording the handlers of each service."""

    def __init__(self) -> None:
        self.handlers: dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        assert service not in self.handlers, f"{service} registered twice"
        self.handlers[service] = dict(handlers)


@dataclasses.dataclass(frozen=True)
class V1Servicers:
    publisher: grpc_api.Publisher
    subscriber: grpc_api.Subscriber
    iam: grpc_api.IamPolicy
    schemas: grpc_schemas.Schemas


def v1_servicers() -> V1Servicers:
    """The servicers gateway/server.py builds, on nothing: their constructors only keep what
    they are given, and no call is made here."""
    nothing = cast(Any, None)
    return V1Servicers(
        grpc_api.Publisher(nothing, nothing, nothing, nothing),
        grpc_api.Subscriber(nothing, nothing, nothing, nothing),
        grpc_api.IamPolicy(nothing, nothing),
        grpc_schemas.Schemas(nothing, nothing),
    )


def register_all(server: grpc.aio.Server) -> None:
    """What gateway/server.py registers on its gRPC server (test_server_registers_these)."""
    v1 = v1_servicers()
    grpc_api.add_to_server(server, v1.publisher, v1.subscriber, v1.iam, v1.schemas)
    legacy_servicers.add_to_server(server, cast(Any, None), cast(Any, SimpleNamespace(names=None)))


def registered() -> dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]]:
    recorder = RecordingServer()
    register_all(cast(grpc.aio.Server, recorder))
    return recorder.handlers


def behaviour(handler: grpc.RpcMethodHandler[Any, Any]) -> Callable[..., object]:
    """The function a handler runs, whichever of the four kinds it is."""
    kinds = (handler.unary_unary, handler.unary_stream, handler.stream_unary, handler.stream_stream)
    [fn] = [k for k in kinds if k is not None]
    return cast(Callable[..., object], fn)


def is_own(service: str, method: str, fn: Callable[..., object]) -> bool:
    """Whether `fn` is a method of one of the gateway's servicers, not a generated default."""
    owner = getattr(fn, "__self__", None)
    if owner is None:
        return False
    module = type(owner).__module__
    mine = module.startswith("gateway.") and not module.startswith("gateway._pb.")
    return mine and getattr(fn, "__func__", None) is not getattr(generated_base(service), method, None)


def _calls(path: pathlib.Path) -> Iterator[str]:
    """The dotted names of the calls in a module's source (`grpc_api.add_to_server`)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            yield ast.unparse(node.func)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def anchors(doc: pathlib.Path) -> set[str]:
    out, fenced = set(), False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def test_every_rpc_is_listed_once_and_nothing_else() -> None:
    rows = rpc_rows()
    listed = [(r.service, r.method) for r in rows]
    twice = sorted({key for key in listed if listed.count(key) > 1})
    assert twice == [], f"listed twice in docs/compatibility.md: {twice}"
    assert sorted(methods() - set(listed)) == [], "RPCs missing from docs/compatibility.md"
    assert sorted(set(listed) - methods()) == [], "docs/compatibility.md lists RPCs the protos lack"


def test_statuses_and_reasons() -> None:
    for row in rpc_rows():
        assert row.status in STATUSES, row
        assert row.rest in ("yes", "no"), row
        if row.status != "served":
            assert row.note, f"{row.service}.{row.method} is {row.status}: the note must say why"
        if row.status == "refused":
            assert CODES & set(re.findall(r"[A-Z_]{5,}", row.note)), f"name the code: {row}"
    for feature in feature_rows():
        assert feature.status in STATUSES, feature
        if feature.status != "served":
            assert feature.what, f"{feature.feature} is {feature.status}: say why"
        if feature.status == "refused":
            assert CODES & set(re.findall(r"[A-Z_]{5,}", feature.what)), f"name the code: {feature}"


def test_server_registers_these() -> None:
    """The registrations register_all repeats are the ones the gateway makes, and the only ones."""
    package = pathlib.Path(gateway.__file__).parent
    found = {
        (path.relative_to(ROOT).as_posix(), call)
        for path in package.rglob("*.py")
        if "_pb" not in path.relative_to(package).parts
        for call in _calls(path)
        if call.endswith("_to_server") and "." in call
    }
    assert found == REGISTRATIONS


def test_served_rpcs_have_the_gateways_own_handler() -> None:
    handlers = registered()
    for row in rpc_rows():
        handler = handlers.get(row.service, {}).get(row.method)
        if row.status == "refused":
            assert handler is None, f"{row.service}.{row.method} is marked refused but registered"
            continue
        assert handler is not None, f"{row.service}.{row.method} is marked {row.status} but not registered"
        assert is_own(row.service, row.method, behaviour(handler)), (
            f"{row.service}.{row.method} runs the generated default (UNIMPLEMENTED)"
        )


def test_rest_column_matches_the_routes() -> None:
    v1 = v1_servicers()
    servicers = [v1.publisher, v1.subscriber, v1.iam, v1.schemas]
    api = rest.RestApi({s.SERVICE: s for s in servicers}, body_timeout=1.0)
    for name, call in api.calls.items():
        service, method = name.rsplit(".", 1)
        assert is_own(service, method, call), f"REST {name} runs the generated default"
    on_rest = {tuple(name.rsplit(".", 1)) for name in api.calls}
    for row in rpc_rows():
        assert ((row.service, row.method) in on_rest) == (row.rest == "yes"), (
            f"{row.service}.{row.method}: REST {row.rest}"
        )


async def test_refused_rpcs_answer_with_the_code_the_page_names() -> None:
    refused = [r for r in rpc_rows() if r.status == "refused"]
    handlers = registered()
    for row in refused:  # a registered one would run its handler, on nothing
        assert row.method not in handlers.get(row.service, {}), f"{row.service}.{row.method} is registered"
    server = grpc.aio.server()
    register_all(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            for row in refused:
                call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                    f"/{row.service}/{row.method}"
                )
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call(b"", timeout=10)
                assert err.value.code().name in row.note, (row, err.value.code())
    finally:
        await server.stop(None)


def test_features_link_pages_and_headings_that_exist() -> None:
    for feature in feature_rows():
        links = LINK.findall(feature.more)
        assert links, f"{feature.feature}: link the page that says more"
        for target, anchor in links:
            doc = (DOCS / target).resolve()
            assert doc.is_file(), f"{feature.feature}: {target} does not exist"
            if anchor:
                assert anchor in anchors(doc), f"{feature.feature}: {target} has no heading #{anchor}"


def test_links_in_rpc_notes_resolve() -> None:
    for row in rpc_rows():
        for target, anchor in LINK.findall(row.note):
            doc = (DOCS / target).resolve()
            assert doc.is_file(), f"{row.service}.{row.method}: {target} does not exist"
            if anchor:
                assert anchor in anchors(doc), f"{row.service}.{row.method}: {target} has no #{anchor}"


def test_refused_features_are_the_refused_fields() -> None:
    """The fields named in refused features are those unsupported.py refuses, and every one is."""
    fields = {f.name for f in pubsub_pb2.Topic.DESCRIPTOR.fields} | {
        f.name for f in pubsub_pb2.Subscription.DESCRIPTOR.fields
    }
    named = {
        name
        for feature in feature_rows()
        if feature.status == "refused"
        for name in re.findall(r"`([a-z_]+)`", feature.what)
        if name in fields
    }
    assert named == set(unsupported.TOPIC_REFUSED) | set(unsupported.SUBSCRIPTION_REFUSED)


def test_create_notes_name_the_refused_fields() -> None:
    notes = {(r.service, r.method): r.note for r in rpc_rows()}
    for method, refused in (
        ("google.pubsub.v1.Publisher.CreateTopic", unsupported.TOPIC_REFUSED),
        ("google.pubsub.v1.Subscriber.CreateSubscription", unsupported.SUBSCRIPTION_REFUSED),
    ):
        service, name = method.rsplit(".", 1)
        note = notes[(service, name)]
        assert all(f"`{field}`" in note for field in refused), method
        assert "UNIMPLEMENTED" in note, method
