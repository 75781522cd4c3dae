"""The core services: topics, subscriptions, snapshots, delivery.

Admin calls (topics, subscriptions, snapshots) take and return the API's generated proto
messages (Topic, Subscription, Snapshot, PushConfig, SeekRequest); Publish and delivery take
plain values. Errors are GatewayErrors: nothing here imports grpc or aiohttp, builds a wire
status, or calls librdkafka (gateway.kafka does)."""
