"""Filters in Spark SQL (spark/filters.py) against the gateway's predicate, on the same records.

Every (filter, record) pair goes through both paths from the Kafka record on: the gateway's
`to_message(record).attributes` and `filters.parse`, and Spark's `pubsub_view` and
`compile_filter`. No broker: the records are synthetic rows of the Kafka source's schema.
"""

from __future__ import annotations

import datetime
import random

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from gateway.translate import filters
from gateway.translate.records import record, to_message
from spark.filters import compile_filter
from spark.messages import pubsub_view
from tests.spark.conftest import SPARK_WARNINGS
from tests.spark.test_mapping import KAFKA_SCHEMA

pytestmark = SPARK_WARNINGS

Headers = list[tuple[str, bytes | None]] | None


def _h(*pairs: tuple[str, str | bytes | None]) -> Headers:
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]


# (key, headers) of the records every filter is tried on
RECORDS: list[tuple[bytes | None, Headers]] = [
    (None, None),
    (None, []),
    (None, _h(("a", "1"))),
    (None, _h(("a", ""))),
    (None, _h(("a", None))),  # a null header value is the empty attribute
    (None, _h(("a", "12"), ("b", "2"))),
    (None, _h(("b", "x1"), ("c", ""))),
    (None, _h(("a b", "v"), ("ü", "ü"))),
    (None, _h(("x.y", "é"), ("a", "é"))),
    (None, _h(("-dash", "1"), ("_u", "2"))),
    (None, _h(("bin", b"\x00\xff"))),  # not UTF-8: the attribute bin-base64 = "AP8="
    (None, _h(("a", b"\xff"))),  # a-base64, and no attribute a
    (None, _h(("a", b"\xed\xa0\x80"))),  # an encoded surrogate is not UTF-8 either
    (b"\xff", _h(("a", "1"))),  # a key that is not UTF-8: kafka-key-base64
    (b"k" * 1025, None),  # too long for an ordering key: kafka-key-base64 too
    (b"ok", _h(("kafka-key-base64", "x"))),  # a valid key adds nothing
    (None, _h(("a", "\x00"), ("nul\x00", "1"))),
    (None, _h(("e", "😀"), ("A", "1"))),
    (None, _h(("a", "1"), ("a", "2"))),  # equal names: the later wins
    (None, _h(("a", 'say "hi"'), ("b", "it's"))),
    (None, _h(("a", "é"), ("b", "xyz"))),
    (None, _h(("a", "\n\t"), ("b", "\\"))),
    (None, _h(("zz", "1"), ("a", "Ã©"))),
]

FILTERS = [
    "attributes:a",
    "attributes:A",
    'attributes:"a b"',
    'attributes:"ü"',
    "attributes:-dash",
    "attributes:_u",
    "attributes:bin-base64",
    'attributes.bin-base64 = "AP8="',
    "attributes:a-base64",
    "attributes:kafka-key-base64",
    'attributes.kafka-key-base64 = "/w=="',
    'attributes.a = "1"',
    'attributes.a != "1"',
    'attributes.a = ""',
    'attributes.a != ""',
    'attributes.zz != "1"',  # a missing key is not equal
    'hasPrefix(attributes.a, "")',
    'hasPrefix(attributes.a, "1")',
    'hasPrefix(attributes.a, "é")',
    'hasPrefix(attributes.a, "\\xc3")',  # a code point, not a byte: never a prefix of "é"
    'hasPrefix(attributes.e, "😀")',
    'attributes."x.y" = "é"',
    "attributes.'x.y' = '\\u00e9'",
    'attributes.a = "\\u00e9"',
    'attributes.a = "\\303\\251"',  # octal escapes are code points: "Ã©", not "é"
    'attributes.a = "\\x00"',
    'attributes:"nul\\x00"',
    'attributes.a = "\\uD800"',  # a lone surrogate: equals no attribute
    'attributes.a != "\\uD800"',
    'hasPrefix(attributes.a, "\\uD800")',
    'attributes:"\\uD800"',
    'NOT attributes."\\uDC00" = "x"',
    'attributes.a = "say \\"hi\\""',
    "attributes.b = 'it\\'s'",
    'attributes.a = "\\n\\t" AND attributes.b = "\\\\"',
    "NOT attributes:a",
    "-attributes:a",
    "- attributes:a",
    'attributes:a AND attributes.b != "2"',
    "attributes:a OR attributes:b OR attributes:c",
    'NOT (attributes.a = "1" OR hasPrefix(attributes.b, "x")) AND attributes:"ü"',
    '(attributes:a AND NOT attributes:b) OR (attributes.c = "" AND -attributes.a = "1")',
    'NOT NOT attributes.a != "12"',
]


def _check(spark: SparkSession, texts: list[str], records: list[tuple[bytes | None, Headers]]) -> int:
    """Every filter on every record, through both paths; the number of (filter, record) pairs."""
    base = datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)
    rows = [(key, b"", 0, i, base, headers) for i, (key, headers) in enumerate(records)]
    view = pubsub_view(spark.createDataFrame(rows, KAFKA_SCHEMA))
    conds = [compile_filter(t) for t in texts]
    assert all(c is not None for c in conds)
    got = {
        r["offset"]: r
        for r in view.select(
            "offset", *(c.alias(f"f{i}") for i, c in enumerate(conds) if c is not None)
        ).collect()
    }
    predicates = [filters.parse(t, max_bytes=None) for t in texts]  # as delivery compiles them
    mismatches = []
    for i, (key, headers) in enumerate(records):
        attributes = to_message(record(0, i, 0, key, None, headers)).attributes
        for j, (text, predicate) in enumerate(zip(texts, predicates, strict=True)):
            assert predicate is not None
            if predicate(attributes) is not got[i][f"f{j}"]:
                mismatches.append((text, attributes, predicate(attributes), got[i][f"f{j}"]))
    assert not mismatches
    return len(texts) * len(records)


def test_spark_and_the_gateway_agree_on_every_case(spark: SparkSession) -> None:
    assert _check(spark, FILTERS, RECORDS) == len(FILTERS) * len(RECORDS)


def test_each_table_filter_matches_some_record_and_misses_another() -> None:
    """The table is not vacuous: each filter tells records apart (lone surrogates excepted)."""
    attrs = [to_message(record(0, i, 0, k, None, h)).attributes for i, (k, h) in enumerate(RECORDS)]
    for text in FILTERS:
        predicate = filters.parse(text)
        assert predicate is not None
        results = {predicate(a) for a in attrs}
        assert results == {True, False} or "\\uD800" in text or "\\uDC00" in text, text


KEYS = ["a", "b", "c", "a b", "ü"]
VALUES = ["", "1", "12", "é", "x1"]


def _quoted(key: str) -> str:
    return key if key.isascii() and key.replace("-", "").replace("_", "").isalnum() else f'"{key}"'


def _random_filter(rng: random.Random, depth: int = 0) -> str:
    choice = rng.randrange(7 if depth < 3 else 4)
    key, value = _quoted(rng.choice(KEYS)), rng.choice(VALUES)
    if choice == 0:
        return f"attributes:{key}"
    if choice == 1:
        return f'attributes.{key} {rng.choice(["=", "!="])} "{value}"'
    if choice == 2:
        return f'hasPrefix(attributes.{key}, "{value[: rng.randrange(3)]}")'
    if choice == 3:
        return f"NOT {_random_filter(rng, depth + 1)}"
    op = rng.choice([" AND ", " OR "])
    parts = [_random_filter(rng, depth + 1) for _ in range(rng.randrange(2, 4))]
    return "(" + op.join(parts) + ")"


@pytest.mark.parametrize("seed", [1, 2])
def test_spark_and_the_gateway_agree_on_random_filters(spark: SparkSession, seed: int) -> None:
    rng = random.Random(seed)
    texts = [_random_filter(rng) for _ in range(60)]
    records: list[tuple[bytes | None, Headers]] = [
        (None, _h(*((k, rng.choice(VALUES)) for k in rng.sample(KEYS, rng.randrange(len(KEYS) + 1)))))
        for _ in range(40)
    ]
    assert _check(spark, texts, records) == 2400


def test_the_empty_filter_is_no_condition(spark: SparkSession) -> None:
    assert compile_filter("") is None
    assert compile_filter("  \n") is None
    assert compile_filter("attributes:a", F.col("x")) is not None
