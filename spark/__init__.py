"""Pub/Sub subscriptions of the gateway, read natively with Spark's Kafka source.

    from spark import connector, read_backlog, ack
    spark = connector.builder().getOrCreate()
    df = read_backlog(spark, "projects/p/subscriptions/s", "broker:9092")
    df.write.parquet("/data/s")
    ack(df, "projects/p/subscriptions/s", "broker:9092")

See docs/spark.md.
"""

from spark.acks import ack
from spark.options import KafkaConnection
from spark.reader import read_backlog, read_stream
from spark.subscription import Subscription, SubscriptionNotFound, load

__all__ = [
    "KafkaConnection",
    "Subscription",
    "SubscriptionNotFound",
    "ack",
    "load",
    "read_backlog",
    "read_stream",
]
