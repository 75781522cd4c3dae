"""Pub/Sub schemas, pure: definitions of both types compiled, messages of both encodings
validated. No Kafka, no gRPC, no asyncio; the SchemaService and the publish
path call it.

    schema = cache.get(SchemaType.AVRO, definition)   # or compile_schema(...), uncached
    schema.validate(data, Encoding.JSON)               # raises SchemaError (INVALID_ARGUMENT)

Compiling a Protocol Buffer definition runs protoc in a subprocess (tens of ms): code on the
event loop compiles in an executor. Validating is CPU only, microseconds per message
(benchmarks/schema_validation.py).
"""

from gateway.schemas.avro import AvroSchema
from gateway.schemas.cache import DEFAULT_CACHE_SIZE, CacheStats, SchemaCache, compile_schema
from gateway.schemas.model import (
    MAX_DEFINITION_BYTES,
    CompiledSchema,
    Encoding,
    SchemaError,
    SchemaType,
    fingerprint,
)
from gateway.schemas.protobuf import ProtoSchema

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "MAX_DEFINITION_BYTES",
    "AvroSchema",
    "CacheStats",
    "CompiledSchema",
    "Encoding",
    "ProtoSchema",
    "SchemaCache",
    "SchemaError",
    "SchemaType",
    "compile_schema",
    "fingerprint",
]
