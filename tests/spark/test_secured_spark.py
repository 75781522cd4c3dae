"""Spark reads and acknowledges a subscription on a secured cluster (SASL_SSL, SCRAM-SHA-512, a
CA made by the test, the StandardAuthorizer), logging in as a principal of its own that has
exactly the ACLs `acls.spark_grants` gives a Spark reader, next to a gateway with its own set;
and publishes with `write_topic` as a principal with the set of `--spark-reader --publish`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from gateway.kafka import acls
from spark import KafkaConnection, ack, read_backlog, write_topic
from tests.e2e.clients import clients, pull_nothing, pull_until
from tests.gateways import GatewayProcess
from tests.secured import acls_of, expected, grant, kafka_config_args, secured_kafka
from tests.spark.conftest import SPARK_WARNINGS

pytestmark = [pytest.mark.integration, *SPARK_WARNINGS]
PROJECT, PREFIX = "spark-project", "__secured_spark"
GATEWAY, READER, WRITER = "gateway", "spark-reader", "spark-writer"
PASSWORDS = {GATEWAY: uuid.uuid4().hex, READER: uuid.uuid4().hex, WRITER: uuid.uuid4().hex}


def test_spark_reads_and_acknowledges_with_its_own_minimal_acls(
    spark: SparkSession, tmp_path: Path, log_dir: Path
) -> None:
    with secured_kafka(tmp_path / "kafka", PASSWORDS) as kafka:
        assert kafka.security is not None
        grant(kafka, f"User:{GATEWAY}", acls.gateway_grants(PREFIX, [PROJECT]))
        reader_grants = acls.spark_grants(PREFIX, [PROJECT])
        grant(kafka, f"User:{READER}", reader_grants)
        assert acls_of(kafka, f"User:{READER}") == expected(reader_grants)
        grant(kafka, f"User:{WRITER}", acls.spark_grants(PREFIX, [PROJECT], acks=False, publish=True))
        gw = GatewayProcess(
            kafka.bootstrap, PREFIX, log_dir, *kafka_config_args(kafka, GATEWAY, PASSWORDS[GATEWAY])
        ).start()
        try:
            pub, sub = clients(gw)
            topic = f"projects/{PROJECT}/topics/t-{uuid.uuid4().hex[:8]}"
            subscription = f"projects/{PROJECT}/subscriptions/s-{uuid.uuid4().hex[:8]}"
            pub.create_topic(name=topic)
            sub.create_subscription(name=subscription, topic=topic)
            ids = {pub.publish(topic, f"m{i}".encode()).result(timeout=30) for i in range(10)}
            acked = pull_until(sub, subscription, 3, max_messages=3)
            sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in acked])

            conn = KafkaConnection(
                kafka.bootstrap,
                kafka.security.java(READER, PASSWORDS[READER]),
                kafka.security.librdkafka(READER, PASSWORDS[READER]),
            )
            backlog = read_backlog(spark, subscription, conn, PREFIX)
            rows = {r["message_id"] for r in backlog.select("message_id").collect()}
            assert rows == ids - {m.message.message_id for m in acked}

            ack(backlog, subscription, conn, PREFIX)  # Spark acknowledges all it read
            assert read_backlog(spark, subscription, conn, PREFIX).count() == 0
            assert pull_nothing(sub, subscription, 3) == []

            writer = KafkaConnection(
                kafka.bootstrap,
                kafka.security.java(WRITER, PASSWORDS[WRITER]),
                kafka.security.librdkafka(WRITER, PASSWORDS[WRITER]),
            )
            rows = [(f"w{i}".encode(), {"i": str(i)}) for i in range(5)]
            write_topic(
                spark.createDataFrame(rows, "data binary, attributes map<string,string>"),
                topic,
                writer,
                PREFIX,
            )
            got = pull_until(sub, subscription, len(rows))
            assert sorted((m.message.data, dict(m.message.attributes)) for m in got) == rows
        finally:
            gw.terminate()
