"""Resources for a fault test, made through the official admin clients."""

from __future__ import annotations

import uuid
from typing import Any

from tests.faults.load import Sub
from tests.gateways import emulator_env

PROJECT = "fault-project"


def clients(address: str) -> tuple[Any, Any]:
    from google.cloud import pubsub_v1

    with emulator_env(address):
        return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()


def topic_and_subscriptions(
    address: str, via: list[str], *, ack_deadline: int = 10
) -> tuple[str, Sub, Sub, Sub]:
    """A topic and three subscriptions on it, each read through every gateway in `via`: one
    exactly-once, one with message ordering, one plain."""
    uid = uuid.uuid4().hex[:8]
    publisher, subscriber = clients(address)
    topic = publisher.create_topic(name=f"projects/{PROJECT}/topics/faults-{uid}").name
    made = []
    for kind, settings in (
        ("eo", {"enable_exactly_once_delivery": True}),
        ("ordered", {"enable_message_ordering": True}),
        ("plain", {}),
    ):
        name = f"projects/{PROJECT}/subscriptions/faults-{uid}-{kind}"
        subscriber.create_subscription(
            request={"name": name, "topic": topic, "ack_deadline_seconds": ack_deadline, **settings}
        )
        made.append(Sub(name, via, exactly_once=kind == "eo"))
    subscriber.close()
    eo, ordered, plain = made
    return topic, eo, ordered, plain
