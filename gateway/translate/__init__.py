"""Pure mapping between Pub/Sub and Kafka: plain functions on values, no I/O."""
