"""The core services: topics, subscriptions, delivery. No wire types, no Kafka client calls."""
