"""Requests from HTTP (path, query, JSON body) and JSON responses, per the proto3 JSON mapping.

The conversion itself is protobuf's `json_format`. Two things are added around it: a shape
check of the body that refuses what `json_format` would silently accept (a list where a message
belongs, a float or a boolean as an enum, base64 with characters outside the alphabet), and the
binding of query parameters to the request fields that neither the path nor the body carry.
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
import json
import re
import zlib
from collections.abc import Iterable
from typing import Any, NoReturn, cast

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.wire.rest_routes import Route

MAX_BODY = 10 * 1024 * 1024  # Pub/Sub accepts HTTP bodies up to 10 MiB (decompressed, too)
TOO_LARGE = f"Request payload size exceeds the limit: {MAX_BODY} bytes."
MAX_DEPTH = 64
MAX_DETAIL = 400  # parser messages can quote whole values; keep errors short
IGNORED_PARAMS = frozenset({"key", "access_token", "quotaUser", "$.xgafv"})
OUTPUT_PARAMS = frozenset({"$alt", "alt", "prettyPrint", "$prettyPrint"})
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
_INVALID = "Invalid JSON payload received. "
_NOT_STRINGS = frozenset({"google.protobuf.Struct", "google.protobuf.Any", "google.protobuf.ListValue"})


class BadRequest(Exception):
    """The request cannot be read: INVALID_ARGUMENT, with a message naming the problem."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclasses.dataclass(frozen=True, slots=True)
class Output:
    enum_ints: bool = False
    pretty: bool = False


def _one(query: Iterable[tuple[str, str]], *names: str) -> str | None:
    found = [v for k, v in query if k in names]
    if len(found) > 1:
        raise BadRequest(f"The query parameter {names[0]} is given more than once.")
    return found[0] if found else None


def _flag(name: str, raw: str) -> bool:
    if raw == "true":
        return True
    if raw == "false":
        return False
    raise BadRequest(f"Invalid value for {name}: {raw[:40]!r}; want true or false.")


def output_options(query: Iterable[tuple[str, str]]) -> Output:
    """`$alt=json;enum-encoding=int` (or `alt=`) and `prettyPrint` from the query."""
    query = list(query)
    alt = _one(query, "$alt", "alt")
    enum_ints = False
    if alt is not None:
        fmt, *params = alt.split(";")
        if fmt.strip().lower() != "json":
            raise BadRequest(f"Unsupported alt {alt[:40]!r}: only json is served.")
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() != "enum-encoding" or value.strip() not in ("int", "string"):
                raise BadRequest(f"Unsupported alt parameter {param[:40]!r}: try enum-encoding=int.")
            enum_ints = value.strip() == "int"
    pretty = _one(query, "prettyPrint", "$prettyPrint")
    return Output(enum_ints, _flag("prettyPrint", pretty) if pretty is not None else False)


def render(message: Message, out: Output) -> bytes:
    data = json_format.MessageToDict(message, use_integers_for_enums=out.enum_ints)
    return json.dumps(data, ensure_ascii=False, indent=2 if out.pretty else None).encode()


# -- request bodies -----------------------------------------------------------------------------

_GZIP = ("gzip", "x-gzip")
CONTENT_ENCODINGS = ("identity", *_GZIP, "deflate")


def decode_body(raw: bytes, content_encoding: str, limit: int = MAX_BODY) -> bytes:
    """The body under its `Content-Encoding` (identity, gzip or deflate), never more than
    `limit` bytes once decompressed: a small gzip bomb is refused as too large, without being
    expanded past the limit."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity") or not raw:
        return raw
    if encoding not in CONTENT_ENCODINGS:
        raise BadRequest(
            f"Unsupported Content-Encoding {content_encoding[:40]!r}: send gzip, deflate or identity."
        )
    if encoding == "deflate":  # zlib-wrapped as RFC 9110 says, or raw deflate as some clients send
        wbits = zlib.MAX_WBITS if raw[:1] and raw[0] & 0x0F == 8 else -zlib.MAX_WBITS
    else:
        wbits = 16 + zlib.MAX_WBITS
    out = bytearray()
    data = raw
    while True:  # gzip bodies may be several members one after another
        stream = zlib.decompressobj(wbits)
        try:
            out += stream.decompress(data, limit + 1 - len(out))
        except zlib.error:
            raise BadRequest(
                f"The request body is not valid {encoding} data (Content-Encoding: {encoding})."
            ) from None
        if len(out) > limit or stream.unconsumed_tail:
            raise BadRequest(TOO_LARGE)
        if not stream.eof:
            raise BadRequest(
                f"The request body ends inside its {encoding} data (Content-Encoding: {encoding})."
            )
        data = stream.unused_data
        if not data:
            return bytes(out)
        if encoding == "deflate":
            raise BadRequest(
                "The request body has data after its deflate stream (Content-Encoding: deflate)."
            )


def _no_constants(name: str) -> NoReturn:
    raise BadRequest(f"{_INVALID}{name} is not valid JSON.")


def parse_body(body: bytes) -> Any:
    """The JSON value of a body; an empty body is `{}`."""
    if not body.strip():
        return {}
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise BadRequest(f"{_INVALID}The body is not UTF-8.") from None
    except json.JSONDecodeError as exc:
        raise BadRequest(f"{_INVALID}Malformed JSON: {exc}.") from None
    except RecursionError:
        raise BadRequest(f"{_INVALID}The JSON is nested too deeply.") from None


def _string_form(message: Descriptor) -> bool:
    """Well-known types that json_format checks itself (Duration, Timestamp, wrappers, ...)."""
    return message.full_name.startswith("google.protobuf.") and message.full_name != "google.protobuf.Empty"


@functools.cache
def _checked_fields(message: Descriptor) -> tuple[tuple[tuple[str, ...], FieldDescriptor], ...]:
    """The fields of `message` whose JSON shape json_format checks too loosely, with both names."""
    out = []
    for field in message.fields:
        target = field
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            target = field.message_type.fields_by_name["value"]
        kind, sub = target.type, target.message_type
        if kind in (FieldDescriptor.TYPE_ENUM, FieldDescriptor.TYPE_BYTES) or (
            sub is not None and not _string_form(sub)
        ):
            out.append((tuple(dict.fromkeys((field.json_name, field.name))), field))
    return tuple(out)


def check_shape(value: object, message: Descriptor, path: str, depth: int = 0) -> None:
    """Refuse JSON that json_format would misread or accept loosely, before it runs."""
    if not isinstance(value, dict):
        raise BadRequest(f"{_INVALID}Expected a JSON object at {path}, got {_kind(value)}.")
    if depth > MAX_DEPTH:
        raise BadRequest(f"{_INVALID}The JSON is nested too deeply at {path}.")
    for keys, field in _checked_fields(message):
        for key in keys:
            item = value.get(key)
            if item is not None:
                _check_field(item, field, f"{path}.{key}", depth)


def _check_field(value: object, field: FieldDescriptor, path: str, depth: int) -> None:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        if not isinstance(value, dict):
            raise BadRequest(f"{_INVALID}Expected a JSON object (a map) at {path}, got {_kind(value)}.")
        target = field.message_type.fields_by_name["value"]
        for key, item in value.items():
            _check_single(item, target, f"{path}[{key!r}]", depth)
    elif field.is_repeated:
        if not isinstance(value, list):
            raise BadRequest(f"{_INVALID}Expected a JSON array at {path}, got {_kind(value)}.")
        for i, item in enumerate(value):
            _check_single(item, field, f"{path}[{i}]", depth)
    else:
        _check_single(value, field, path, depth)


def _check_single(value: object, field: FieldDescriptor, path: str, depth: int) -> None:
    kind = field.type
    if field.message_type is not None:
        check_shape(value, field.message_type, path, depth + 1)
    elif kind == FieldDescriptor.TYPE_ENUM:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise BadRequest(f"{_INVALID}Expected an enum name or number at {path}, got {_kind(value)}.")
    elif kind == FieldDescriptor.TYPE_BYTES and not _is_base64(value):
        raise BadRequest(f"{_INVALID}Invalid base64 at {path}: bytes fields hold base64 text.")


def _is_base64(value: object) -> bool:
    if not isinstance(value, str) or not _BASE64.fullmatch(value):
        return False
    data = value.rstrip("=")
    padded = len(data) != len(value)
    return len(data) % 4 != 1 and (not padded or len(value) % 4 == 0)


def _kind(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


# -- binding path, query and body to the request ----------------------------------------------


def _parse_into(value: dict[str, Any], message: Message) -> None:
    try:
        json_format.ParseDict(value, message)
    except json_format.ParseError as exc:
        raise BadRequest(f"{_INVALID}{str(exc)[:MAX_DETAIL]}") from None
    except (ValueError, TypeError, RecursionError) as exc:  # json_format lets a few through raw
        raise BadRequest(f"{_INVALID}{str(exc)[:MAX_DETAIL]}") from None


def build_request(
    route: Route, path_values: dict[str, str], query: Iterable[tuple[str, str]], body: bytes
) -> Message:
    """The request message of `route` from the request's path values, query and body."""
    request = route.request_class()
    params = [(k, v) for k, v in query if k not in IGNORED_PARAMS and k not in OUTPUT_PARAMS]
    _bind_body(route, body, request, params)
    if params:
        _parse_into(_query_fields(route, params), request)
    for field_path, text in path_values.items():
        _set_path_field(request, field_path, text)
    return request


def _bind_body(route: Route, body: bytes, request: Message, params: list[tuple[str, str]]) -> None:
    desc = route.method.input_type
    if route.body == "*":
        if params:
            raise BadRequest(
                f"Cannot bind query parameter {params[0][0]!r}: every field of this "
                "method travels in the request body."
            )
        value = parse_body(body)
    elif route.body:
        value = {route.body: parse_body(body)}
    else:
        if body.strip() and parse_body(body) != {}:
            raise BadRequest(f"{route.http_method} {route.template.text} takes no request body.")
        return
    check_shape(value, desc, desc.name)
    if desc.full_name == PUBLISH_REQUEST and _publish_fast(value, cast(pubsub_pb2.PublishRequest, request)):
        return
    _parse_into(value, request)


PUBLISH_REQUEST = "google.pubsub.v1.PublishRequest"
_PLAIN_MESSAGE_KEYS = {"data", "attributes", "orderingKey", "ordering_key"}
_URLSAFE = str.maketrans("-_", "+/")


def _publish_fast(value: dict[str, Any], request: pubsub_pb2.PublishRequest) -> bool:
    """Publish bodies are the hot path: messages of plain data/attributes/orderingKey (checked
    by check_shape already) are built directly, about 3x faster than json_format. Anything else
    takes the general path, so the two always agree."""
    if set(value) - {"topic", "messages"} or not isinstance(value.get("topic", ""), str):
        return False
    messages = value.get("messages") or []
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return False
    if not all(set(m) <= _PLAIN_MESSAGE_KEYS and _plain(m) for m in messages):
        return False
    try:
        request.topic = value.get("topic", "")
        add = request.messages.add
        for m in messages:
            data = m.get("data", "")
            add(
                data=_b64(data) if data else b"",
                attributes=m.get("attributes") or {},
                ordering_key=m.get("orderingKey", m.get("ordering_key", "")),
            )
    except UnicodeEncodeError:  # a string escaping an unpaired surrogate (`"\ud800"`)
        raise BadRequest(
            f"{_INVALID}A string holds an unpaired surrogate: strings must be valid Unicode."
        ) from None
    return True


def _plain(m: dict[str, Any]) -> bool:
    attrs = m.get("attributes") or {}
    key = m.get("orderingKey", m.get("ordering_key", ""))
    return (
        isinstance(attrs, dict) and isinstance(key, str) and all(isinstance(v, str) for v in attrs.values())
    )


def _b64(text: str) -> bytes:
    """Standard or URL-safe base64, padded or not, as proto3 JSON allows."""
    if "-" in text or "_" in text:
        text = text.translate(_URLSAFE)
    if len(text) % 4:
        text = text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4)
    return binascii.a2b_base64(text)


def _set_path_field(request: Message, field_path: str, text: str) -> None:
    *parents, leaf = field_path.split(".")
    target = request
    for name in parents:
        target = getattr(target, name)
    _parse_into({leaf: text}, target)


def _query_fields(route: Route, params: list[tuple[str, str]]) -> dict[str, Any]:
    """Query parameters as a JSON object for json_format: `a.b=1&c=x&c=y` -> {a: {b: 1}, c: [x, y]}."""
    out: dict[str, Any] = {}
    for key, raw in params:
        fields = query_field(route.method.input_type, key)
        _check_unbound(route, key, fields)
        target = out
        for field in fields[:-1]:
            target = target.setdefault(field.name, {})
        leaf = fields[-1]
        value = _query_value(leaf, raw, key)
        if leaf.is_repeated:
            target.setdefault(leaf.name, []).append(value)
        elif leaf.name in target:
            raise BadRequest(f"The query parameter {key!r} is given more than once.")
        else:
            target[leaf.name] = value
    return out


def _check_unbound(route: Route, key: str, fields: list[FieldDescriptor]) -> None:
    """A query parameter must not name a field the path or a named body field already sets."""
    path = ".".join(f.name for f in fields)
    for bound in route.path_fields:
        if path == bound or path.startswith(bound + ".") or bound.startswith(path + "."):
            raise BadRequest(f"Cannot bind query parameter {key!r}: the path sets {bound}.")
    if route.body not in ("", "*") and fields[0].name == route.body:
        raise BadRequest(f"Cannot bind query parameter {key!r}: the request body sets {route.body}.")


def query_field(desc: Descriptor, key: str) -> list[FieldDescriptor]:
    """The fields a query parameter name walks (json or proto names), ending at a scalar one."""
    fields: list[FieldDescriptor] = []
    message: Descriptor | None = desc
    for part in key.split("."):
        field = None if message is None else _field(message, part)
        if field is None:
            raise BadRequest(f"Cannot bind query parameter {key!r}: {desc.full_name} has no such field.")
        fields.append(field)
        sub = field.message_type
        message = sub if sub is not None and not _string_form(sub) and not field.is_repeated else None
    if not query_bindable(fields[-1]):
        raise BadRequest(f"Cannot bind query parameter {key!r}: a message field cannot be a parameter.")
    return fields


def query_bindable(field: FieldDescriptor) -> bool:
    """Scalars, enums and the well-known types written as one JSON string can be parameters."""
    sub = field.message_type
    return sub is None or (_string_form(sub) and sub.full_name not in _NOT_STRINGS)


def _field(message: Descriptor, name: str) -> FieldDescriptor | None:
    for field in message.fields:
        if name in (field.json_name, field.name):
            return field
    return None


def _query_value(field: FieldDescriptor, raw: str, key: str) -> str | bool:
    is_bool = field.type == FieldDescriptor.TYPE_BOOL or (
        field.message_type is not None and field.message_type.full_name == "google.protobuf.BoolValue"
    )
    return _flag(key, raw) if is_bool else raw
