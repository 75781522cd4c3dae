"""Publishing from Spark: rows written to a Pub/Sub topic with Spark's own Kafka sink.

    write_topic(df, "projects/p/topics/t", "broker:9092")                    # a batch
    write_topic_stream(df, "projects/p/topics/t", "broker:9092") \\
        .option("checkpointLocation", "/chk/t").start()                     # a stream

Rows have `data` (binary, or a string written as UTF-8), and optionally `attributes`
(map<string,string>) and `ordering_key` (string); a missing or null one is empty. Each row
becomes the record the gateway's Publish writes (gateway/translate/records.py `to_record`):
value = data, headers = attributes (UTF-8 values), key = the ordering key (none if empty), to the
Kafka topic of the topic's resource record. Keyed records go where Kafka's partitioner puts the
key (murmur2: the gateway's librdkafka producer is configured to hash as Java's does, so a key
lands on the same partition whoever publishes it); records without one go to a random partition
among those the topic had when it was made (the partitions the gateway publishes to). Message ids
are (partition, offset) and the publish time is the record timestamp: CreateTime set by the
producer when it sends, or the broker's LogAppendTime on a topic configured so, as for Publish.

Every row is checked with the API's publish limits (gateway/translate/limits.py) in Spark SQL: a
row that breaks one fails the query with INVALID_ARGUMENT's wording. A batch is checked in a
first pass before anything is written (`check_first`, an extra scan of `df`: cache it if it is
costly to compute); a stream's rows in the micro-batch that writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.readwriter import DataStreamWriter

from gateway.translate import limits, names
from spark.options import KafkaConnection, connection
from spark.subscription import DEFAULT_PREFIX, Topic, load_topic

# What the Java producer needs to send what the gateway's producer sends (message.max.bytes
# 12 MB there): the API's 10 MB message plus its key and headers. `kafka_settings` may override.
PRODUCER = {"acks": "all", "enable.idempotence": "true", "max.request.size": "12000000"}


class TopicRefused(ValueError):
    """The topic cannot be published to from Spark (a schema, a reserved Kafka topic)."""


class InvalidMessage(ValueError):
    """A row breaks a limit the API checks on publish."""


def _utf8(s: Column) -> Column:
    return F.is_valid_utf8(s)


def problem(data: Column, attributes: Column, ordering_key: Column) -> Column:
    """Why a message (of non-null columns) would be refused by Publish, or null: the checks of
    limits.check_publish, per message."""
    keys, values = F.map_keys(attributes), F.map_values(attributes)
    n = F.size(attributes)
    size = (
        F.octet_length(data)
        + F.octet_length(ordering_key)
        + F.aggregate(
            F.concat(keys, F.coalesce(values, F.array().cast("array<string>"))),
            F.lit(0).cast("bigint"),
            lambda acc, s: acc + F.coalesce(F.octet_length(s), F.lit(0)),
        )
    )

    def key_where(pred: Callable[[Column], Column]) -> Column:
        """The first attribute key whose entry (key, value) satisfies `pred`, cut to 64 chars."""
        return F.filter(F.map_entries(attributes), pred)[0]["key"].substr(1, limits.ECHO_CHARS)

    return (
        F.when(
            (F.octet_length(data) == 0) & (n == 0),
            F.lit("A message must have non-empty data or at least one attribute."),
        )
        .when(
            n > limits.MAX_ATTRIBUTES,
            F.format_string(f"A message has %d attributes; at most {limits.MAX_ATTRIBUTES} are allowed.", n),
        )
        .when(F.exists(keys, lambda k: k == F.lit("")), F.lit("A message has an empty attribute key."))
        .when(
            F.exists(keys, lambda k: ~_utf8(k)) | F.exists(values, lambda v: v.isNotNull() & ~_utf8(v)),
            F.lit("An attribute key or value is not valid UTF-8."),
        )
        .when(
            F.exists(keys, lambda k: F.octet_length(k) > limits.MAX_ATTRIBUTE_KEY_BYTES),
            F.format_string(
                f"Attribute key %s is longer than {limits.MAX_ATTRIBUTE_KEY_BYTES} bytes.",
                key_where(lambda e: F.octet_length(e["key"]) > limits.MAX_ATTRIBUTE_KEY_BYTES),
            ),
        )
        .when(
            F.exists(values, lambda v: v.isNull()),
            F.format_string("Attribute %s has a null value.", key_where(lambda e: e["value"].isNull())),
        )
        .when(
            F.exists(values, lambda v: F.octet_length(v) > limits.MAX_ATTRIBUTE_VALUE_BYTES),
            F.format_string(
                f"Value of attribute %s is longer than {limits.MAX_ATTRIBUTE_VALUE_BYTES} bytes.",
                key_where(lambda e: F.octet_length(e["value"]) > limits.MAX_ATTRIBUTE_VALUE_BYTES),
            ),
        )
        .when(
            F.exists(keys, lambda k: k.startswith("goog")),
            F.format_string(
                "Attribute key %s is reserved: keys must not start with 'goog'.",
                key_where(lambda e: e["key"].startswith("goog")),
            ),
        )
        .when(~_utf8(ordering_key), F.lit("The ordering key is not valid UTF-8."))
        .when(
            F.octet_length(ordering_key) > limits.MAX_ORDERING_KEY_BYTES,
            F.lit(f"The ordering key is longer than {limits.MAX_ORDERING_KEY_BYTES} bytes."),
        )
        .when(
            size > limits.MAX_PUBLISH_BYTES,
            F.format_string(f"A message is %d bytes; at most {limits.MAX_PUBLISH_BYTES} are allowed.", size),
        )
    )


def _columns(df: DataFrame) -> tuple[Column, Column, Column]:
    """(data, attributes, ordering_key) of `df`, never null, with the types the API has."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    if "data" not in fields:
        raise InvalidMessage("A DataFrame written to a topic needs a column `data` (binary or string).")
    data = F.col("data")
    if isinstance(fields["data"], T.StringType):
        data = F.encode(data, "UTF-8")
    elif not isinstance(fields["data"], T.BinaryType):
        raise InvalidMessage(f"Column `data` must be binary or string, not {fields['data'].simpleString()}.")
    empty_map = F.create_map().cast("map<string,string>")
    attributes = F.coalesce(F.col("attributes"), empty_map) if "attributes" in fields else empty_map
    kind = fields.get("attributes")
    if kind is not None and not (
        isinstance(kind, T.MapType)
        and isinstance(kind.keyType, T.StringType)
        and isinstance(kind.valueType, T.StringType)
    ):
        raise InvalidMessage(
            f"Column `attributes` must be map<string,string>, not {fields['attributes'].simpleString()}."
        )
    ordering_key = F.coalesce(F.col("ordering_key"), F.lit("")) if "ordering_key" in fields else F.lit("")
    if "ordering_key" in fields and not isinstance(fields["ordering_key"], T.StringType):
        raise InvalidMessage("Column `ordering_key` must be a string.")
    return F.coalesce(data, F.lit(b"")), attributes, ordering_key


def records(df: DataFrame, topic: Topic) -> DataFrame:
    """The Kafka sink's rows (key, value, headers, partition) for the messages of `df`; a row
    the API would refuse fails the query when it is evaluated (`raise_error`)."""
    data, attributes, ordering_key = _columns(df)
    why = problem(data, attributes, ordering_key)
    keyed = F.octet_length(ordering_key) > 0
    headers = F.transform(
        F.map_entries(attributes),
        lambda e: F.struct(e["key"].alias("key"), F.encode(e["value"], "UTF-8").alias("value")),
    )
    return df.select(
        F.when(why.isNotNull(), F.raise_error(F.concat(F.lit("Invalid message: "), why)))
        .otherwise(F.when(keyed, F.encode(ordering_key, "UTF-8")))
        .alias("key"),
        data.alias("value"),
        headers.alias("headers"),
        # keyed: null, Kafka's partitioner decides (murmur2 of the key); else one of the topic's own
        F.when(keyed, F.lit(None))
        .otherwise(F.floor(F.rand() * topic.meta.partitions))
        .cast("int")
        .alias("partition"),
    )


def _checked_topic(topic: str, conn: KafkaConnection, internal_prefix: str) -> Topic:
    found = load_topic(topic, conn, internal_prefix)
    if found.schema:
        raise TopicRefused(
            f"Topic {topic} has a schema ({found.schema}): Spark cannot validate messages against "
            "it, so it does not publish there. Publish through the gateway's API instead."
        )
    if names.reserved_kafka_topic(found.meta.kafka_topic, internal_prefix):
        raise TopicRefused(f"Topic {topic} is stored on a reserved Kafka topic {found.meta.kafka_topic!r}.")
    return found


def _options(conn: KafkaConnection, kafka_topic: str) -> dict[str, str]:
    producer = {f"kafka.{k}": v for k, v in PRODUCER.items()}
    return {**producer, **conn.sink(), "topic": kafka_topic}


def first_problem(df: DataFrame) -> str | None:
    """The first reason a row of `df` would be refused, None if none would be."""
    data, attributes, ordering_key = _columns(df)
    found = df.select(problem(data, attributes, ordering_key).alias("why")).where("why IS NOT NULL").limit(1)
    rows = found.collect()
    return str(rows[0]["why"]) if rows else None


def write_topic(
    df: DataFrame,
    topic: str,
    bootstrap: str | KafkaConnection,
    internal_prefix: str = DEFAULT_PREFIX,
    *,
    kafka_settings: Mapping[str, str] | None = None,
    check_first: bool = True,
) -> None:
    """Publish every row of the batch DataFrame `df` to the Pub/Sub topic `topic`.

    TopicNotFound if the topic does not exist, TopicRefused if it has a schema, InvalidMessage
    (before anything is written, with `check_first`) if a row breaks a publish limit. Spark's
    Kafka sink is at-least-once: a task retried after a failure may publish its rows again, as
    a client retrying a Publish may."""
    if df.isStreaming:
        raise ValueError("write_topic takes a batch DataFrame; use write_topic_stream for a stream.")
    conn = connection(bootstrap, kafka_settings)
    found = _checked_topic(topic, conn, internal_prefix)
    if check_first:
        why = first_problem(df)
        if why is not None:
            raise InvalidMessage(f"Invalid message: {why} Nothing was written to {topic}.")
    records(df, found).write.format("kafka").options(**_options(conn, found.meta.kafka_topic)).save()


def write_topic_stream(
    df: DataFrame,
    topic: str,
    bootstrap: str | KafkaConnection,
    internal_prefix: str = DEFAULT_PREFIX,
    *,
    kafka_settings: Mapping[str, str] | None = None,
) -> DataStreamWriter:
    """A stream writer publishing the rows of the streaming DataFrame `df` to `topic`: set its
    checkpointLocation (and trigger) and `start()` it. A row that breaks a publish limit fails
    the micro-batch that holds it (rows of that batch written before it stay published)."""
    if not df.isStreaming:
        raise ValueError("write_topic_stream takes a streaming DataFrame; use write_topic for a batch.")
    conn = connection(bootstrap, kafka_settings)
    found = _checked_topic(topic, conn, internal_prefix)
    return records(df, found).writeStream.format("kafka").options(**_options(conn, found.meta.kafka_topic))
