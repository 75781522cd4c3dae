"""The seed's early Pub/Sub API (tech.pubsub), served beside v1: docs/legacy-api.md."""
