#!/usr/bin/env bash
# Kafka's own tool of this name (the stack's health check asks it whether the broker answers).
exec java -Xmx128m -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties \
    -cp '/opt/kafka/libs/*:/opt/kafka/tools/*' org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
