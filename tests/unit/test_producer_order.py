"""A producer whose user configuration turns idempotence off keeps a partition's records in order:
one request on the wire at a time, and a configuration that asks for more is refused."""

from __future__ import annotations

import re

import pytest

from gateway.kafka import IN_FLIGHT, reordering
from gateway.kafka.producer import MAX_IN_FLIGHT, Producer

BOOT = {"bootstrap.servers": "127.0.0.1:1"}  # never started: no client is made


def test_an_idempotent_producer_keeps_its_requests_on_the_wire() -> None:
    assert Producer(BOOT)._config[IN_FLIGHT] == MAX_IN_FLIGHT
    assert Producer({**BOOT, "enable.idempotence": "true"})._config[IN_FLIGHT] == MAX_IN_FLIGHT


@pytest.mark.parametrize("off", [False, "false", "0", "False"])
def test_without_idempotence_one_request_at_a_time(off: object) -> None:
    producer = Producer({**BOOT, "enable.idempotence": off})  # type: ignore[dict-item]
    assert producer._config[IN_FLIGHT] == 1
    assert not producer._ordered  # each record has its own delivery callback


@pytest.mark.parametrize("n", [2, "5"])
def test_without_idempotence_more_on_the_wire_is_refused(n: object) -> None:
    config = {**BOOT, "enable.idempotence": "false", IN_FLIGHT: n}
    assert "out of order" in (reordering(config) or "")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape(IN_FLIGHT)):
        Producer(config)  # type: ignore[arg-type]


def test_one_on_the_wire_without_idempotence_is_accepted() -> None:
    config = {**BOOT, "enable.idempotence": "false", IN_FLIGHT: "1"}
    assert reordering(config) is None
    assert Producer(config)._config[IN_FLIGHT] == "1"


def test_an_idempotent_producer_may_ask_for_more() -> None:
    assert reordering({**BOOT, IN_FLIGHT: "5"}) is None  # the broker's sequence numbers keep order
