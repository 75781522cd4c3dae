"""Acknowledging from Spark: `ack` commands written to the lease/ack log with Spark's Kafka sink.

Offsets become half-open ranges per partition (gaps-and-islands over a window, no UDF) and one
command per source partition (more only past `MAX_RANGES` ranges), written to the log partition
of the same number with the key `e.<p>.<writer>.<seq>` and the subscription's current epoch:

    {"v":1,"type":"ack","p":0,"epoch":0,"ranges":[[10,20]]}

The partition's owner (a gateway process) applies them and advances the watermark; Pub/Sub
subscribers are not sent those messages again. Acking an offset twice is harmless.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from gateway.leases import logformat
from spark import driver
from spark.options import KafkaConnection, connection
from spark.subscription import DEFAULT_PREFIX, load

MAX_RANGES = 50_000  # per command: keeps a value far below the log's max.message.bytes (16 MiB)


def writer_id() -> str:
    return f"spark-{uuid.uuid4().hex[:8]}"


def commands(df: DataFrame, epoch: int, writer: str) -> DataFrame:
    """(partition, key, value) of the `ack` commands covering the (partition, offset) of `df`."""
    offsets = df.select(F.col("partition").cast("int").alias("p"), F.col("offset").cast("bigint").alias("o"))
    by_offset = Window.partitionBy("p").orderBy("o")
    ranges = (
        offsets.withColumn("island", F.col("o") - F.dense_rank().over(by_offset))
        .groupBy("p", "island")
        .agg(F.min("o").alias("s"), (F.max("o") + 1).alias("e"))
    )
    by_start = Window.partitionBy("p").orderBy("s")
    chunks = (
        ranges.withColumn("seq", F.floor((F.row_number().over(by_start) - 1) / F.lit(MAX_RANGES)))
        .groupBy("p", "seq")
        .agg(F.sort_array(F.collect_list(F.array("s", "e"))).alias("ranges"))
    )
    value = F.to_json(  # the fields in this order, as Spark has always written them
        F.struct(
            F.lit(logformat.VERSION).alias(logformat.FIELD_VERSION),
            F.lit(logformat.TYPE_ACK).alias(logformat.FIELD_TYPE),
            F.col("p").alias(logformat.FIELD_PARTITION),
            F.lit(epoch).cast("bigint").alias(logformat.FIELD_EPOCH),
            F.col("ranges").alias(logformat.FIELD_RANGES),
        )
    )
    sep = logformat.KEY_SEPARATOR
    key = F.concat(
        F.lit(logformat.COMMAND_KEY_PREFIX), F.concat_ws(sep, F.col("p"), F.lit(writer), F.col("seq"))
    )
    return chunks.select(F.col("p").alias("partition"), key.alias("key"), value.alias("value"))


def ack(
    df: DataFrame,
    subscription: str,
    bootstrap: str | KafkaConnection,
    internal_prefix: str = DEFAULT_PREFIX,
    *,
    kafka_settings: Mapping[str, str] | None = None,
    epoch: int | None = None,
    writer: str | None = None,
    applied_timeout: float = 30.0,
) -> None:
    """Acknowledge every message of `df` (a batch DataFrame with `partition` and `offset`
    columns, e.g. from `read_backlog`, or the batch of a `foreachBatch`) for `subscription`.

    Returns once the commands are durable in Kafka and every gateway process that owns a
    partition of the subscription has applied them (docs/spark.md, "Acknowledging"): from then
    on no subscriber is sent those messages again. TimeoutError if an owner has not applied them
    within `applied_timeout` seconds (the acks stay written: they take effect when applied).
    `epoch` defaults to the subscription's current epoch (acks written in an epoch a later Seek
    replaced are ignored, as in Pub/Sub).
    """
    if df.isStreaming:
        raise TypeError("ack() takes a batch DataFrame: call it inside foreachBatch")
    conn = connection(bootstrap, kafka_settings)
    sub = load(subscription, conn, internal_prefix)
    cmds = commands(df, sub.meta.epoch if epoch is None else epoch, writer or writer_id())
    cmds.write.format("kafka").options(**conn.sink()).option("topic", sub.meta.log_topic).save()
    driver.await_applied(
        conn,
        sub.meta.log_topic,
        sub.meta.partitions,
        sub.meta.group_id,
        sub.meta.applied_group,
        applied_timeout,
    )
