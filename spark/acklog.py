"""The lease/ack log (docs/lease-log.md) read with Spark SQL, and the anti-join it implies.

Per log partition *p* (= source partition *p*): compaction is applied the way Kafka would (the
latest record per key wins, a tombstone deletes the key); the current checkpoint is the live
`s.<p>.<epoch>` of the highest epoch; a source offset *o* is acknowledged when it lies below
that checkpoint's `watermark`, in one of its `acked` ranges, or in the `ranges` of a live `ack`
command of the same epoch (acks only grow within an epoch, so a command already folded into the
checkpoint changes nothing). Values are decoded with `from_json`.

Two ways to find those records. A stream (`read`) scans the whole log in every micro-batch:
Checkpoints are rewritten every checkpoint interval, so until Kafka compacts them the log holds
many old versions; "latest per key" is computed on small rows (offsets, and the values of
commands only), and then only the current checkpoint's value is decoded. A snapshot
(`read_snapshot`) lets the driver find the current checkpoint from the log's end and read only
the commands after the `log_offset` it names (every command below it is folded into it), and
hands those few values to Spark SQL: the history is never read.

In a stream the ranges of all commands are merged first (`_merged`: a window over each
partition's ranges sorted by start). Ranges become rows without a UDF: each range is cut at
multiples of `BUCKET`; whole buckets become (p, bucket) rows and the ragged ends (p, offset)
rows, so a huge range costs range/BUCKET rows and scattered single acks one row each. Records
are then anti-joined on (p, o < watermark), (p, offset) and (p, offset div BUCKET).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from gateway.leases import logformat
from gateway.leases.commands import Ack, Checkpoint
from gateway.leases.ranges import RangeSet
from spark import driver
from spark.options import KafkaConnection
from spark.subscription import Subscription

log = logging.getLogger(__name__)
BUCKET = 1024
FETCH_BYTES = str(16 << 20)  # per fetch (not 50 MiB): checkpoints may be megabytes each
SEEK_WAIT = 10.0  # seconds a snapshot waits for the checkpoints of an epoch a Seek has just begun


@dataclasses.dataclass(frozen=True, slots=True)
class AckState:
    """Views of a subscription's acknowledged offsets (lazy: re-read when a query runs)."""

    positions: DataFrame  # ack_p, ack_epoch, ack_watermark: the current checkpoint per partition
    offsets: DataFrame  # ack_p, ack_offset: single acknowledged offsets above the watermark
    buckets: DataFrame  # ack_p, ack_bucket: whole acknowledged buckets above the watermark
    known: Mapping[int, tuple[int, int]] | None = None  # the watermarks, when the driver has them
    any_buckets: bool = True  # False when the driver knows `buckets` is empty (no join needed)

    def watermarks(self) -> dict[int, tuple[int, int]]:
        """partition -> (epoch, watermark), collected to the driver."""
        if self.known is not None:
            return dict(self.known)
        return {r["ack_p"]: (r["ack_epoch"], r["ack_watermark"]) for r in self.positions.collect()}


def scan(
    spark: SparkSession,
    sub: Subscription,
    conn: KafkaConnection,
    ranges: Mapping[int, tuple[int, int]] | None = None,
) -> DataFrame:
    """The log topic: all of it, or the offsets [start, end) of some partitions."""
    topic = sub.meta.log_topic
    reader = spark.read.format("kafka").option("kafka.fetch.max.bytes", FETCH_BYTES).options(**conn.source())
    if ranges is None:
        return (
            reader.option("assign", json.dumps({topic: list(range(sub.meta.partitions))}))
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
    return (
        reader.option("assign", json.dumps({topic: sorted(ranges)}))
        .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in ranges.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in ranges.items()}}))
        .load()
    )


def live_keys(raw: DataFrame) -> DataFrame:
    """(p, k, offset, cmd): each live key's latest offset, and the value if it is a command."""
    key = F.col("key").cast("string")
    small = raw.select(
        F.col("partition").alias("p"),
        key.alias("k"),
        "offset",
        F.col("value").isNull().alias("tombstone"),
        F.when(key.startswith(logformat.COMMAND_KEY_PREFIX), F.col("value")).alias("cmd"),
    )
    latest = small.groupBy("p", "k").agg(
        F.max("offset").alias("offset"),
        F.max_by("tombstone", "offset").alias("tombstone"),
        F.max_by("cmd", "offset").alias("cmd"),
    )
    return latest.where(~F.col("tombstone")).drop("tombstone")


def current_checkpoints(live: DataFrame) -> DataFrame:
    """(cp_p, cp_offset): where each partition's checkpoint of the highest epoch is."""
    parts = F.split(F.col("k"), re.escape(logformat.KEY_SEPARATOR))
    epoch = parts[logformat.CHECKPOINT_KEY_EPOCH].cast("bigint")
    return (
        live.where(F.col("k").startswith(logformat.CHECKPOINT_KEY_PREFIX))
        .groupBy("p")
        .agg(F.max_by("offset", epoch).alias("cp_offset"))
        .withColumnRenamed("p", "cp_p")
    )


def _decoded(df: DataFrame, p: str, j: Column, kind: str) -> DataFrame:
    """(p, epoch, watermark, acked, ranges) of the decoded values of one type. `inline` decodes
    each value once: the optimizer would otherwise give every field its own `from_json` of the
    whole text."""
    return (
        df.select(F.col(p).alias("p"), F.inline(F.array(j)))
        .where((F.col(logformat.FIELD_VERSION) == logformat.VERSION) & (F.col(logformat.FIELD_TYPE) == kind))
        .select(
            "p",
            F.coalesce(logformat.FIELD_EPOCH, F.lit(0)).alias("epoch"),
            F.col(logformat.FIELD_WATERMARK).alias("watermark"),
            F.col(logformat.FIELD_ACKED).alias("acked"),
            F.col(logformat.FIELD_RANGES).alias("ranges"),
        )
    )


def _json(value: Column) -> Column:
    return F.from_json(value.cast("string"), logformat.ACKED_SPARK_DDL)


def _as_checkpoints(records: DataFrame) -> DataFrame:
    """Decoded checkpoints, without their bulk when possible: the gateway writes `lease_runs`
    and `attempt_runs` (`leases` and `attempts` in the first format) after `acked`, so the text
    before `,"lease` (logformat.CHECKPOINT_RUNS_MARK; closed) holds all that is needed; any
    other layout is decoded whole."""
    text = F.col("value").cast("string")
    before_runs = F.substring_index(text, logformat.CHECKPOINT_RUNS_MARK, 1)
    head = F.from_json(F.concat(before_runs, F.lit("}")), logformat.ACKED_SPARK_DDL)
    heads = records.select("partition", "value", head.alias("head"))  # one decoding per record
    fields = F.col("head")
    complete = fields[logformat.FIELD_WATERMARK].isNotNull() & fields[logformat.FIELD_ACKED].isNotNull()
    j = F.when(complete, fields).otherwise(_json(F.col("value")))
    return _decoded(heads, "partition", j, logformat.TYPE_CHECKPOINT).select(
        F.col("p").alias("ack_p"),
        F.col("epoch").alias("ack_epoch"),
        F.col("watermark").alias("ack_watermark"),
        "acked",
    )


def read(spark: SparkSession, sub: Subscription, conn: KafkaConnection, snapshot: bool = False) -> AckState:
    """The acknowledged offsets: re-read from the log whenever a query uses them, or, with
    `snapshot`, read once now and fixed."""
    if snapshot:
        return read_snapshot(spark, sub, conn)
    raw = scan(spark, sub, conn)
    live = live_keys(raw)
    where = (F.col("partition") == F.col("cp_p")) & (F.col("offset") == F.col("cp_offset"))
    checkpoints = _as_checkpoints(raw.join(F.broadcast(current_checkpoints(live)), where, "left_semi"))
    return _state(checkpoints, live.where(F.col("cmd").isNotNull()).select("p", "cmd"))


def read_snapshot(
    spark: SparkSession, sub: Subscription, conn: KafkaConnection, seek_wait: float = SEEK_WAIT
) -> AckState:
    """The acknowledged offsets of now, fixed. The driver reads each log partition's current
    checkpoint and the commands written since the log offset it names (librdkafka, a handful of
    records), folds their acks into ranges above the watermark, and hands Spark one row per
    partition: no Spark job, and a plan of a few steps."""
    deadline = time.monotonic() + seek_wait
    while True:
        with ThreadPoolExecutor(max(1, min(8, sub.meta.partitions))) as pool:
            tails = list(
                pool.map(
                    lambda p: driver.log_tail(conn, sub.meta.log_topic, p, sub.meta.epoch),
                    range(sub.meta.partitions),
                )
            )
        missing = [p for p, t in enumerate(tails) if t.checkpoint is None]
        if sub.meta.epoch == 0 or not missing:
            break
        if time.monotonic() > deadline:  # a Seek writes its checkpoints just after the epoch
            raise RuntimeError(
                f"{sub.name}: no checkpoint of epoch {sub.meta.epoch} in partitions {missing}; "
                "a Seek may have failed half-way, seek again"
            )
        time.sleep(0.2)
    acked = [list(_acked(t, sub.meta.epoch)) for t in tails]
    rows = [(p, sub.meta.epoch, t.watermark, json.dumps(acked[p])) for p, t in enumerate(tails)]
    table = spark.createDataFrame(rows, "ack_p INT, ack_epoch BIGINT, ack_watermark BIGINT, acked STRING")
    positions = table.where(F.col("ack_watermark") >= 0).drop("acked")
    r = F.explode(F.from_json("acked", "ARRAY<ARRAY<BIGINT>>")).alias("r")
    ranges = table.select("ack_p", r).select("ack_p", F.col("r")[0].alias("s"), F.col("r")[1].alias("e"))
    whole = any((s + BUCKET - 1) // BUCKET < e // BUCKET for ranges_ in acked for s, e in ranges_)
    known = {p: (sub.meta.epoch, t.watermark) for p, t in enumerate(tails) if t.checkpoint is not None}
    return dataclasses.replace(_bucketed(positions, ranges), known=known, any_buckets=whole)


def _acked(tail: driver.LogTail, epoch: int) -> RangeSet:
    """The acked offsets above the checkpoint's watermark: its `acked` plus the `ack` commands
    of the epoch (an unreadable value is skipped, as the gateway's fold skips it)."""
    acked = RangeSet()
    values = [tail.checkpoint] if tail.checkpoint is not None else []
    for value in [*values, *tail.commands]:
        try:
            cmd = logformat.decode(value)
        except logformat.BadLogRecord:
            log.warning("skipping an unreadable lease-log value: %r", value[:200])
            continue
        if cmd.epoch != epoch:
            continue
        if isinstance(cmd, Ack):
            ranges = cmd.ranges
        elif isinstance(cmd, Checkpoint):
            ranges = cmd.acked
        else:
            continue
        for s, e in ranges:
            acked.add(max(s, tail.watermark), e)
    return acked


def _state(checkpoints: DataFrame, commands: DataFrame) -> AckState:
    """From decoded checkpoints (ack_p, ack_epoch, ack_watermark, acked) and command values
    (p, cmd): the acked ranges above each watermark, bucketed."""
    positions = checkpoints.drop("acked")
    from_checkpoints = checkpoints.select("ack_p", "ack_watermark", F.explode("acked").alias("r"))
    from_commands = (
        _decoded(commands, "p", _json(F.col("cmd")), logformat.TYPE_ACK)
        .select("p", "epoch", F.explode("ranges").alias("r"))
        .join(positions, (F.col("p") == F.col("ack_p")) & (F.col("epoch") == F.col("ack_epoch")))
        .select("ack_p", "ack_watermark", "r")
    )
    ranges = (
        from_checkpoints.unionByName(from_commands)
        .select(
            "ack_p", F.greatest(F.col("r")[0], F.col("ack_watermark")).alias("s"), F.col("r")[1].alias("e")
        )
        .where(F.col("s") < F.col("e"))
    )
    return _bucketed(positions, _merged(ranges))


def _merged(ranges: DataFrame) -> DataFrame:
    """(ack_p, s, e) with overlapping and adjacent ranges joined, per partition. Without it a
    stream whose acks nobody folds (no gateway owns the subscription, and the export job acks
    each batch: the complement of what was acked before) grows one ragged offset per earlier
    ack in every micro-batch; merged, the batches and the holes between them close into one
    range of whole buckets. Islands of a sort by start: a range opens a new island when it
    starts past every end before it."""
    by_start = Window.partitionBy("ack_p").orderBy("s", "e")
    before = by_start.rowsBetween(Window.unboundedPreceding, -1)
    opens = F.coalesce(F.col("s") > F.max("e").over(before), F.lit(True)).cast("int")
    island = F.sum("opens").over(by_start.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    return (
        ranges.withColumn("opens", opens)
        .withColumn("island", island)
        .groupBy("ack_p", "island")
        .agg(F.min("s").alias("s"), F.max("e").alias("e"))
        .drop("island")
    )


def _seq(lo: Column, hi: Column) -> Column:
    """[lo, hi) as an array of offsets (empty when lo >= hi)."""
    return F.when(lo < hi, F.sequence(lo, hi - 1)).otherwise(F.array().cast("array<bigint>"))


def _bucketed(positions: DataFrame, ranges: DataFrame) -> AckState:
    b = F.lit(BUCKET).cast("bigint")
    s, e = F.col("s"), F.col("e")
    first, last = F.floor((s + b - 1) / b), F.floor(e / b)  # whole buckets: [first, last)
    has_whole = first < last
    cut = ranges.select(
        "ack_p",
        F.when(has_whole, _seq(first, last)).otherwise(F.array().cast("array<bigint>")).alias("whole"),
        F.when(has_whole, F.concat(_seq(s, first * b), _seq(last * b, e)))
        .otherwise(_seq(s, e))
        .alias("ragged"),
    )
    offsets = cut.select("ack_p", F.explode("ragged").alias("ack_offset"))
    buckets = cut.select("ack_p", F.explode("whole").alias("ack_bucket"))
    return AckState(positions, offsets, buckets)


def exclude_acked(
    records: DataFrame, state: AckState, broadcast: bool = True, below_watermark: bool = True
) -> DataFrame:
    """`records` (Kafka source rows: partition, offset, ...) minus the acknowledged ones;
    `below_watermark=False` when the read starts at the watermarks of this very state."""

    def side(df: DataFrame) -> DataFrame:
        return F.broadcast(df) if broadcast else df

    part, off = F.col("partition"), F.col("offset")
    out = records
    if below_watermark:
        out = out.join(
            side(state.positions), (part == F.col("ack_p")) & (off < F.col("ack_watermark")), "left_anti"
        )
    out = out.join(side(state.offsets), (part == F.col("ack_p")) & (off == F.col("ack_offset")), "left_anti")
    if not state.any_buckets:
        return out
    bucket = F.floor(off / F.lit(BUCKET))
    return out.join(
        side(state.buckets), (part == F.col("ack_p")) & (bucket == F.col("ack_bucket")), "left_anti"
    )
