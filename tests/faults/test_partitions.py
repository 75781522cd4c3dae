"""Network partitions under load, checked over the clients' history.

Two gateway processes serve the same subscriptions: an exactly-once one, an ordered one and a
plain one, each streamed through both. The official publisher publishes with ordering keys
throughout. Then one link is cut (packets dropped, tests/faults/netcut.py) and healed, and the
history checker (tests/faults/history.py) shows that no confirmed publish was lost, that no
message came after a confirmed exactly-once ack, and that no ordering key skipped ahead; the
duplicates and how long delivery took to come back are printed.

FAULT_CUT_SECONDS sets how long each cut lasts (default 15 s, past the 6 s group session the
suite's gateways use; `make test-faults` runs them with 40).
"""

from __future__ import annotations

import os
import time

import pytest

from tests.faults.conftest import Rig
from tests.faults.resources import topic_and_subscriptions

pytestmark = pytest.mark.integration

CUT_SECONDS = float(os.environ.get("FAULT_CUT_SECONDS", "15"))
WARM_UP = 8.0


@pytest.mark.timeout(300 + 2 * CUT_SECONDS)
def test_a_gateway_cut_off_from_the_broker_loses_nothing(rig: Rig) -> None:
    a, b = rig.gateway(), rig.gateway()
    topic, eo, ordered, plain = topic_and_subscriptions(b.address, [a.address, b.address])
    publish_seconds = WARM_UP + CUT_SECONDS + 10
    load = rig.load(topic, [eo, ordered, plain], publish_via=b.address, publish_seconds=publish_seconds)
    time.sleep(WARM_UP)
    with rig.cut("gateway a cut off from the broker", [(a.gid, rig.broker_ports)]):
        time.sleep(CUT_SECONDS)
    load.wait(publish_seconds + 150)
    verdict = rig.verdict([eo, ordered, plain], ordered=[ordered.name])
    assert verdict.confirmed > 0.8 * 50 * publish_seconds, verdict.summary()
    assert verdict.ok, verdict.summary()
    # The cut-off process got its partitions back: deliveries came through it after the heal.
    healed = max(e["t"] for e in rig.events() if e["ev"] == "fault")
    through_a = [
        e for e in rig.events() if e["ev"] == "deliver" and e["via"] == a.address and e["t"] > healed
    ]
    assert through_a, "no delivery came through the healed gateway"


@pytest.mark.timeout(300 + 2 * CUT_SECONDS)
def test_gateways_cut_off_from_each_other_lose_no_ack(rig: Rig) -> None:
    """Acks that reach the process not owning a message's partition are forwarded to its owner;
    with the two cut apart, those forwards fail, and an exactly-once ack must then not be
    confirmed."""
    a, b = rig.gateway(), rig.gateway()
    topic, eo, ordered, plain = topic_and_subscriptions(b.address, [a.address, b.address])
    publish_seconds = WARM_UP + CUT_SECONDS + 10
    load = rig.load(topic, [eo, ordered, plain], publish_via=b.address, publish_seconds=publish_seconds)
    time.sleep(WARM_UP)
    # (The two talk only when an ack reaches the process not owning its partition: a cut with
    # nothing to drop is no failure here.)
    with rig.cut("gateways cut apart", [(a.gid, [b.port]), (b.gid, [a.port])], must_drop=False):
        time.sleep(CUT_SECONDS)
    load.wait(publish_seconds + 150)
    verdict = rig.verdict([eo, ordered, plain], ordered=[ordered.name])
    assert verdict.confirmed > 0.8 * 50 * publish_seconds, verdict.summary()
    assert verdict.ok, verdict.summary()


@pytest.mark.timeout(300 + 2 * CUT_SECONDS)
def test_a_client_cut_off_from_its_gateway_mid_stream_loses_nothing(rig: Rig) -> None:
    """The subscriber's streams hang with their leases; the gateway's deadlines run out and the
    messages go to the other streams, and the client's own acks wait for the heal."""
    a, b = rig.gateway(), rig.gateway()
    topic, eo, ordered, plain = topic_and_subscriptions(b.address, [a.address, b.address])
    publish_seconds = WARM_UP + CUT_SECONDS + 10
    # Publishing through b, which stays reachable: the cut is of the client's link to a.
    load = rig.load(topic, [eo, ordered, plain], publish_via=b.address, publish_seconds=publish_seconds)
    time.sleep(WARM_UP)
    with rig.cut("the client cut off from gateway a", [(load.gid, [a.port])]):  # type: ignore[attr-defined]
        time.sleep(CUT_SECONDS)
    load.wait(publish_seconds + 150)
    verdict = rig.verdict([eo, ordered, plain], ordered=[ordered.name])
    assert verdict.confirmed > 0.8 * 50 * publish_seconds, verdict.summary()
    assert verdict.ok, verdict.summary()
