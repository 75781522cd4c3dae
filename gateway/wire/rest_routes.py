"""HTTP routes derived from the `google.api.http` annotations of the services' methods.

Each rule (`get: "/v1/{topic=projects/*/topics/*}"`, `body: "*"`) becomes a `Route`: the HTTP
method, a compiled path template and the request and response message classes. Nothing here is
written per RPC; the REST wire (rest.py) and the OpenAPI document (openapi.py) both read these.

Path templates follow google/api/http.proto:

    Template = "/" Segments [ Verb ] ;  Segment = "*" | "**" | LITERAL | Variable ;
    Variable = "{" FieldPath [ "=" Segments ] "}" ;  Verb = ":" LITERAL ;

A request path matches on its raw (still percent-encoded) form, so an encoded `/` never splits
a segment; the captured variables are percent-decoded afterwards.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Iterable, Iterator

from google.api import annotations_pb2
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message

HTTP_METHODS = ("get", "put", "post", "delete", "patch")


@dataclasses.dataclass(frozen=True, slots=True)
class Variable:
    field_path: str  # "topic" or "topic.name": the request field the captured text goes to
    segments: tuple[str, ...]  # ("projects", "*", "topics", "*"); ("*",) for a bare {field}


@dataclasses.dataclass(frozen=True, slots=True)
class Template:
    text: str
    parts: tuple[str | Variable, ...]  # top-level segments: literals, "*", "**" or variables
    verb: str | None  # None when the template has none
    pattern: re.Pattern[str]  # matches a raw request path with its verb removed
    variables: tuple[Variable, ...]  # in the order of the pattern's groups v0, v1, ...

    def match(self, raw_path: str, verb: str | None) -> dict[str, str] | None:
        """The field values bound by `raw_path` (percent-decoded), or None if it does not match."""
        if verb != self.verb:
            return None
        found = self.pattern.fullmatch(raw_path)
        if found is None:
            return None
        return {
            var.field_path: urllib.parse.unquote(found.group(f"v{i}")) for i, var in enumerate(self.variables)
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    service: str  # full service name, e.g. google.pubsub.v1.Publisher
    method: MethodDescriptor
    http_method: str  # upper case: GET, POST, ...
    template: Template
    body: str  # "" (no body), "*" (the whole request) or the name of one request field
    request_class: type[Message]
    response_class: type[Message]

    @property
    def name(self) -> str:
        return f"{self.service}.{self.method.name}"

    @property
    def path_fields(self) -> frozenset[str]:
        return frozenset(v.field_path for v in self.template.variables)


class TemplateError(ValueError):
    """A path template in the protos does not follow the grammar."""


def _segment_regex(segment: str) -> str:
    if segment == "*":
        return "[^/]+"
    if segment == "**":
        return ".*"
    if not segment or any(c in segment for c in "{}*"):
        raise TemplateError(f"bad path segment {segment!r}")
    return re.escape(segment)


def _split_top_level(path: str) -> Iterator[str]:
    """Split on '/' outside braces."""
    depth, start = 0, 0
    for i, char in enumerate(path):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "/" and depth == 0:
            yield path[start:i]
            start = i + 1
    if depth != 0:
        raise TemplateError(f"unbalanced braces in {path!r}")
    yield path[start:]


def split_verb(path: str) -> tuple[str, str | None]:
    """Separate a trailing `:verb` from a path (template or request path); None if there is none."""
    colon = path.rfind(":")
    if colon > path.rfind("/") and colon > path.rfind("}"):
        return path[:colon], path[colon + 1 :]
    return path, None


def parse_template(text: str) -> Template:
    if not text.startswith("/"):
        raise TemplateError(f"a path template starts with '/': {text!r}")
    path, verb = split_verb(text[1:])
    parts: list[str | Variable] = []
    regex: list[str] = []
    for token in _split_top_level(path):
        if token.startswith("{") and token.endswith("}"):
            field, _, segs = token[1:-1].partition("=")
            var = Variable(field, tuple(segs.split("/")) if segs else ("*",))
            inner = "/".join(_segment_regex(s) for s in var.segments)
            regex.append(f"(?P<v{sum(isinstance(p, Variable) for p in parts)}>{inner})")  # vN: N-th variable
            parts.append(var)
        else:
            regex.append(_segment_regex(token))
            parts.append(token)
    variables = tuple(p for p in parts if isinstance(p, Variable))
    return Template(text, tuple(parts), verb, re.compile("/" + "/".join(regex)), variables)


def _rules(method: MethodDescriptor) -> Iterator[tuple[str, str, str]]:
    """(HTTP method, path template, body) of each binding of one RPC."""
    options = method.GetOptions()
    if not options.HasExtension(annotations_pb2.http):
        return
    top = options.Extensions[annotations_pb2.http]
    for rule in (top, *top.additional_bindings):
        kind = rule.WhichOneof("pattern")
        if kind is None:
            continue
        if kind == "custom":
            yield rule.custom.kind.upper(), rule.custom.path, rule.body
        else:
            yield kind.upper(), getattr(rule, kind), rule.body


def routes(services: Iterable[ServiceDescriptor]) -> list[Route]:
    """Every HTTP binding of every method of `services` (methods without one are not served)."""
    out: list[Route] = []
    for service in services:
        for method in service.methods:
            for http_method, path, body in _rules(method):
                out.append(
                    Route(
                        service=service.full_name,
                        method=method,
                        http_method=http_method,
                        template=parse_template(path),
                        body=body,
                        request_class=message_factory.GetMessageClass(method.input_type),
                        response_class=message_factory.GetMessageClass(method.output_type),
                    )
                )
    return out


# google.iam.v1.IAMPolicy as Pub/Sub binds it over HTTP (its service configuration's rules,
# which the protos do not carry: iam_policy.proto's own rules are the generic `{resource=**}`).
IAM_RESOURCES = ("topics", "subscriptions", "snapshots", "schemas")
IAM_BINDINGS = (
    ("GetIamPolicy", "GET", ""),
    ("SetIamPolicy", "POST", "*"),
    ("TestIamPermissions", "POST", "*"),
)


def iam_routes(service: ServiceDescriptor) -> list[Route]:
    """The HTTP bindings of the IAM methods for each kind of Pub/Sub resource."""
    out: list[Route] = []
    for name, http_method, body in IAM_BINDINGS:
        method = service.methods_by_name[name]
        verb = name[0].lower() + name[1:]
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        out.extend(
            Route(
                service=service.full_name,
                method=method,
                http_method=http_method,
                template=parse_template(f"/v1/{{resource=projects/*/{kind}/*}}:{verb}"),
                body=body,
                request_class=request_class,
                response_class=response_class,
            )
            for kind in IAM_RESOURCES
        )
    return out


class NoRoute(Exception):
    """No route has this path (404) or none has it with this HTTP method (405: `allowed`)."""

    def __init__(self, path: str, method: str, allowed: tuple[str, ...]) -> None:
        self.path = path
        self.method = method
        self.allowed = allowed
        if allowed:
            message = f"Method {method} is not allowed on {path}; allowed: {', '.join(allowed)}."
        else:
            message = f"The path {path} matches no method of this API."
        super().__init__(message)
        self.message = message


class Router:
    def __init__(self, table: Iterable[Route]) -> None:
        self._routes = tuple(table)

    def match(self, http_method: str, raw_path: str) -> tuple[Route, dict[str, str]]:
        """The route for this request and the field values its path binds; NoRoute if none."""
        path, verb = split_verb(raw_path)
        allowed: list[str] = []
        for route in self._routes:
            values = route.template.match(path, verb)
            if values is None:
                continue
            if route.http_method == http_method:
                return route, values
            allowed.append(route.http_method)
        raise NoRoute(urllib.parse.unquote(raw_path), http_method, tuple(dict.fromkeys(allowed)))
