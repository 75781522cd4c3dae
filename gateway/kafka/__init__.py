"""Kafka-side plumbing: clients, topic layout and a local broker for development and tests."""
