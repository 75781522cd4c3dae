"""The values every schema module shares: types, encodings, the error, the compiled schema.

The enums take their numbers from the generated `schema_pb2`, so `SchemaType(schema.type)` and
`Encoding(settings.encoding)` convert the API's values and cannot drift from them.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable
from typing import Protocol

from gateway._pb.google.pubsub.v1 import schema_pb2
from gateway.errors import InvalidArgument

# "The schema definition field cannot exceed 300 KB in size" (Pub/Sub's schema limits). KB is
# read as KiB, so that no definition Pub/Sub takes is refused here.
MAX_DEFINITION_BYTES = 300 * 1024


class SchemaError(InvalidArgument):
    """A definition that does not compile, or a message that does not match its schema.

    It is an `InvalidArgument`: Pub/Sub answers both with INVALID_ARGUMENT, and the core can let
    it travel to the wire as it is. The message says what is wrong and where, in words a
    publisher can act on; the caller adds the context (which schema, which message)."""


class SchemaType(enum.IntEnum):
    """`google.pubsub.v1.Schema.Type`, less TYPE_UNSPECIFIED."""

    PROTOCOL_BUFFER = schema_pb2.Schema.PROTOCOL_BUFFER
    AVRO = schema_pb2.Schema.AVRO

    @classmethod
    def of(cls, value: int) -> SchemaType:
        """The type of an API value; TYPE_UNSPECIFIED and unknown numbers are a `SchemaError`."""
        if isinstance(value, SchemaType):
            return value
        try:
            return cls(value)
        except ValueError:
            raise SchemaError(
                f"Schema type must be AVRO or PROTOCOL_BUFFER (got {value}, "
                f"{_name(schema_pb2.Schema.Type.Name, value)})."
            ) from None


class Encoding(enum.IntEnum):
    """`google.pubsub.v1.Encoding`, less ENCODING_UNSPECIFIED."""

    JSON = schema_pb2.JSON
    BINARY = schema_pb2.BINARY

    @classmethod
    def of(cls, value: int) -> Encoding:
        """The encoding of an API value; ENCODING_UNSPECIFIED and unknown numbers are a `SchemaError`."""
        if isinstance(value, Encoding):
            return value
        try:
            return cls(value)
        except ValueError:
            raise SchemaError(
                f"Encoding must be JSON or BINARY (got {value}, {_name(schema_pb2.Encoding.Name, value)})."
            ) from None


def _name(lookup: Callable[[int], str], value: int) -> str:
    try:
        return lookup(value)
    except ValueError:
        return "unknown"


class CompiledSchema(Protocol):
    """A definition, compiled once, that validates messages. Implementations are immutable and
    safe to share between threads: the publish path validates with one instance from many."""

    @property
    def type(self) -> SchemaType: ...

    @property
    def fingerprint(self) -> str:
        """`fingerprint(type, definition)`: what the cache keys it by."""
        ...

    def validate(self, data: bytes, encoding: Encoding) -> None:
        """Return if `data` is a message of this schema in `encoding`, else raise `SchemaError`."""
        ...


def fingerprint(schema_type: SchemaType, definition: str) -> str:
    """The SHA-256 of the type and the definition's text: two revisions with the same text share
    one compiled schema, and a cache holds no 300 KB keys."""
    digest = hashlib.sha256(f"{int(schema_type)}\n".encode())
    digest.update(definition.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def check_size(definition: str) -> bytes:
    """The definition as UTF-8, refused past `MAX_DEFINITION_BYTES` or if it cannot be encoded."""
    try:
        raw = definition.encode("utf-8")
    except UnicodeEncodeError:
        raise SchemaError("The schema definition is not valid UTF-8 text.") from None
    if len(raw) > MAX_DEFINITION_BYTES:
        raise SchemaError(
            f"The schema definition is {len(raw)} bytes; at most {MAX_DEFINITION_BYTES} are allowed."
        )
    if not raw.strip():
        raise SchemaError("The schema definition is empty.")
    return raw
