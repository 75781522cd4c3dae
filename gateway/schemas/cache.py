"""Compiling a definition of either type, and a bounded cache of compiled schemas.

The publish path validates every message against its topic's schema revisions; compiling a
Protocol Buffer definition runs protoc (~50 ms) and an Avro one builds its checkers, so each
definition is compiled once and kept, keyed by its fingerprint (SHA-256 of type and text), in
a least-recently-used cache of bounded size. Failures are not kept: a definition reaches the
publish path only after it compiled once, and a ValidateSchema caller retrying a bad one pays
for each try.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.schemas.avro import compile_avro
from gateway.schemas.model import CompiledSchema, SchemaType, fingerprint
from gateway.schemas.protobuf import compile_proto

DEFAULT_CACHE_SIZE = 512


def compile_schema(schema_type: int, definition: str) -> CompiledSchema:
    """Compile `definition` of `schema_type` (a `SchemaType` or the API's number), uncached.
    Raises `SchemaError` for a type that is neither Avro nor Protocol Buffer or a definition
    that does not compile."""
    kind = SchemaType.of(schema_type)
    if kind is SchemaType.AVRO:
        return compile_avro(definition)
    return compile_proto(definition)


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int
    size: int


class SchemaCache:
    """Compiled schemas by fingerprint, at most `max_size`, the least recently used dropped
    first. Safe to share between threads (the gateway compiles in an executor): two threads
    missing the same definition at once both compile it, and the first result is kept."""

    def __init__(
        self,
        max_size: int = DEFAULT_CACHE_SIZE,
        compiler: Callable[[int, str], CompiledSchema] = compile_schema,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, not {max_size}")
        self._max_size = max_size
        self._compile = compiler
        self._entries: OrderedDict[str, CompiledSchema] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def get(self, schema_type: int, definition: str) -> CompiledSchema:
        """The compiled schema for `definition`, compiled now if it is not cached."""
        key = fingerprint(SchemaType.of(schema_type), definition)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                return found
            self._misses += 1
        compiled = self._compile(schema_type, definition)
        with self._lock:
            kept = self._entries.setdefault(key, compiled)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_size:
                self._entries.popitem(last=False)
        return kept

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, len(self._entries))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
