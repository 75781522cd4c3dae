"""For users' own test suites (`pip install 'pubsub-kafka-gateway[testing]'`): a gateway to test
against. `server.GatewayServer` runs one on an embedded Kafka broker in a subprocess;
`pytest_plugin` makes it a session fixture; `containers.PubSubKafkaContainer` runs the gateway's
image and Apache Kafka's in Docker. docs/testing.md shows each.

Nothing here is imported by the gateway itself, and importing it starts nothing.
"""
