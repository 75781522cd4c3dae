"""Publishing from Spark (spark/sink.py): what the official client receives through the gateway
is what was written, and what the API refuses is refused."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from google.cloud import pubsub_v1
from google.pubsub_v1 import types
from google.pubsub_v1.types import Encoding, Schema
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from gateway.errors import InvalidArgument
from gateway.translate import limits
from gateway.translate.records import parse_message_id
from spark.options import connection
from spark.sink import InvalidMessage, TopicRefused, first_problem, problem, write_topic, write_topic_stream
from spark.subscription import TopicNotFound, load_topic
from tests.e2e.clients import clients, pull_nothing
from tests.gateways import GatewayProcess, emulator_env
from tests.spark.conftest import SPARK_WARNINGS

pytestmark = [pytest.mark.integration, *SPARK_WARNINGS]
Names = Callable[..., str]
SCHEMA = T.StructType(
    [
        T.StructField("data", T.BinaryType()),
        T.StructField("attributes", T.MapType(T.StringType(), T.StringType())),
        T.StructField("ordering_key", T.StringType()),
    ]
)
Message = tuple[bytes, dict[str, str], str]

MESSAGES: list[Message] = [
    (b"plain", {}, ""),
    (b"", {"only": "attributes"}, ""),
    (b"\x00\xff binary", {"a": "1", "ü x": "é 😀", "empty": ""}, "k1"),
    (b"keyed", {}, "k1"),
    (b"other key", {"quote": 'say "hi"'}, "ключ"),
    (
        b"x" * 100_000,
        {"k" * limits.MAX_ATTRIBUTE_KEY_BYTES: "v" * limits.MAX_ATTRIBUTE_VALUE_BYTES},
        "k" * 1024,
    ),
    *((f"m{i}".encode(), {"n": str(i)}, f"k{i % 3}" if i % 2 else "") for i in range(40)),
]


def _drain(sub: pubsub_v1.SubscriberClient, subscription: str, n: int) -> list[types.ReceivedMessage]:
    """Pull and acknowledge until `n` messages arrived (an ordered subscription delivers the
    next message of a key only once the one before is acknowledged), in delivery order."""
    got: list[types.ReceivedMessage] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        batch = sub.pull(subscription=subscription, max_messages=100, timeout=10).received_messages
        if batch:
            sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in batch])
        got.extend(batch)
    return got


def _setup(
    gw: GatewayProcess, names: Names
) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient, str, str]:
    with emulator_env(gw.address):
        pub = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
        )
    sub = clients(gw)[1]
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(request={"name": subscription, "topic": topic, "enable_message_ordering": True})
    return pub, sub, topic, subscription


def test_rows_written_by_spark_arrive_as_published(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    gw = shared_gateway
    pub, sub, topic, subscription = _setup(gw, names)
    before = datetime.datetime.now(tz=datetime.UTC) - datetime.timedelta(seconds=1)
    # one Spark task: rows of one ordering key are published in their order
    write_topic(spark.createDataFrame(MESSAGES, SCHEMA).coalesce(1), topic, gw.bootstrap, gw.prefix)
    after = datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(seconds=1)
    # the same ordering key published through the API lands on the same partition
    through_api = pub.publish(topic, b"through the API", ordering_key="k1").result(timeout=30)

    partitions = load_topic(topic, connection(gw.bootstrap), gw.prefix).meta.partitions
    got = _drain(sub, subscription, len(MESSAGES) + 1)
    by_data = {m.message.data: m.message for m in got}
    assert len(got) == len(by_data) == len(MESSAGES) + 1
    for data, attributes, ordering_key in MESSAGES:
        m = by_data[data]
        assert dict(m.attributes) == attributes
        assert m.ordering_key == ordering_key
        assert before <= m.publish_time <= after
        partition, offset = parse_message_id(m.message_id)
        assert 0 <= partition < partitions and offset >= 0
    k1 = {parse_message_id(m.message.message_id)[0] for m in got if m.message.ordering_key == "k1"}
    assert k1 == {parse_message_id(through_api)[0]}
    # the rows of one key in their order (pulled in order: the subscription orders by key)
    for key in ("k1", "k0", "k2"):
        data = [
            m.message.data for m in got if m.message.ordering_key == key and m.message.data.startswith(b"m")
        ]
        assert data == sorted(data, key=lambda d: int(d[1:]))


def test_a_stream_written_by_spark_arrives_as_published(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names, tmp_path: Path
) -> None:
    gw = shared_gateway
    _, sub, topic, subscription = _setup(gw, names)
    source = tmp_path / "in"
    spark.createDataFrame(MESSAGES[:20], SCHEMA).write.parquet(str(source / "a"))
    spark.createDataFrame(MESSAGES[20:], SCHEMA).write.parquet(str(source / "b"))
    stream = spark.readStream.schema(SCHEMA).option("recursiveFileLookup", "true").parquet(str(source))

    query = (
        write_topic_stream(stream, topic, gw.bootstrap, gw.prefix)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None

    got = _drain(sub, subscription, len(MESSAGES))
    assert sorted(
        (m.message.data, dict(m.message.attributes), m.message.ordering_key) for m in got
    ) == sorted(MESSAGES)


def test_a_row_the_api_refuses_fails_the_write_before_anything_is_written(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    gw = shared_gateway
    _, sub, topic, subscription = _setup(gw, names)
    rows = [*MESSAGES[:5], (b"bad", {"googthing": "1"}, "")]
    with pytest.raises(InvalidMessage, match="reserved: keys must not start with 'goog'"):
        write_topic(spark.createDataFrame(rows, SCHEMA), topic, gw.bootstrap, gw.prefix)
    assert pull_nothing(sub, subscription, 2) == []
    # without the first pass, the write itself fails on the row
    with pytest.raises(Exception, match="reserved: keys must not start with 'goog'"):
        write_topic(
            spark.createDataFrame(rows[-1:], SCHEMA), topic, gw.bootstrap, gw.prefix, check_first=False
        )


def test_missing_topics_and_topics_with_a_schema_are_refused(
    spark: SparkSession, shared_gateway: GatewayProcess, names: Names
) -> None:
    gw = shared_gateway
    df = spark.createDataFrame(MESSAGES[:1], SCHEMA)
    with pytest.raises(TopicNotFound):
        write_topic(df, names("topics", "-none"), gw.bootstrap, gw.prefix)
    pub, _ = clients(gw)
    with emulator_env(gw.address):
        schemas = pubsub_v1.SchemaServiceClient()
    schema = schemas.create_schema(
        parent="projects/test-project",
        schema=Schema(type_=Schema.Type.AVRO, definition='{"type":"record","name":"R","fields":[]}'),
        schema_id=f"s-{uuid.uuid4().hex[:8]}",
    )
    topic = names("topics", "-schema")
    pub.create_topic(
        request={"name": topic, "schema_settings": {"schema": schema.name, "encoding": Encoding.JSON}}
    )
    with pytest.raises(TopicRefused, match="has a schema"):
        write_topic(df, topic, gw.bootstrap, gw.prefix)


def _api_refuses(m: Message) -> bool:
    try:
        limits.check_publish([limits.OutgoingMessage(*m)])
    except InvalidArgument:
        return True
    return False


CHECKED: list[Message] = [
    *MESSAGES[:6],
    (b"", {}, ""),
    (b"x", {f"a{i}": "" for i in range(limits.MAX_ATTRIBUTES)}, ""),
    (b"x", {f"a{i}": "" for i in range(limits.MAX_ATTRIBUTES + 1)}, ""),
    (b"x", {"": "v"}, ""),
    (b"x", {"k" * (limits.MAX_ATTRIBUTE_KEY_BYTES + 1): "v"}, ""),
    (b"x", {"é" * 129: "v"}, ""),  # 258 bytes
    (b"x", {"a": "é" * 513}, ""),  # 1026 bytes
    (b"x", {"goog": "v"}, ""),
    (b"x", {"googx": "v"}, ""),
    (b"x", {"Goog": "v"}, ""),
    (b"x", {}, "é" * 513),
    (b"x" * (limits.MAX_PUBLISH_BYTES - 2), {"a": "b"}, ""),
    (b"x" * (limits.MAX_PUBLISH_BYTES - 1), {"a": "b"}, ""),
]


def test_the_limits_in_spark_sql_are_the_apis(spark: SparkSession) -> None:
    indexed = T.StructType([T.StructField("i", T.IntegerType()), *SCHEMA.fields])
    df = spark.createDataFrame([(i, *m) for i, m in enumerate(CHECKED)], indexed)
    why = problem(F.col("data"), F.col("attributes"), F.col("ordering_key"))
    got = {r["i"]: r["why"] for r in df.select("i", why.alias("why")).collect()}
    assert {i: got[i] is not None for i in got} == {i: _api_refuses(m) for i, m in enumerate(CHECKED)}


def test_null_attribute_values_and_wrong_columns_are_refused(spark: SparkSession) -> None:
    assert first_problem(spark.createDataFrame(MESSAGES, SCHEMA)) is None
    nulls = spark.createDataFrame([(b"x", {"a": None}, None), (None, None, None)], SCHEMA)
    assert first_problem(nulls) == "Attribute a has a null value."
    assert first_problem(nulls.where("data IS NULL")) == (
        "A message must have non-empty data or at least one attribute."
    )
    as_text = spark.createDataFrame([("é", "k")], "data string, ordering_key string")
    assert first_problem(as_text) is None
    with pytest.raises(InvalidMessage, match="needs a column `data`"):
        first_problem(spark.createDataFrame([("x",)], "payload string"))
    no_nulls = as_text.select("data", F.create_map(F.lit("k"), F.lit("v")).alias("attributes"))
    assert first_problem(no_nulls) is None  # map<string,string> without nulls is one too
    with pytest.raises(InvalidMessage, match="must be map<string,string>"):
        first_problem(spark.createDataFrame([(b"x", 1)], "data binary, attributes int"))
