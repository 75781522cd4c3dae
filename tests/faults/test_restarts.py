"""Processes stopped under load: SIGTERM rolled through three gateways, and kill -9 in the middle
of a Seek and of a subscription's create or delete. Checked over the clients' history
(tests/faults/history.py) and by what the API says afterwards."""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import pytest
from google.api_core import exceptions
from google.protobuf import timestamp_pb2

from tests.faults.conftest import Rig
from tests.faults.resources import PROJECT, clients, topic_and_subscriptions

pytestmark = pytest.mark.integration


@pytest.mark.timeout(600)
def test_sigterm_rolled_through_three_gateways_loses_nothing(rig: Rig) -> None:
    gateways = [rig.gateway() for _ in range(3)]
    via = [gw.address for gw in gateways]
    topic, eo, ordered, plain = topic_and_subscriptions(via[0], via)
    publish_seconds = 70.0
    load = rig.load(topic, [eo, ordered, plain], publish_via=via[0], publish_seconds=publish_seconds)
    time.sleep(8)
    for gw in gateways:  # each stops as an orchestrator stops it, and comes back on its port
        rig.mark(f"SIGTERM to {gw.address}", "start")
        assert gw.terminate(60) == 0
        gw.start()
        rig.mark(f"SIGTERM to {gw.address}", "end")
        time.sleep(8)
    load.wait(publish_seconds + 150)
    verdict = rig.verdict([eo, ordered, plain], ordered=[ordered.name])
    assert verdict.confirmed > 0.8 * 50 * publish_seconds, verdict.summary()
    assert verdict.ok, verdict.summary()


def _in_flight(call: Any, kill: Any, delay: float) -> Exception | None:
    """Start `call` on a thread, kill -9 its gateway after `delay`; the call's error, if any."""
    errors: list[Exception] = []

    def run() -> None:
        try:
            call()
        except Exception as exc:  # what the client saw is the figure here
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(delay)
    kill()
    thread.join(120)
    assert not thread.is_alive(), "the call never returned after its gateway died"
    return errors[0] if errors else None


def _one_pull(subscriber: Any, name: str, seconds: float = 20.0) -> list[bytes]:
    """Pull until something comes or `seconds` pass; acks what came."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            got = subscriber.pull(request={"subscription": name, "max_messages": 100}, timeout=10)
        except exceptions.DeadlineExceeded:
            continue
        if got.received_messages:
            subscriber.acknowledge(
                request={"subscription": name, "ack_ids": [m.ack_id for m in got.received_messages]}
            )
            return [m.message.data for m in got.received_messages]
    return []


@pytest.mark.timeout(600)
def test_kill_9_during_subscription_create_and_delete_leaves_no_half_state(rig: Rig) -> None:
    """Killed at a random point of its create or delete, a subscription either is there and
    works, or is not there and can be made again; never in between."""
    a, b = rig.gateway(), rig.gateway()
    _, sub_a = clients(a.address)
    pub_b, sub_b = clients(b.address)
    topic = pub_b.create_topic(name=f"projects/{PROJECT}/topics/churn-{uuid.uuid4().hex[:8]}").name
    rng = random.Random(56)
    outcomes: dict[str, int] = {}
    for i in range(6):
        name = f"projects/{PROJECT}/subscriptions/churn-{uuid.uuid4().hex[:8]}"
        creating = i % 2 == 0
        if not creating:
            sub_b.create_subscription(request={"name": name, "topic": topic})
            pub_b.publish(topic, b"before the delete").result(30)
        call = (
            (lambda n=name: sub_a.create_subscription(request={"name": n, "topic": topic}, timeout=60))
            if creating
            else (lambda n=name: sub_a.delete_subscription(request={"subscription": n}, timeout=60))
        )
        error = _in_flight(call, a.kill, rng.uniform(0.0, 0.3))
        # Afterwards, through the other process: there and working, or gone and makeable.
        try:
            sub_b.get_subscription(request={"subscription": name}, timeout=30)
            there = True
        except exceptions.NotFound:
            there = False
        outcome = f"{'create' if creating else 'delete'}: {'there' if there else 'gone'}"
        outcome += f" (the client saw {type(error).__name__ if error else 'success'})"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if creating and error is None:
            assert there, "a create that answered success left no subscription"
        if not creating and error is None:
            assert not there, "a delete that answered success left the subscription"
        if not there:
            sub_b.create_subscription(request={"name": name, "topic": topic}, timeout=30)
        data = f"after {i}".encode()
        pub_b.publish(topic, data).result(30)
        got = _one_pull(sub_b, name)
        assert data in got, (outcome, got)
        sub_b.delete_subscription(request={"subscription": name}, timeout=30)
        with pytest.raises(exceptions.NotFound):
            sub_b.get_subscription(request={"subscription": name}, timeout=30)
        a.start()
    print("OUTCOMES", outcomes)
    rig.result(outcomes=outcomes)
    for client in (sub_a, sub_b):
        client.close()


@pytest.mark.timeout(600)
def test_kill_9_during_a_seek_loses_nothing(rig: Rig) -> None:
    """A Seek back to the start, its gateway killed mid-call, under load: nothing confirmed is
    lost, and a Seek through the other process afterwards works."""
    a, b = rig.gateway(), rig.gateway()
    topic, eo, ordered, plain = topic_and_subscriptions(b.address, [a.address, b.address])
    publish_seconds = 40.0
    started = timestamp_pb2.Timestamp()
    started.GetCurrentTime()
    load = rig.load(topic, [eo, ordered, plain], publish_via=b.address, publish_seconds=publish_seconds)
    time.sleep(10)
    _, sub_a = clients(a.address)
    _, sub_b = clients(b.address)
    seen: dict[str, str] = {}
    for i, sub in enumerate([plain, ordered]):
        rig.mark(f"kill -9 during a Seek of {sub.name}", "start")
        error = _in_flight(
            lambda s=sub: sub_a.seek(request={"subscription": s.name, "time": started}, timeout=60),
            a.kill,
            0.05 * (i + 1),
        )
        seen[sub.name] = type(error).__name__ if error else "success"
        a.start()
        rig.mark(f"kill -9 during a Seek of {sub.name}", "end")
        time.sleep(5)
    sub_b.seek(request={"subscription": plain.name, "time": started}, timeout=60)
    load.wait(publish_seconds + 150)
    print("SEEK CALLS", seen)
    rig.result(seek_calls=seen)
    verdict = rig.verdict([eo, ordered, plain], ordered=[ordered.name])
    assert verdict.ok, verdict.summary()
    for client in (sub_a, sub_b):
        client.close()
