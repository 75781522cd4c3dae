"""Avro schemas: a definition is the JSON text of one Avro schema (Pub/Sub documents Avro 1.11);
a message is one value of it in Avro's binary encoding (no container file, no header: what
`fastavro.schemaless_writer` writes) or in Avro's JSON encoding.

fastavro parses the definition: names resolved, defaults checked against their types, logical
types read. What its parser lets through and the specification does not is refused by
`avro_rules`. Messages are checked by `avro_binary` and `avro_json`, each built once per schema;
binary messages first by the checker `avro_binary_gen` generates for the schema, many times
faster, and by `avro_binary` only to say what is wrong with one it refuses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException, UnknownType

from gateway.schemas import avro_binary, avro_binary_gen, avro_json, avro_rules
from gateway.schemas.model import Encoding, SchemaError, SchemaType, check_size, fingerprint

_TOO_DEEP = "the message is nested too deeply to check"


@dataclass(frozen=True, slots=True)
class AvroSchema:
    """A compiled Avro definition. `parsed` is fastavro's form of it, for callers that decode
    or encode messages with fastavro (the tests do); the checkers are built from it once and,
    holding no state, are shared by every thread that validates."""

    fingerprint: str
    parsed: Any = field(repr=False)
    _binary: avro_binary.Step = field(repr=False, compare=False)
    _fast: avro_binary_gen.Checker | None = field(repr=False, compare=False)
    _json: avro_json.Check = field(repr=False, compare=False)

    @property
    def type(self) -> SchemaType:
        return SchemaType.AVRO

    def validate(self, data: bytes, encoding: Encoding) -> None:
        """Return if `data` is one value of this schema in `encoding`; raise `SchemaError`
        saying where it is not. Trailing bytes (binary) and trailing text (JSON) are errors."""
        encoding = Encoding.of(encoding)
        try:
            if encoding is Encoding.BINARY:
                fast = self._fast
                if fast is not None and _fast_accepts(fast, data):
                    return
                # The walker decides alone, or says what the checker found wrong.
                avro_binary.check_binary(self._binary, data)
                if fast is not None:  # the two disagree: never (tests/unit/test_schemas_avro_fast.py)
                    raise avro_rules.Mismatch("the message does not match the schema")
            else:
                self._json(_json_value(data))
        except avro_rules.Mismatch as exc:
            raise SchemaError(f"Invalid Avro {encoding.name} message: {exc.describe()}.") from None
        except RecursionError:
            raise SchemaError(f"Invalid Avro {encoding.name} message: {_TOO_DEEP}.") from None


def _fast_accepts(check: avro_binary_gen.Checker, data: bytes) -> bool:
    """Whether the generated checker takes `data` as exactly one value. `RecursionError` is the
    caller's, as it is from the walker."""
    try:
        return check(data) == len(data)
    except (IndexError, avro_rules.Mismatch, UnicodeDecodeError):
        return False


def _json_value(data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise avro_rules.Mismatch("the message is not UTF-8 text") from None
    try:
        return json.loads(text)
    except ValueError as exc:  # json.JSONDecodeError
        raise avro_rules.Mismatch(f"the message is not one JSON value ({exc})") from None


def compile_avro(definition: str) -> AvroSchema:
    """Parse and check `definition`; raise `SchemaError` naming what is wrong."""
    check_size(definition)
    try:
        raw = json.loads(definition)
    except RecursionError:
        raise SchemaError("Invalid Avro schema: the definition is nested too deeply.") from None
    except ValueError as exc:
        raise SchemaError(f"Invalid Avro schema: the definition is not JSON ({exc}).") from None
    try:
        avro_rules.check_definition(raw)
        named: dict[str, Any] = {}
        parsed = fastavro.parse_schema(raw, named_schemas=named)
        avro_rules.check_unions(parsed)
        binary = avro_binary.compile_binary(parsed, named)
        fast = avro_binary_gen.compile_checker(parsed, named)
        json_check = avro_json.compile_json(parsed, named)
    except RecursionError:
        raise SchemaError("Invalid Avro schema: the definition is nested too deeply.") from None
    except (SchemaParseException, UnknownType) as exc:
        raise SchemaError(f"Invalid Avro schema: {_first_line(exc)}.") from None
    except KeyError as exc:
        raise SchemaError(f"Invalid Avro schema: a schema object lacks the attribute {exc}.") from None
    except (TypeError, ValueError, AttributeError) as exc:
        # fastavro's parser on JSON of an unexpected shape ("fields": 5, "symbols": {...}).
        raise SchemaError(f"Invalid Avro schema: {_first_line(exc)}.") from None
    return AvroSchema(fingerprint(SchemaType.AVRO, definition), parsed, binary, fast, json_check)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0].rstrip(".") if text else type(exc).__name__
