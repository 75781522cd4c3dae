"""An OpenAPI 3 document of the REST wire, generated from the same descriptors as its routes.

Paths come from the HTTP rules: each `*` of a path variable becomes one path parameter named
after the collection before it (`projects/*` -> `projects/{projectsId}`), as Google's discovery
documents name them. Schemas come from the message descriptors with their JSON names and the
proto3 JSON forms (int64 as strings, bytes as base64, Duration as "600s", enums by name or
number).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from google.api import field_behavior_pb2
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from gateway.wire import rest_json
from gateway.wire.rest_routes import Route, Template, Variable

F = FieldDescriptor
Schema = dict[str, Any]
INT64 = {F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64}
UINT64 = {F.TYPE_UINT64, F.TYPE_FIXED64}
INT32 = {F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32}
UINT32 = {F.TYPE_UINT32, F.TYPE_FIXED32}
BASE64 = r"^[A-Za-z0-9+/_-]*={0,2}$"
WELL_KNOWN: dict[str, Schema] = {
    "google.protobuf.Duration": {
        "type": "string",
        "format": "google-duration",
        "pattern": r"^-?[0-9]{1,12}(\.[0-9]{1,9})?s$",
        "example": "600s",
    },
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.FieldMask": {
        "type": "string",
        "format": "google-fieldmask",
        "pattern": r"^([a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)*(,|$))*$",
    },
    "google.protobuf.Empty": {"type": "object", "additionalProperties": False},
    "google.protobuf.Struct": {"type": "object", "additionalProperties": True},
    "google.protobuf.Value": {},
    "google.protobuf.ListValue": {"type": "array", "items": {}},
    "google.protobuf.Any": {
        "type": "object",
        "required": ["@type"],
        "properties": {"@type": {"type": "string"}},
        "additionalProperties": True,
    },
}
ERROR: Schema = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "status"],
            "properties": {
                "code": {"type": "integer", "description": "the HTTP status"},
                "message": {"type": "string"},
                "status": {"type": "string", "description": "the google.rpc.Code name"},
                "details": {"type": "array", "items": {"type": "object"}},
            },
        }
    },
}
# The published form of resource ids, for the path parameters (the core validates names itself)
ID_PATTERNS = {
    "projects": r"^[A-Za-z0-9][A-Za-z0-9\-_.:]{0,99}$",
    "": r"^(?!goog)[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$",
}
OUTPUT_PARAMETERS: list[Schema] = [
    {
        "name": "$alt",
        "in": "query",
        "required": False,
        "description": "json (the default) or json;enum-encoding=int for enums as numbers",
        "schema": {"type": "string", "enum": ["json", "json;enum-encoding=int"]},
    },
    {"name": "prettyPrint", "in": "query", "required": False, "schema": {"type": "boolean"}},
]


class _Builder:
    def __init__(self) -> None:
        self.schemas: dict[str, Schema] = {"Error": ERROR}

    def message(self, desc: Descriptor) -> Schema:
        """A reference to the schema of a message (defined on first use)."""
        if desc.full_name in WELL_KNOWN:
            return dict(WELL_KNOWN[desc.full_name])
        if desc.full_name.startswith("google.protobuf.") and desc.fields:  # wrappers: the value
            return self.single(desc.fields_by_name["value"])
        if desc.full_name not in self.schemas:
            self.schemas[desc.full_name] = {}  # placeholder: recursive messages end here
            self.schemas[desc.full_name] = self.object(desc, exclude=())
        return {"$ref": f"#/components/schemas/{desc.full_name}"}

    def object(self, desc: Descriptor, exclude: Sequence[str], request: bool = False) -> Schema:
        """A message as a JSON object; for a request body, with its REQUIRED fields required."""
        fields = [f for f in desc.fields if f.name not in exclude]
        schema: Schema = {
            "type": "object",
            "description": desc.full_name,
            "properties": {f.json_name: self.field(f) for f in fields},
            "additionalProperties": False,
        }
        required = [f.json_name for f in fields if request and _required(f)]
        if required:
            schema["required"] = required
        pairs = [
            [a.json_name, b.json_name]
            for oneof in desc.oneofs
            for a, b in itertools.combinations([f for f in oneof.fields if f in fields], 2)
        ]
        if pairs:  # at most one member of each oneof
            schema["not"] = {"anyOf": [{"required": pair} for pair in pairs]}
        return schema

    def enum(self, desc: EnumDescriptor) -> Schema:
        if desc.full_name not in self.schemas:
            self.schemas[desc.full_name] = {
                "anyOf": [
                    {"type": "string", "enum": [v.name for v in desc.values]},
                    {"type": "integer", "enum": [v.number for v in desc.values]},
                ]
            }
        return {"$ref": f"#/components/schemas/{desc.full_name}"}

    def field(self, field: FieldDescriptor) -> Schema:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            return {
                "type": "object",
                "additionalProperties": self.single(field.message_type.fields_by_name["value"]),
            }
        if field.is_repeated:
            return {"type": "array", "items": self.single(field)}
        return self.single(field)

    def single(self, field: FieldDescriptor) -> Schema:
        if field.message_type is not None:
            return self.message(field.message_type)
        if field.enum_type is not None:
            return self.enum(field.enum_type)
        return _scalar(field.type)


def _required(field: FieldDescriptor) -> bool:
    behaviors = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
    return field_behavior_pb2.REQUIRED in behaviors


def _scalar(kind: int) -> Schema:
    if kind in INT32:
        return {"type": "integer", "format": "int32", "minimum": -(2**31), "maximum": 2**31 - 1}
    if kind in UINT32:
        return {"type": "integer", "format": "uint32", "minimum": 0, "maximum": 2**32 - 1}
    if kind in INT64:
        return {"type": "string", "format": "int64", "pattern": r"^-?[0-9]{1,19}$"}
    if kind in UINT64:
        return {"type": "string", "format": "uint64", "pattern": r"^[0-9]{1,20}$"}
    if kind in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return {"anyOf": [{"type": "number"}, {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]}]}
    if kind == F.TYPE_BOOL:
        return {"type": "boolean"}
    if kind == F.TYPE_BYTES:
        return {"type": "string", "format": "byte", "pattern": BASE64}
    return {"type": "string"}


def openapi_path(template: Template) -> tuple[str, list[Schema]]:
    """`/v1/{topic=projects/*/topics/*}:publish` -> `/v1/projects/{projectsId}/topics/{topicsId}:publish`."""
    pieces: list[str] = []
    params: list[Schema] = []
    for part in template.parts:
        segments = part.segments if isinstance(part, Variable) else (part,)
        for i, seg in enumerate(segments):
            if seg not in ("*", "**"):
                pieces.append(seg)
                continue
            collection = segments[i - 1] if i > 0 else ""
            name = f"{collection}Id" if collection else _var_name(part)
            while any(p["name"] == name for p in params):
                name += "_"
            pieces.append("{" + name + "}")
            params.append(_path_parameter(name, part, seg, collection))
    verb = "" if template.verb is None else f":{template.verb}"
    return "/" + "/".join(pieces) + verb, params


def _var_name(part: str | Variable) -> str:
    return part.field_path.replace(".", "_") if isinstance(part, Variable) else "segment"


def _path_parameter(name: str, part: str | Variable, segment: str, collection: str) -> Schema:
    field = part.field_path if isinstance(part, Variable) else "(none)"
    schema: Schema = {"type": "string", "minLength": 1}
    if segment == "*":
        schema["pattern"] = ID_PATTERNS.get(collection, ID_PATTERNS[""])
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": f"one segment of the request field {field}"
        + (" (may span several segments)" if segment == "**" else ""),
        "schema": schema,
        "example": f"example-{collection or name}",
    }


def _query_parameters(builder: _Builder, route: Route) -> list[Schema]:
    """The request fields that neither the path nor the body carry, as query parameters."""
    if route.body == "*":
        return []
    out: list[Schema] = []
    taken = route.path_fields | {route.body}

    def walk(desc: Descriptor, prefix: str, names: str, seen: frozenset[str]) -> None:
        for field in desc.fields:
            path, json_path = prefix + field.name, names + field.json_name
            if path in taken:
                continue
            sub = field.message_type
            if rest_json.query_bindable(field):
                schema = builder.single(field)
                out.append(
                    {
                        "name": json_path,
                        "in": "query",
                        "required": False,
                        "schema": {"type": "array", "items": schema} if field.is_repeated else schema,
                    }
                )
            elif sub is not None and not field.is_repeated and sub.full_name not in seen:
                walk(sub, path + ".", json_path + ".", seen | {sub.full_name})

    walk(route.method.input_type, "", "", frozenset())
    return out


def _operation(builder: _Builder, route: Route, path_params: list[Schema]) -> Schema:
    desc = route.method.input_type
    op: Schema = {
        "operationId": route.name,
        "tags": [route.service.rsplit(".", 1)[-1]],
        "summary": f"{route.method.name} (the gRPC method {route.name})",
        "parameters": [*path_params, *_query_parameters(builder, route), *OUTPUT_PARAMETERS],
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": builder.message(route.method.output_type)}},
            },
            "default": {
                "description": "An error in Google's JSON error format",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        },
    }
    if route.body:
        body = (
            builder.object(desc, [p for p in route.path_fields if "." not in p], request=True)
            if route.body == "*"
            else builder.field(desc.fields_by_name[route.body])
        )
        op["requestBody"] = {"required": False, "content": {"application/json": {"schema": body}}}
    return op


def document(routes: Sequence[Route], title: str = "Pub/Sub API (Kafka gateway)") -> Schema:
    """The OpenAPI 3.0 document of `routes`."""
    builder = _Builder()
    paths: dict[str, Schema] = {}
    for route in routes:
        path, params = openapi_path(route.template)
        paths.setdefault(path, {})[route.http_method.lower()] = _operation(builder, route, params)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": title,
            "version": "v1",
            "description": "The REST/JSON surface of the Google Cloud Pub/Sub API, generated "
            "from the google.api.http rules of its protos.",
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {"schemas": dict(sorted(builder.schemas.items()))},
    }
