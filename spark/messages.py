"""The Pub/Sub view of Kafka records in Spark SQL: the same mapping as gateway/translate/records.py.

data = value, attributes = headers (a value that is not UTF-8 arrives base64-encoded under
`<header>-base64`; the later of two equal names wins), ordering key = the key when it is UTF-8
of 1..1024 bytes (any other non-empty key arrives as the attribute `kafka-key-base64`),
message_id = partition << 40 | offset, publish_time = the record timestamp. The gateway's own
header NUMERIC_HEADER (numeric labels of the early API) is never an attribute.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from gateway.translate.limits import MAX_ORDERING_KEY_BYTES
from gateway.translate.records import KEY_ATTRIBUTE, NUMERIC_HEADER

PARTITION_SHIFT = 40  # as records.message_id: partition << 40 | offset
COLUMNS = ("message_id", "data", "attributes", "ordering_key", "publish_time", "partition", "offset")


def _utf8(b: Column) -> Column:
    return F.is_valid_utf8(b.cast("string"))


def _base64(b: Column) -> Column:
    """Unchunked base64 (Spark's `base64` may break lines every 76 characters)."""
    return F.translate(F.base64(b), "\r\n", "")


def _entry(name: Column, value: Column) -> Column:
    return F.struct(name.alias("k"), value.alias("v"))


def _header_entry(h: Column) -> Column:
    raw = h["value"]
    text = raw.isNull() | _utf8(raw)
    return _entry(
        F.when(text, h["key"]).otherwise(F.concat(h["key"], F.lit("-base64"))),
        F.when(raw.isNull(), F.lit("")).when(text, raw.cast("string")).otherwise(_base64(raw)),
    )


def _ordering_key_ok(key: Column) -> Column:
    n = F.octet_length(key)
    return key.isNotNull() & (n > 0) & (n <= MAX_ORDERING_KEY_BYTES) & _utf8(key)


def _general(headers: Column, key: Column, odd_key: Column) -> Column:
    """Any headers: per-entry decoding, the key attribute appended, the last of equal names kept."""
    empty = F.array().cast("array<struct<k:string,v:string>>")
    from_headers = F.coalesce(F.transform(headers, _header_entry), empty)
    from_key = F.when(odd_key, F.array(_entry(F.lit(KEY_ATTRIBUTE), _base64(key)))).otherwise(empty)
    entries = F.concat(from_headers, from_key)
    last = F.filter(
        entries,
        lambda x, i: ~F.exists(F.slice(entries, i + 2, F.size(entries) + 1), lambda y: y["k"] == x["k"]),
    )
    return F.map_from_entries(last)


def _plain(headers: Column) -> tuple[Column, Column]:
    """(applies, map) for the usual headers: distinct names, values all UTF-8, none null. Without
    lambdas, which Spark does not compile: joined with an ASCII separator, and a null replaced by
    a byte that is never UTF-8, the values are valid UTF-8 together exactly when each one is."""
    names, texts = headers["key"], headers["value"].cast("array<string>")
    n = F.size(headers)
    not_utf8 = F.lit(b"\xff").cast("string")
    applies = headers.isNull() | (
        ((n < 2) | (F.size(F.array_distinct(names)) == n))
        & F.is_valid_utf8(F.call_function("array_join", texts, F.lit("\n"), not_utf8))
    )
    empty = F.create_map().cast("map<string,string>")
    return applies, F.coalesce(F.map_from_arrays(names, texts), empty)


def attributes(headers: Column, key: Column) -> Column:
    """map<string,string> of the headers plus the key attribute, later entries winning."""
    odd_key = key.isNotNull() & (F.octet_length(key) > 0) & ~_ordering_key_ok(key)
    plain, fast = _plain(headers)
    found = F.when(plain & ~odd_key, fast).otherwise(_general(headers, key, odd_key))
    # Only records published with numeric labels pay for the lambda.
    marked = F.array_contains(headers["key"], NUMERIC_HEADER)
    hidden = F.map_filter(found, lambda k, _: k != F.lit(NUMERIC_HEADER))
    return F.when(marked, hidden).otherwise(found)


def pubsub_view(records: DataFrame) -> DataFrame:
    """Kafka source rows (read with includeHeaders=true) -> the Pub/Sub columns of COLUMNS."""
    key = F.col("key")
    mid = F.shiftleft(F.col("partition").cast("bigint"), PARTITION_SHIFT).bitwiseOR(F.col("offset"))
    return records.select(
        mid.cast("string").alias("message_id"),
        F.coalesce(F.col("value"), F.lit(b"")).alias("data"),
        attributes(F.col("headers"), key).alias("attributes"),
        F.when(_ordering_key_ok(key), key.cast("string")).otherwise(F.lit("")).alias("ordering_key"),
        F.col("timestamp").alias("publish_time"),
        "partition",
        "offset",
    )
