"""A Google Cloud Pub/Sub API gateway that keeps all of its state in Apache Kafka."""

__version__ = "0.1.0"
