"""The Spark SQL pieces against the gateway's pure code, on synthetic rows (no broker)."""

from __future__ import annotations

import datetime
import json
import random

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from gateway.leases import logformat
from gateway.leases.commands import Ack, Checkpoint
from gateway.translate.records import message_id, record, to_message
from spark import acklog
from spark.acks import commands
from spark.messages import pubsub_view
from tests.spark.conftest import SPARK_WARNINGS

pytestmark = SPARK_WARNINGS

KAFKA_SCHEMA = T.StructType(
    [
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField(
            "headers",
            T.ArrayType(
                T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
            ),
        ),
    ]
)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

CASES: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]] = [
    (None, b"plain", None),
    (b"k1", b"with key", [("a", b"1"), ("b", "é".encode())]),
    (b"", b"empty key", []),
    (b"\xff\xfe", b"binary key", [("a", b"x")]),
    (b"k" * 1025, b"long key", None),
    (b"k" * 1024, b"longest key", None),
    (None, None, [("bin", b"\x00\xff" * 60), ("none", None)]),
    (None, b"dupes", [("a", b"1"), ("a", b"2"), ("a-base64", b"3"), ("a", b"\xff")]),
    (b"\xc3", b"key attribute wins", [("kafka-key-base64", b"header")]),
    (b"k", b"a null value", [("a", b"1"), ("none", None)]),
    (None, b"numeric labels", [("n", b"5"), ("goog-gateway-numeric-labels", b'["n"]')]),
    (b"\xc3", b"numeric, odd key", [("goog-gateway-numeric-labels", b"[]"), ("a", b"\xff")]),
]


def test_pubsub_view_matches_the_gateway(spark: SparkSession) -> None:
    base = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    rows = [
        (key, value, i % 3, 1_000_000_000 + i, base + datetime.timedelta(milliseconds=i), headers)
        for i, (key, value, headers) in enumerate(CASES)
    ]
    got = {r["offset"]: r for r in pubsub_view(spark.createDataFrame(rows, KAFKA_SCHEMA)).collect()}
    for key, value, p, offset, ts, headers in rows:
        want = to_message(record(p, offset, int((ts - EPOCH).total_seconds() * 1000), key, value, headers))
        row = got[offset]
        assert row["message_id"] == want.message_id == message_id(p, offset)
        assert bytes(row["data"]) == want.data
        assert row["attributes"] == want.attributes, value
        assert row["ordering_key"] == want.ordering_key, value
        assert row["publish_time"].replace(tzinfo=datetime.UTC) == ts


def test_ranges_become_offsets_and_whole_buckets(spark: SparkSession) -> None:
    b = acklog.BUCKET
    ranges = [
        (0, 5, 6),
        (0, 10, 10 + 3 * b + 7),
        (0, 2 * b - 1, 4 * b + 1),
        (1, 3 * b, 5 * b),
        (1, 7, 9),
        (2, b - 2, b + 2),
    ]
    df = spark.createDataFrame(ranges, "ack_p INT, s BIGINT, e BIGINT")
    positions = spark.createDataFrame([(0, 0, 0)], "ack_p INT, ack_epoch BIGINT, ack_watermark BIGINT")
    state = acklog._bucketed(positions, df)
    covered: set[tuple[int, int]] = {(r["ack_p"], r["ack_offset"]) for r in state.offsets.collect()}
    whole = state.buckets.collect()
    assert len(whole) <= sum((e - s) // b + 1 for _, s, e in ranges)
    for r in whole:
        covered |= {(r["ack_p"], o) for o in range(r["ack_bucket"] * b, (r["ack_bucket"] + 1) * b)}
    assert covered == {(p, o) for p, s, e in ranges for o in range(s, e)}


def test_ack_commands_are_log_records(spark: SparkSession) -> None:
    rng = random.Random(7)
    offsets = {p: sorted(rng.sample(range(10_000), 300)) for p in range(3)}
    offsets[1] += offsets[1][-5:]  # duplicates are harmless
    df = spark.createDataFrame(
        [(p, o) for p, os in offsets.items() for o in os], "partition INT, offset BIGINT"
    )
    rows = commands(df, epoch=3, writer="spark-test").collect()
    assert sorted(r["partition"] for r in rows) == [0, 1, 2]
    for r in rows:
        assert r["key"] == f"e.{r['partition']}.spark-test.0"
        cmd = logformat.decode(r["value"].encode())
        assert isinstance(cmd, Ack) and cmd.partition == r["partition"] and cmd.epoch == 3
        acked = {o for s, e in cmd.ranges for o in range(s, e)}
        assert acked == set(offsets[r["partition"]])


def test_ack_commands_are_pinned_byte_for_byte(spark: SparkSession) -> None:
    """What Spark writes (its own field order, not encode's): existing readers depend on it."""
    df = spark.createDataFrame([(2, 5), (2, 6), (2, 9)], "partition INT, offset BIGINT")
    [row] = commands(df, epoch=3, writer="spark-w").collect()
    assert row["key"] == logformat.command_key(2, "spark-w", 0).decode() == "e.2.spark-w.0"
    assert row["value"] == '{"v":1,"type":"ack","p":2,"epoch":3,"ranges":[[5,7],[9,10]]}'


def test_the_log_schema_reads_what_encode_writes(spark: SparkSession) -> None:
    schema = T.StructType.fromDDL(logformat.ACKED_SPARK_DDL)
    assert tuple(schema.fieldNames()) == logformat.ACKED_FIELDS
    values = [
        (0, logformat.encode(Ack(0, ((10, 20),), 4))),
        (1, logformat.encode(Checkpoint(1, 7, ((8, 9),), ((9, 11, 1, 5),), ((9, 11, 1),), 4, log_offset=3))),
    ]
    df = spark.createDataFrame(values, "partition INT, value BINARY")
    got = {
        r["partition"]: r["j"] for r in df.select("partition", acklog._json(df["value"]).alias("j")).collect()
    }
    assert got[0].asDict() == {
        "v": 1,
        "type": "ack",
        "epoch": 4,
        "watermark": None,
        "acked": None,
        "ranges": [[10, 20]],
    }
    assert got[1].asDict() == {
        "v": 1,
        "type": "checkpoint",
        "epoch": 4,
        "watermark": 7,
        "acked": [[8, 9]],
        "ranges": None,
    }


def test_checkpoints_decode_in_any_key_order(spark: SparkSession) -> None:
    cp = Checkpoint(0, 10, ((11, 12), (14, 20)), ((12, 13, 1, 1700000000000),), ((12, 13, 1),), 2)
    ours = logformat.encode(cp)
    other = json.dumps(
        {
            "lease_runs": [[12, 13, 1, 1]],
            "v": 1,
            "p": 1,
            "type": "checkpoint",
            "acked": [[11, 12]],
            "attempt_runs": [],
            "watermark": 10,
            "epoch": 2,
        }
    ).encode()
    first_format = (
        b'{"v":1,"type":"checkpoint","p":2,"epoch":2,"watermark":7,"acked":[[8,9]],'
        b'"leases":[[12,1,1]],"attempts":[[12,1]]}'
    )
    df = spark.createDataFrame([(0, ours), (1, other), (2, first_format)], "partition INT, value BINARY")
    got = {r["ack_p"]: r for r in acklog._as_checkpoints(df).collect()}
    assert (got[0]["ack_epoch"], got[0]["ack_watermark"], got[0]["acked"]) == (2, 10, [[11, 12], [14, 20]])
    assert (got[1]["ack_epoch"], got[1]["ack_watermark"], got[1]["acked"]) == (2, 10, [[11, 12]])
    assert (got[2]["ack_epoch"], got[2]["ack_watermark"], got[2]["acked"]) == (2, 7, [[8, 9]])


def test_overlapping_and_adjacent_ranges_merge_into_one_per_island(spark: SparkSession) -> None:
    """What a stream's acks look like with nobody folding them: each export batch acks the
    complement of what was acked before it. Merged, batches and holes close into one range."""
    earlier = [(0, o, o + 1) for o in range(100, 1100, 10)]  # scattered single acks
    batch = [(0, o + 1, o + 10) for o in range(100, 1100, 10)]  # the rest of [100, 1100)
    apart = [(0, 2000, 2100), (0, 2050, 2060), (1, 5, 7), (1, 7, 9), (1, 20, 30)]
    df = spark.createDataFrame(earlier + batch + apart, "ack_p INT, s BIGINT, e BIGINT")
    got = sorted((r["ack_p"], r["s"], r["e"]) for r in acklog._merged(df).collect())
    assert got == [(0, 100, 1100), (0, 2000, 2100), (1, 5, 9), (1, 20, 30)]
