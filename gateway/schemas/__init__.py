"""Pub/Sub schemas, pure: definitions of both types compiled, messages of both encodings validated,
schema names and revision ids. No Kafka, no gRPC, no asyncio; the SchemaService and the publish
path call it.

    schema = cache.get(SchemaType.AVRO, definition)   # or compile_schema(...), uncached
    schema.validate(data, Encoding.JSON)               # raises SchemaError (INVALID_ARGUMENT)
    check_compatible(previous, schema)                 # a new revision: SchemaError if it may not follow

Compiling a Protocol Buffer definition runs protoc in a subprocess (tens of ms): code on the
event loop compiles in an executor. Validating is CPU only, microseconds per message
(benchmarks/schema_validation.py).
"""

from gateway.schemas.avro import AvroSchema
from gateway.schemas.cache import DEFAULT_CACHE_SIZE, CacheStats, SchemaCache, compile_schema
from gateway.schemas.compat import check_compatible
from gateway.schemas.model import (
    MAX_DEFINITION_BYTES,
    CompiledSchema,
    Encoding,
    SchemaError,
    SchemaType,
    fingerprint,
)
from gateway.schemas.names import (
    ATTR_SCHEMA_ENCODING,
    ATTR_SCHEMA_NAME,
    ATTR_SCHEMA_REVISION_ID,
    DELETED_REVISION,
    DELETED_SCHEMA,
    MAX_REVISIONS_PER_SCHEMA,
    MAX_SCHEMAS_PER_PROJECT,
    RevisionId,
    SchemaName,
    is_revision_id,
    new_revision_id,
    schema_name,
    schema_name_for,
    split_revision,
    with_revision,
)
from gateway.schemas.protobuf import ProtoSchema

__all__ = [
    "ATTR_SCHEMA_ENCODING",
    "ATTR_SCHEMA_NAME",
    "ATTR_SCHEMA_REVISION_ID",
    "DEFAULT_CACHE_SIZE",
    "DELETED_REVISION",
    "DELETED_SCHEMA",
    "MAX_DEFINITION_BYTES",
    "MAX_REVISIONS_PER_SCHEMA",
    "MAX_SCHEMAS_PER_PROJECT",
    "AvroSchema",
    "CacheStats",
    "CompiledSchema",
    "Encoding",
    "ProtoSchema",
    "RevisionId",
    "SchemaCache",
    "SchemaError",
    "SchemaName",
    "SchemaType",
    "check_compatible",
    "compile_schema",
    "fingerprint",
    "is_revision_id",
    "new_revision_id",
    "schema_name",
    "schema_name_for",
    "split_revision",
    "with_revision",
]
