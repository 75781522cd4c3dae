#!/usr/bin/env bash
# The broker's start: server properties from the KAFKA_* variables, as apache/kafka reads them;
# the storage formatted with CLUSTER_ID on the first start; then the broker, in the foreground.
set -euo pipefail

props=/opt/kafka/config/server.properties
# Variables of the JVM and of the image itself, not properties (as in apache/kafka's image).
not_properties=" KAFKA_HEAP_OPTS KAFKA_OPTS KAFKA_JVM_PERFORMANCE_OPTS KAFKA_GC_LOG_OPTS \
KAFKA_LOG4J_OPTS KAFKA_JMX_OPTS KAFKA_DEBUG KAFKA_VERSION KAFKA_HOME KAFKA_LOG4J_LOGGERS \
KAFKA_LOG4J_ROOT_LOGLEVEL KAFKA_TOOLS_LOG4J_LOGLEVEL "

: > "$props"
for name in $(compgen -e | grep '^KAFKA_' || true); do
    case "$not_properties" in *" $name "*) continue ;; esac
    key=${name#KAFKA_}
    key=${key,,}
    key=${key//___/-}
    key=${key//__/$'\x01'}
    key=${key//_/.}
    key=${key//$'\x01'/_}
    printf '%s=%s\n' "$key" "${!name}" >> "$props"
done
if [ ! -s "$props" ]; then
    # None given: one node, broker and controller, reached as localhost:9092.
    cat > "$props" <<'PROPS'
node.id=1
process.roles=broker,controller
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
controller.quorum.voters=1@localhost:9093
log.dirs=/var/lib/kafka/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
PROPS
fi

java_cmd=(java ${KAFKA_HEAP_OPTS:--Xmx1g -Xms1g} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC}
          -Djava.awt.headless=true -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties
          ${KAFKA_OPTS:-} -cp '/opt/kafka/libs/*')
log_dir=$(sed -n 's/^log\.dirs=//p' "$props" | cut -d, -f1)
if [ -n "$log_dir" ] && [ ! -f "$log_dir/meta.properties" ]; then
    "${java_cmd[@]}" kafka.tools.StorageTool format --config "$props" \
        --cluster-id "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" --ignore-formatted
fi
exec "${java_cmd[@]}" kafka.Kafka "$props"
