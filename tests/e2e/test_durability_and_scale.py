"""All state in Kafka: acks survive kill -9, processes share subscriptions and resources,
existing Kafka topics can be adopted, and the lease/ack log stays compact."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from google.cloud import pubsub_v1

from tests.conftest import GatewayFactory
from tests.e2e.clients import assert_never_out_twice, await_subscription, clients, pull_nothing, pull_until
from tests.gateways import emulator_env

pytestmark = pytest.mark.integration


def _publish(pub: object, topic: str, n: int, prefix: str = "m", start: int = 0) -> None:
    futures = [pub.publish(topic, f"{prefix}{i}".encode()) for i in range(start, start + n)]  # type: ignore[attr-defined]
    for f in futures:
        f.result(timeout=60)


def test_acks_survive_kill_9_and_unacked_messages_return(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway()
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=10)
    _publish(pub, topic, 200)
    got = pull_until(sub, subscription, 200)
    assert len(got) == 200
    acked = [m for m in got if int(m.message.data[1:]) % 5 < 3]  # 120 acked, 80 not
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in acked])

    gw.kill()  # kill -9: no shutdown code runs
    gw.start()
    pub, sub = clients(gw)
    assert sub.get_subscription(subscription=subscription).name == subscription
    back = pull_until(sub, subscription, 80, timeout=60)
    acked_data = {m.message.data for m in acked}
    assert {m.message.data for m in back} == {m.message.data for m in got} - acked_data
    assert all(m.message.data not in acked_data for m in back)
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in back])
    assert pull_nothing(sub, subscription, 12.0) == []


def test_two_gateways_share_one_subscription(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    prefix = f"two{uuid.uuid4().hex[:6]}"
    a, b = start_gateway(prefix=prefix), start_gateway(prefix=prefix)
    pub_a, sub_a = clients(a)
    _, sub_b = clients(b)
    topic, subscription = names("topics"), names("subscriptions")
    pub_a.create_topic(name=topic)
    sub_a.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=60)
    await_subscription(sub_b, subscription)
    assert sub_b.get_subscription(subscription=subscription).topic == topic

    n = 600
    received: dict[str, list[tuple[bytes, float, float]]] = {"a": [], "b": []}
    lock = threading.Lock()
    stop = time.monotonic() + 60

    def puller(label: str, client: object) -> None:
        while time.monotonic() < stop:
            with lock:
                if sum(len(v) for v in received.values()) >= n:
                    return
            resp = client.pull(subscription=subscription, max_messages=25, timeout=10)  # type: ignore[attr-defined]
            if not resp.received_messages:
                continue
            t0 = time.monotonic()
            time.sleep(0.02)
            client.acknowledge(  # type: ignore[attr-defined]
                subscription=subscription, ack_ids=[m.ack_id for m in resp.received_messages]
            )
            t1 = time.monotonic()
            with lock:
                received[label] += [(m.message.data, t0, t1) for m in resp.received_messages]

    threads = [threading.Thread(target=puller, args=(k, c)) for k, c in (("a", sub_a), ("b", sub_b))]
    for t in threads:
        t.start()
    # Both processes join the subscription's consumer group with their first pulls. Published
    # all at once, the 600 messages were sometimes all drained by the first owner of all four
    # partitions before the rebalance gave two of them to the other; a trickle over ~6 s
    # leaves room for the rebalance, which is what this test is about.
    for batch in range(12):
        _publish(pub_a, topic, 50, prefix="m", start=batch * 50)
        time.sleep(0.5)
    for t in threads:
        t.join(90)
    everything = received["a"] + received["b"]
    datas = [d for d, _, _ in everything]
    assert set(datas) == {f"m{i}".encode() for i in range(n)}, "none lost"
    assert len(received["a"]) > 0 and len(received["b"]) > 0, "both processes served the subscription"
    assert_never_out_twice(everything)
    assert len(datas) == n, f"{len(datas) - n} duplicate deliveries although every message was acked"


def test_a_process_without_clients_lets_its_partitions_go(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    """One Pull through b makes b a member of the group; the subscriber then streams through a
    alone. b's share of the partitions goes to a once b has had no client for UNSERVED_SECONDS,
    not after --idle-subscription-seconds (300 s), so every message reaches a within a minute."""
    prefix = f"uns{uuid.uuid4().hex[:6]}"
    a, b = start_gateway(prefix=prefix), start_gateway(prefix=prefix)
    pub, sub_a = clients(a)
    _, sub_b = clients(b)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub_a.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=60)
    await_subscription(sub_b, subscription)
    assert pull_nothing(sub_b, subscription, 4.0) == []  # b joins the group, then no client

    n = 200
    got: set[bytes] = set()
    lock = threading.Lock()
    everything = threading.Event()

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        message.ack()
        with lock:
            got.add(message.data)
            if len(got) == n:
                everything.set()

    stream = sub_a.subscribe(subscription, callback)
    try:
        time.sleep(5.0)  # a joins: a rebalance gives it some of the partitions, b keeps the rest
        # 40 ordering keys: every one of the 4 partitions gets messages (but with odds of 4e-5),
        # b's share included; a request without keys would go to one partition.
        with emulator_env(a.address):
            keyed = pubsub_v1.PublisherClient(
                publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
            )
        futures = [keyed.publish(topic, f"m{i}".encode(), ordering_key=f"k{i % 40}") for i in range(n)]
        for f in futures:
            f.result(timeout=60)
        assert everything.wait(60), f"{len(got)} of {n} messages reached a's stream in 60 s"
    finally:
        stream.cancel()
        with contextlib.suppress(Exception):
            stream.result(timeout=30)
    # b held ready messages (it says so only then), and let them go.
    log = b.log_paths[-1].read_text(errors="replace")
    assert "leaving its consumer group to them" in log, log[-3000:]


def test_adopted_kafka_topic_delivers_plain_producer_records(
    shared_gateway: object, names: Callable[[str], str], kafka_bootstrap: str
) -> None:
    kafka_topic = f"legacy-orders-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(kafka_topic, 2, 1)])[kafka_topic].result(30)
    pub, sub = clients(shared_gateway)  # type: ignore[arg-type]
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(request={"name": topic, "labels": {"kafka-topic": kafka_topic}})
    sub.create_subscription(name=subscription, topic=topic)

    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(kafka_topic, value=b"plain", key=b"user-1", headers=[("source", b"legacy")])
    producer.produce(kafka_topic, value=b"binary", key=b"\xff\x00", headers=[("raw", b"\xff\xfe")])
    producer.produce(kafka_topic, value=None)
    assert producer.flush(30) == 0
    pub.publish(topic, b"via-gateway", a="1").result(timeout=30)

    got = {m.message.data: m.message for m in pull_until(sub, subscription, 4)}
    assert set(got) == {b"plain", b"binary", b"", b"via-gateway"}
    assert got[b"plain"].ordering_key == "user-1"
    assert dict(got[b"plain"].attributes) == {"source": "legacy"}
    assert got[b"binary"].ordering_key == ""
    assert dict(got[b"binary"].attributes) == {"kafka-key-base64": "/wA=", "raw-base64": "//4="}
    assert dict(got[b"via-gateway"].attributes) == {"a": "1"}
    with pytest.raises(Exception, match="does not exist"):
        pub.create_topic(request={"name": names("topics", "-x"), "labels": {"kafka-topic": "no-such-topic"}})


def test_adopting_a_kafka_topic_made_a_moment_ago(
    shared_gateway: object, names: Callable[[str], str], kafka_bootstrap: str
) -> None:
    """A broker learns of a new topic a little after its controller confirmed it, so a script
    that makes a Kafka topic and adopts it at once may ask before the broker knows. Made here
    half a second after the CreateTopic is sent: the gateway looks again before NOT_FOUND."""
    kafka_topic = f"late-{uuid.uuid4().hex[:8]}"
    pub, _ = clients(shared_gateway)  # type: ignore[arg-type]
    topic = names("topics")

    def make_it_late() -> None:
        time.sleep(0.5)
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.create_topics([NewTopic(kafka_topic, 3, 1)])[kafka_topic].result(30)

    maker = threading.Thread(target=make_it_late)
    maker.start()
    try:
        made = pub.create_topic(request={"name": topic, "labels": {"kafka-topic": kafka_topic}}, timeout=30)
    finally:
        maker.join(60)
    assert made.labels["kafka-topic"] == kafka_topic
    assert pub.get_topic(topic=topic).name == topic


def test_lease_log_compacts_to_one_key_per_partition(
    start_gateway: GatewayFactory, names: Callable[[str], str], kafka_bootstrap: str
) -> None:
    prefix = f"log{uuid.uuid4().hex[:6]}"
    gw = start_gateway(prefix=prefix)
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "3"}})
    sub.create_subscription(name=subscription, topic=topic)
    _publish(pub, topic, 900)
    left = 900
    while left:
        resp = sub.pull(subscription=subscription, max_messages=100, timeout=10)
        ids = [m.ack_id for m in resp.received_messages]
        if ids:
            sub.acknowledge(subscription=subscription, ack_ids=ids)
            left -= len(ids)
    time.sleep(2.0)  # two checkpoint rounds: state folded, commands tombstoned

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    (log_topic,) = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{prefix}_gacks.")]
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([log_topic])
    latest: dict[bytes, bytes | None] = {}
    eof: set[int] = set()
    deadline = time.monotonic() + 30
    while len(eof) < 3 and time.monotonic() < deadline:
        for m in consumer.consume(500, timeout=0.5):
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            latest[m.key()] = m.value()
    consumer.close()
    live = sorted(k for k, v in latest.items() if v is not None)
    assert live == [b"s.0.0", b"s.1.0", b"s.2.0"], f"live keys after all acked: {live[:10]}"
    # The group's committed offsets are the end of the topic: Kafka tools show zero lag.
    groups = admin.list_consumer_groups().result(30).valid
    mine = sorted(g.group_id for g in groups if g.group_id.startswith(f"{prefix}.{subscription}."))
    # The subscription's group, and the one its owners record how far they applied the log in.
    group, applied = mine
    assert applied == f"{group}.applied"
    request = [confluent_kafka.ConsumerGroupTopicPartitions(group)]
    committed = admin.list_consumer_group_offsets(request)[group].result(30).topic_partitions
    check = confluent_kafka.Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "x"})
    ends = {tp.partition: check.get_watermark_offsets(tp, timeout=10)[1] for tp in committed}
    check.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
    assert sum(ends.values()) == 900
