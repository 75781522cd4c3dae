"""How Spark reaches the Kafka cluster: the bootstrap address plus any client settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaConnection:
    """`settings` are Kafka client properties without the `kafka.` prefix (Java names, e.g.
    ``{"security.protocol": "SSL"}``) for Spark's Kafka source and sink. The driver's two offset
    lookups use librdkafka: `librdkafka` settings when given, else `settings` (most security
    settings have the same names in both clients; `sasl.jaas.config` does not)."""

    bootstrap: str
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    librdkafka: Mapping[str, str] | None = None

    def sink(self) -> dict[str, str]:
        """Options of Spark's Kafka sink."""
        out = {f"kafka.{k}": v for k, v in self.settings.items()}
        out["kafka.bootstrap.servers"] = self.bootstrap
        return out

    def source(self) -> dict[str, str]:
        """Options of Spark's Kafka source: transactional writes (dead-lettering) are read only
        once committed; records lost to retention or compaction are skipped, not an error; a
        short fetch wait, as a task's last fetch at the end of a partition would otherwise idle
        for the broker's default 500 ms."""
        return {
            "kafka.isolation.level": "read_committed",
            "failOnDataLoss": "false",
            "kafka.fetch.max.wait.ms": "50",
            **self.sink(),
            # Java consumers default to asking for auto-creation: a subscription whose topic
            # was deleted must not bring it back with the broker's partition count.
            "kafka.allow.auto.create.topics": "false",
        }

    def driver_settings(self) -> dict[str, str]:
        return dict(self.settings if self.librdkafka is None else self.librdkafka)


def connection(
    bootstrap: str | KafkaConnection, settings: Mapping[str, str] | None = None
) -> KafkaConnection:
    if isinstance(bootstrap, KafkaConnection):
        return bootstrap
    return KafkaConnection(bootstrap, dict(settings or {}))
