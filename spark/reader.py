"""Reading a subscription: its backlog as a batch DataFrame, or its records as a stream."""

from __future__ import annotations

import json
from collections.abc import Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from gateway.clock import now_ms
from spark import acklog, driver, filters
from spark.messages import pubsub_view
from spark.options import KafkaConnection, connection
from spark.subscription import DEFAULT_PREFIX, Subscription, load, require_readable

EARLIEST = -2  # in Spark's per-partition offsets JSON


def start_offsets(sub: Subscription, state: acklog.AckState, committed: Mapping[int, int]) -> dict[int, int]:
    """Where the subscription's backlog starts in each partition: the current checkpoint's
    watermark, or the group's committed offset if larger and no seek happened (epoch 0)."""
    marks = state.watermarks()
    starts: dict[int, int] = {}
    for p in range(sub.meta.partitions):
        if p not in marks:
            starts[p] = committed.get(p, EARLIEST)
            continue
        epoch, watermark = marks[p]
        starts[p] = max(watermark, committed.get(p, watermark)) if epoch == 0 else watermark
    return starts


def _offsets(
    sub: Subscription, conn: KafkaConnection, use_committed: bool
) -> tuple[dict[int, int], dict[int, int]]:
    """(committed, end) offsets of the subscription's topic, from the driver."""
    with driver.consumer(conn, sub.meta.group_id) as c:
        committed = (
            driver.committed_offsets(c, sub.meta.kafka_topic, sub.meta.partitions) if use_committed else {}
        )
        return committed, driver.end_offsets(c, sub.meta.kafka_topic, sub.meta.partitions)


def _per_partition(topic: str, where: Mapping[int, int]) -> str:
    return json.dumps({topic: {str(p): o for p, o in where.items()}})


def _source(sub: Subscription, conn: KafkaConnection, starts: Mapping[int, int]) -> dict[str, str]:
    return {
        **conn.source(),
        "assign": json.dumps({sub.meta.kafka_topic: list(range(sub.meta.partitions))}),
        "startingOffsets": _per_partition(sub.meta.kafka_topic, starts),
        "includeHeaders": "true",
    }


def _wanted(df: DataFrame, sub: Subscription, now_ms: Column) -> DataFrame:
    """What the gateway would deliver of `df` (Pub/Sub columns): the rows the subscription's
    filter matches, published no longer than its retention before `now_ms` (epoch
    milliseconds). gateway/core/runner.py `_unwanted` acks the others as it fetches them."""
    oldest = now_ms - F.lit(sub.retention_ms)
    return filters.apply(df, sub.filter).where(F.unix_millis(F.col("publish_time")) >= oldest)


def read_backlog(
    spark: SparkSession,
    subscription: str,
    bootstrap: str | KafkaConnection,
    internal_prefix: str = DEFAULT_PREFIX,
    *,
    kafka_settings: Mapping[str, str] | None = None,
    broadcast_acks: bool = True,
    use_committed: bool = True,
) -> DataFrame:
    """The messages of `subscription` not acknowledged when this is called (including those
    leased to a subscriber right now), as a DataFrame that returns the same rows on every action:
    the ack state is read once here and the read ends at each partition's end offset of now.

    Columns: message_id, data, attributes, ordering_key, publish_time, partition, offset.
    Only messages the subscription's filter matches, published within its retention before
    this call, are included (docs/spark.md, "Filters, retention, dead letters").
    """
    conn = connection(bootstrap, kafka_settings)
    now = now_ms()
    sub = load(subscription, conn, internal_prefix)
    require_readable(sub)
    state = acklog.read(spark, sub, conn, snapshot=True)
    committed, ends = _offsets(sub, conn, use_committed)
    starts = {p: min(o, ends[p]) if o >= 0 else o for p, o in start_offsets(sub, state, committed).items()}
    records = (
        spark.read.format("kafka")
        .options(**_source(sub, conn, starts))
        .option("endingOffsets", _per_partition(sub.meta.kafka_topic, ends))
        .load()
    )
    view = pubsub_view(acklog.exclude_acked(records, state, broadcast_acks, below_watermark=False))
    return _wanted(view, sub, F.lit(now))


def read_stream(
    spark: SparkSession,
    subscription: str,
    bootstrap: str | KafkaConnection,
    internal_prefix: str = DEFAULT_PREFIX,
    *,
    kafka_settings: Mapping[str, str] | None = None,
    options: Mapping[str, str] | None = None,
    broadcast_acks: bool = True,
    use_committed: bool = True,
) -> DataFrame:
    """The subscription's records as a structured stream, from its watermarks onward.

    A new query starts at each partition's watermark (a restarted query continues from its
    checkpoint). Every micro-batch re-reads the lease/ack log and drops what it says is
    acknowledged at that moment (through the gateway, or by `spark.ack`). `options` go to the
    Kafka source (e.g. ``{"maxOffsetsPerTrigger": "10000"}``). As `read_backlog`, only what
    the filter matches, published within the retention before the micro-batch runs.
    """
    conn = connection(bootstrap, kafka_settings)
    sub = load(subscription, conn, internal_prefix)
    require_readable(sub)
    state = acklog.read(spark, sub, conn)
    committed, _ = _offsets(sub, conn, use_committed)
    source = {**_source(sub, conn, start_offsets(sub, state, committed)), **(options or {})}
    records = spark.readStream.format("kafka").options(**source).load()
    view = pubsub_view(acklog.exclude_acked(records, state, broadcast_acks))
    return _wanted(view, sub, F.unix_millis(F.current_timestamp()))
