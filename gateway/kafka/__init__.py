"""Kafka-side plumbing: clients, topic layout and a local broker for development and tests."""

from __future__ import annotations

from collections.abc import Mapping

Config = Mapping[str, str | int | float | bool]

# librdkafka producers (and so admin clients) ask brokers to create a topic they request metadata
# for unless told not to; with Kafka's default auto.create.topics.enable=true that made a lookup
# create the topic with the broker's partition count and delete policy. Every topic the gateway
# needs is created explicitly, so no client of the gateway may ever allow it.
FORCED = {"allow.auto.create.topics": False}


def client_config(base: Config, defaults: Config | None = None) -> dict[str, str | int | float | bool]:
    """A librdkafka config: `defaults`, then the user's `base`, then what is never negotiable."""
    return {**(defaults or {}), **base, **FORCED}
