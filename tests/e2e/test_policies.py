"""Dead letters, retry backoff and filters, through the official client on a real broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import confluent_kafka
import pytest
from google.api_core import exceptions

from gateway.translate.names import kafka_topic_for
from gateway.translate.names import topic as topic_name
from tests.conftest import GatewayFactory
from tests.e2e.clients import clients, pull_nothing, pull_until
from tests.gateways import GatewayProcess
from tests.kafka_reads import committed_records

pytestmark = pytest.mark.integration


def _kafka_records(
    bootstrap: str, topic: str, expect: int, timeout: float = 30
) -> list[confluent_kafka.Message]:
    """Every committed record of a Pub/Sub topic's Kafka topic (read_committed, from the start)."""
    return committed_records(bootstrap, kafka_topic_for(topic_name(topic)), expect, timeout)


def test_dead_letter_after_max_attempts_with_source_attributes(
    shared_gateway: GatewayProcess, names: Callable[[str], str], kafka_bootstrap: str
) -> None:
    pub, sub = clients(shared_gateway)
    topic, dead, subscription = names("topics"), names("topics", "-dead"), names("subscriptions")
    pub.create_topic(name=topic)
    pub.create_topic(name=dead)
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "dead_letter_policy": {"dead_letter_topic": dead, "max_delivery_attempts": 5},
        }
    )
    pub.publish(topic, b"poison", kind="bad").result(timeout=30)
    pub.publish(topic, b"fine").result(timeout=30)
    attempts = []
    for _ in range(5):
        got = pull_until(sub, subscription, 1, keep=lambda m: m.message.data == b"poison")
        attempts.append(got[0].delivery_attempt)
        sub.modify_ack_deadline(subscription=subscription, ack_ids=[got[0].ack_id], ack_deadline_seconds=0)
    assert attempts == [1, 2, 3, 4, 5]
    fine = pull_until(sub, subscription, 1, keep=lambda m: m.message.data == b"fine")
    sub.acknowledge(subscription=subscription, ack_ids=[fine[0].ack_id])
    assert pull_nothing(sub, subscription, 3.0) == [], "the poison message left the subscription"
    (record,) = _kafka_records(kafka_bootstrap, dead, 1)
    headers = {k: v.decode() for k, v in record.headers()}
    assert record.value() == b"poison"
    assert headers["kind"] == "bad"
    assert headers["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    assert headers["CloudPubSubDeadLetterSourceSubscription"] == subscription.split("/")[-1]
    assert headers["CloudPubSubDeadLetterSourceSubscriptionProject"] == "test-project"


def test_dead_lettering_survives_a_kill_without_duplicates(
    start_gateway: GatewayFactory, names: Callable[[str], str], kafka_bootstrap: str
) -> None:
    gw = start_gateway()
    pub, sub = clients(gw)
    topic, dead, subscription = names("topics"), names("topics", "-dead"), names("subscriptions")
    pub.create_topic(name=topic)
    pub.create_topic(name=dead)
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "ack_deadline_seconds": 10,
            "dead_letter_policy": {"dead_letter_topic": dead, "max_delivery_attempts": 5},
        }
    )
    n = 300
    for f in [pub.publish(topic, f"p{i}".encode()) for i in range(n)]:
        f.result(timeout=60)
    for round_ in range(5):  # five failed deliveries of everything, by nack
        got = pull_until(sub, subscription, n, max_messages=1000)
        assert len(got) == n, f"round {round_}: {len(got)}"
        ids = [m.ack_id for m in got]
        if round_ == 4:
            # Kill the gateway right as it starts forwarding all 300 to the dead-letter topic.
            sub.modify_ack_deadline(subscription=subscription, ack_ids=ids, ack_deadline_seconds=0)
            time.sleep(0.15)
            gw.kill()
            gw.start()
            pub, sub = clients(gw)
        else:
            sub.modify_ack_deadline(subscription=subscription, ack_ids=ids, ack_deadline_seconds=0)
    # After the restart, messages whose forwarding did not commit are delivered no more
    # (their five deliveries are used up) and are forwarded by the new process.
    assert pull_nothing(sub, subscription, 8.0) == []
    records = _kafka_records(kafka_bootstrap, dead, n, timeout=40)
    values = sorted(r.value() for r in records)
    assert values == sorted(f"p{i}".encode() for i in range(n)), (
        f"{len(values)} dead letters, want {n} once each"
    )


def test_retry_backoff_grows_between_redeliveries(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub = clients(shared_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "retry_policy": {"minimum_backoff": "1s", "maximum_backoff": "4s"},
        }
    )
    pub.publish(topic, b"retry-me").result(timeout=30)
    first = pull_until(sub, subscription, 1)
    assert [m.message.data for m in first] == [b"retry-me"]
    sub.modify_ack_deadline(subscription=subscription, ack_ids=[first[0].ack_id], ack_deadline_seconds=0)
    last = time.monotonic()
    pub.publish(topic, b"other").result(timeout=30)
    other = pull_until(sub, subscription, 1, timeout=0.8)
    assert [m.message.data for m in other] == [b"other"], "other messages flow during the backoff"
    sub.acknowledge(subscription=subscription, ack_ids=[other[0].ack_id])
    gaps = []
    for _ in range(3):
        (m,) = pull_until(sub, subscription, 1)
        gaps.append(time.monotonic() - last)
        sub.modify_ack_deadline(subscription=subscription, ack_ids=[m.ack_id], ack_deadline_seconds=0)
        last = time.monotonic()
    # Backoff after delivery n is min(4 s, 1 s * 2^(n-1)): 1, 2, 4 s.
    assert gaps[0] >= 0.9 and gaps[1] >= 1.9 and gaps[2] >= 3.9, gaps
    assert gaps[0] < 3.0 and gaps[1] < 4.0 and gaps[2] < 6.5, gaps


FILTER_CASES = [
    ("attributes:color", [{"color": "red"}, {"color": ""}], [{"size": "m"}, {}]),
    ('attributes.color = "red"', [{"color": "red"}], [{"color": "blue"}, {}]),
    ('attributes.color != "red"', [{"color": "blue"}, {}], [{"color": "red"}]),
    ('hasPrefix(attributes.region, "eu-")', [{"region": "eu-west"}], [{"region": "us-east"}, {}]),
    ("NOT attributes:color", [{}, {"size": "s"}], [{"color": "x"}]),
    ("-attributes:color", [{}], [{"color": "x"}]),
    (
        'attributes:color AND attributes.size = "m"',
        [{"color": "x", "size": "m"}],
        [{"color": "x"}, {"size": "m"}],
    ),
    ("attributes:color OR attributes:size", [{"color": "x"}, {"size": "m"}], [{"other": "1"}]),
    (
        'attributes:a AND (attributes.b = "1" OR attributes.c = "2")',
        [{"a": "", "b": "1"}, {"a": "", "c": "2"}],
        [{"a": ""}, {"b": "1"}],
    ),
    ('attributes."dotted.key" = "v"', [{"dotted.key": "v"}], [{"dotted.key": "w"}]),
]


@pytest.mark.parametrize(("expression", "match", "miss"), FILTER_CASES)
def test_filters_deliver_only_matching_messages(
    shared_gateway: GatewayProcess,
    names: Callable[[str], str],
    expression: str,
    match: list[dict[str, str]],
    miss: list[dict[str, str]],
) -> None:
    pub, sub = clients(shared_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(request={"name": subscription, "topic": topic, "filter": expression})
    assert sub.get_subscription(subscription=subscription).filter == expression
    for i, attrs in enumerate(miss):
        pub.publish(topic, f"miss{i}".encode(), **attrs).result(timeout=30)
    for i, attrs in enumerate(match):
        pub.publish(topic, f"match{i}".encode(), **attrs).result(timeout=30)
    got = pull_until(sub, subscription, len(match))
    assert sorted(m.message.data for m in got) == sorted(f"match{i}".encode() for i in range(len(match)))
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])
    assert pull_nothing(sub, subscription, 1.5) == []


@pytest.mark.parametrize(
    "bad",
    [
        "attributes:a AND attributes:b OR attributes:c",
        "attributes.a =",
        "color = red",
        'attributes.a == "x"',
        "(attributes:a",
        "hasPrefix(attributes.a)",
        "x" * 257,
    ],
)
def test_invalid_filters_are_rejected(
    shared_gateway: GatewayProcess, names: Callable[[str], str], bad: str
) -> None:
    pub, sub = clients(shared_gateway)
    topic = names("topics")
    pub.create_topic(name=topic)
    with pytest.raises(exceptions.InvalidArgument, match="filter"):
        sub.create_subscription(request={"name": names("subscriptions"), "topic": topic, "filter": bad})


def test_idle_subscription_expires_and_active_or_unset_ones_stay(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    prefix = f"exp{uuid.uuid4().hex[:6]}"
    # Pulls that find nothing return within 1 s, so the busy subscription sees activity often.
    settings = (
        "--min-expiration-ttl-seconds",
        "2",
        "--expiration-check-seconds",
        "0.5",
        "--pull-max-wait-seconds",
        "1",
    )
    a, b = start_gateway(*settings, prefix=prefix), start_gateway(*settings, prefix=prefix)
    pub, sub = clients(a)
    topic = names("topics")
    pub.create_topic(name=topic)
    idle, busy, never = (
        names("subscriptions", "-idle"),
        names("subscriptions", "-busy"),
        names("subscriptions", "-never"),
    )
    # A TTL longer than the first pull's wait for its group (the stock broker's 3 s initial
    # rebalance delay, and a second process joining): that pull is recorded once it has joined.
    for name in (idle, busy):
        sub.create_subscription(request={"name": name, "topic": topic, "expiration_policy": {"ttl": "7s"}})
    sub.create_subscription(request={"name": never, "topic": topic, "expiration_policy": {}})
    assert not sub.get_subscription(subscription=never).expiration_policy.ttl
    with pytest.raises(exceptions.InvalidArgument, match="ttl"):
        sub.create_subscription(
            request={
                "name": names("subscriptions", "-short"),
                "topic": topic,
                "expiration_policy": {"ttl": "1s"},
            }
        )
    deadline = time.monotonic() + 11
    while time.monotonic() < deadline:
        sub.pull(subscription=busy, max_messages=1, timeout=5)  # activity keeps it alive
    with pytest.raises(exceptions.NotFound):
        sub.get_subscription(subscription=idle)
    assert sub.get_subscription(subscription=busy).name == busy
    assert sub.get_subscription(subscription=never).name == never
    log_text = "".join(p.read_text() for gw in (a, b) for p in gw.log_paths)
    assert log_text.count(f"{idle}: no activity for its TTL") == 1, "exactly one process deleted it"
