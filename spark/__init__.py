"""Pub/Sub subscriptions of the gateway, read natively with Spark's Kafka source.

    from spark import connector, read_backlog, ack
    spark = connector.builder().getOrCreate()
    df = read_backlog(spark, "projects/p/subscriptions/s", "broker:9092")
    df.write.parquet("/data/s")
    ack(df, "projects/p/subscriptions/s", "broker:9092")
    write_topic(df.select("data", "attributes"), "projects/p/topics/t", "broker:9092")

See docs/spark.md.
"""

from spark.acks import ack
from spark.options import KafkaConnection
from spark.reader import read_backlog, read_stream
from spark.sink import InvalidMessage, TopicRefused, write_topic, write_topic_stream
from spark.subscription import (
    Subscription,
    SubscriptionNotFound,
    Topic,
    TopicNotFound,
    UnsupportedSubscription,
    load,
    load_topic,
)

__all__ = [
    "InvalidMessage",
    "KafkaConnection",
    "Subscription",
    "SubscriptionNotFound",
    "Topic",
    "TopicNotFound",
    "TopicRefused",
    "UnsupportedSubscription",
    "ack",
    "load",
    "load_topic",
    "read_backlog",
    "read_stream",
    "write_topic",
    "write_topic_stream",
]
