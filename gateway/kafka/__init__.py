"""Kafka-side plumbing: clients, topic layout and a local broker for development and tests."""

from __future__ import annotations

from collections.abc import Mapping

Config = Mapping[str, str | int | float | bool]

# librdkafka producers (and so admin clients) ask brokers to create a topic they request metadata
# for unless told not to; with Kafka's default auto.create.topics.enable=true that made a lookup
# create the topic with the broker's partition count and delete policy. Every topic the gateway
# needs is created explicitly, so no client of the gateway may ever allow it.
FORCED = {"allow.auto.create.topics": False}


IN_FLIGHT = "max.in.flight.requests.per.connection"


def is_on(value: object) -> bool:
    """A librdkafka boolean setting, given as a bool or as librdkafka's strings."""
    return value is True or str(value).lower() in ("true", "1")


def reordering(config: Config) -> str | None:
    """Why a producer of the user's `config` could write a partition's records out of order, or
    None. Without idempotence a request that fails and is retried lands behind one sent after it,
    so such a producer keeps order only with one request on the wire."""
    if is_on(config.get("enable.idempotence", True)):
        return None
    try:
        if int(config.get(IN_FLIGHT, 1)) <= 1:
            return None
    except ValueError:
        return None  # not a number: librdkafka refuses it itself, naming it
    return (
        f"enable.idempotence=false with {IN_FLIGHT}={config[IN_FLIGHT]} lets a retried request "
        "land behind a later one, out of order: leave idempotence on, or set it to 1"
    )


def client_config(base: Config, defaults: Config | None = None) -> dict[str, str | int | float | bool]:
    """A librdkafka config: `defaults`, then the user's `base`, then what is never negotiable."""
    return {**(defaults or {}), **base, **FORCED}
