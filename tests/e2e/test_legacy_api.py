"""The seed's early API (tech.pubsub) served beside v1, through a client generated from our
proto, against a gateway subprocess; the official v1 client on the same data
(docs/legacy-api.md)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.api_core import exceptions as gexc

from gateway._pb.proto2 import empty_pb2
from gateway._pb.tech.label.label_pb2 import Label
from gateway._pb.tech.pubsub import pubsub_pb2 as lpb
from gateway._pb.tech.pubsub import pubsub_pb2_grpc as lgrpc
from gateway.translate import records
from tests.conftest import GatewayFactory
from tests.e2e.clients import clients
from tests.gateways import GatewayProcess

PROJECT = "legacy-e2e"
PULL_WAIT = 2  # --pull-max-wait-seconds of the suite's gateways
Stubs = tuple[lgrpc.PublisherServiceStub, lgrpc.SubscriberServiceStub]


@pytest.fixture(scope="module")
def gw(kafka_bootstrap: str, log_dir: Path) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(
        kafka_bootstrap,
        f"leg{uuid.uuid4().hex[:6]}",
        log_dir,
        "--legacy-project",
        PROJECT,
        "--min-expiration-ttl-seconds",
        "1",
        "--expiration-check-seconds",
        "1",
    ).start()
    yield gateway
    gateway.kill()


@pytest.fixture(scope="module")
def stubs(gw: GatewayProcess) -> Iterator[Stubs]:
    with grpc.insecure_channel(gw.address) as channel:
        yield lgrpc.PublisherServiceStub(channel), lgrpc.SubscriberServiceStub(channel)


@pytest.fixture
def uid() -> Callable[[str], str]:
    tag = uuid.uuid4().hex[:8]
    return lambda kind: f"{kind}-{tag}"


def v1_name(collection: str, short: str) -> str:
    return f"projects/{PROJECT}/{collection}/{short}"


def code_of(call: Callable[[], object]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code()  # type: ignore[attr-defined, no-any-return]


def msg(data: bytes, **labels: str | int) -> lpb.PubsubMessage:
    out = lpb.PubsubMessage(data=data)
    for k, v in labels.items():
        out.label.append(Label(key=k, num_value=v) if isinstance(v, int) else Label(key=k, str_value=v))
    return out


def labels_of(event: lpb.PubsubEvent) -> dict[str, str | int]:
    return {lb.key: getattr(lb, lb.WhichOneof("value") or "str_value") for lb in event.message.label}


def topic_and_sub(
    stubs: Stubs, uid: Callable[[str], str], tag: str = "", **fields: object
) -> tuple[str, str]:
    pub, sub = stubs
    topic, name = uid("top" + tag), uid("sub" + tag)
    pub.CreateTopic(lpb.Topic(name=topic))
    sub.CreateSubscription(lpb.Subscription(name=name, topic=topic, **fields))  # type: ignore[arg-type]
    return topic, name


def pull_one(sub: lgrpc.SubscriberServiceStub, name: str, timeout: float = 30.0) -> lpb.PullResponse:
    """Pull (waiting) until one message comes; UNAVAILABLE means nothing came in the wait."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return sub.Pull(lpb.PullRequest(subscription=name), timeout=10)  # type: ignore[no-any-return]
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:  # type: ignore[attr-defined]
                raise


def test_topics_are_v1_topics_of_the_legacy_project(
    gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str]
) -> None:
    pub, _ = stubs
    v1_pub, _ = clients(gw)
    short = uid("top")
    assert pub.CreateTopic(lpb.Topic(name=short)).name == short
    assert code_of(lambda: pub.CreateTopic(lpb.Topic(name=short))) == grpc.StatusCode.ALREADY_EXISTS
    assert pub.GetTopic(lpb.GetTopicRequest(topic=short)).name == short
    assert v1_pub.get_topic(topic=v1_name("topics", short)).name == v1_name("topics", short)
    full = v1_name("topics", short)
    assert pub.GetTopic(lpb.GetTopicRequest(topic=full)).name == full  # shown as given
    other = f"projects/elsewhere/topics/{uid('top')}"
    v1_pub.create_topic(name=other)
    assert pub.GetTopic(lpb.GetTopicRequest(topic=other)).name == other
    for bad in ("", "x", "goog-topic", "a/b", "projects/p/subscriptions/abc"):
        assert (
            code_of(lambda b=bad: pub.GetTopic(lpb.GetTopicRequest(topic=b)))
            == grpc.StatusCode.INVALID_ARGUMENT
        )
    missing = uid("nope")
    assert code_of(lambda: pub.GetTopic(lpb.GetTopicRequest(topic=missing))) == grpc.StatusCode.NOT_FOUND
    assert (
        code_of(lambda: pub.DeleteTopic(lpb.DeleteTopicRequest(topic=missing))) == grpc.StatusCode.NOT_FOUND
    )
    assert code_of(lambda: pub.Publish(lpb.PublishRequest(topic=missing, message=msg(b"x")))) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert pub.DeleteTopic(lpb.DeleteTopicRequest(topic=short)) == empty_pb2.Empty()
    with pytest.raises(gexc.NotFound):
        v1_pub.get_topic(topic=full)


def test_list_topics_pages_and_queries(stubs: Stubs, uid: Callable[[str], str]) -> None:
    pub, _ = stubs
    made = sorted(uid(f"lst{i}") for i in range(3))
    for name in made:
        pub.CreateTopic(lpb.Topic(name=name))
    seen: list[str] = []
    token = ""
    while True:
        page = pub.ListTopics(lpb.ListTopicsRequest(max_results=2, page_token=token))
        assert len(page.topic) <= 2
        seen.extend(t.name for t in page.topic)
        token = page.next_page_token
        if not token:
            break
    assert set(made) <= set(seen)
    assert not any(n.startswith("projects/") for n in seen)  # only the legacy project's, short
    everything = pub.ListTopics(lpb.ListTopicsRequest(max_results=0))
    assert len(everything.topic) >= 3  # <= 0: the default page size
    one = pub.ListTopics(lpb.ListTopicsRequest(query=f'pubsub.name = "{made[1]}"'))
    assert [t.name for t in one.topic] == [made[1]]
    assert (
        code_of(lambda: pub.ListTopics(lpb.ListTopicsRequest(query="(("))) == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert code_of(lambda: pub.ListTopics(lpb.ListTopicsRequest(page_token="%%"))) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )


def test_publish_pull_and_ack_one_message_at_a_time(stubs: Stubs, uid: Callable[[str], str]) -> None:
    pub, sub = stubs
    topic, name = topic_and_sub(stubs, uid)
    batch = [msg(b"a", kind="x", n=-7), msg(b"b", big=2**62), msg(b"c")]
    ids = pub.PublishBatch(lpb.PublishBatchRequest(topic=topic, messages=batch)).message_ids
    assert len(ids) == 3 and len(set(ids)) == 3
    assert pub.Publish(lpb.PublishRequest(topic=topic, message=msg(b"d", s="1"))) == empty_pb2.Empty()
    got: dict[bytes, lpb.PullResponse] = {}
    while len(got) < 4:
        r = pull_one(sub, name)
        assert r.pubsub_event.subscription == name
        assert r.pubsub_event.WhichOneof("type") == "message"
        got[r.pubsub_event.message.data] = r
        sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=[r.ack_id]))
    assert [got[d].pubsub_event.message.message_id for d in (b"a", b"b", b"c")] == list(ids)  # request order
    assert labels_of(got[b"a"].pubsub_event) == {"kind": "x", "n": -7}
    assert labels_of(got[b"b"].pubsub_event) == {"big": 2**62}
    assert labels_of(got[b"d"].pubsub_event) == {"s": "1"}  # a string stays a string
    # Repeated acks, and acks of ids nobody holds, succeed.
    every = [r.ack_id for r in got.values()]
    sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=every))
    assert code_of(lambda: sub.Pull(lpb.PullRequest(subscription=name, return_immediately=True))) == (
        grpc.StatusCode.FAILED_PRECONDITION
    )
    started = time.monotonic()
    assert (
        code_of(lambda: sub.Pull(lpb.PullRequest(subscription=name), timeout=30))
        == grpc.StatusCode.UNAVAILABLE
    )
    assert time.monotonic() - started >= PULL_WAIT * 0.8


def test_bad_publishes_are_invalid_arguments(stubs: Stubs, uid: Callable[[str], str]) -> None:
    pub, sub = stubs
    topic, name = topic_and_sub(stubs, uid)
    bad = [
        lpb.PubsubMessage(data=b"x", label=[Label(key="a", str_value="1"), Label(key="a", num_value=2)]),
        lpb.PubsubMessage(data=b"x", label=[Label(str_value="no key")]),
        lpb.PubsubMessage(data=b"x", label=[Label(key="no-value")]),
        lpb.PubsubMessage(data=b"x", message_id="mine"),
        lpb.PubsubMessage(),  # neither data nor labels
        lpb.PubsubMessage(data=b"x", label=[Label(key="goog-gateway-numeric-labels", str_value="[]")]),
    ]
    for m in bad:
        assert code_of(lambda m=m: pub.Publish(lpb.PublishRequest(topic=topic, message=m))) == (
            grpc.StatusCode.INVALID_ARGUMENT
        ), m
    assert code_of(
        lambda: pub.PublishBatch(lpb.PublishBatchRequest(topic=topic, messages=[msg(b"ok"), bad[0]]))
    ) == (grpc.StatusCode.INVALID_ARGUMENT)
    # Nothing of the refused batch was published.
    sub.PullBatch(lpb.PullBatchRequest(subscription=name, max_events=10))  # the runner joins
    assert (
        list(sub.PullBatch(lpb.PullBatchRequest(subscription=name, return_immediately=True)).pull_responses)
        == []
    )


def test_pull_batch_nack_and_deadlines(stubs: Stubs, uid: Callable[[str], str]) -> None:
    pub, sub = stubs
    topic, name = topic_and_sub(stubs, uid, ack_deadline_seconds=10)
    pub.PublishBatch(lpb.PublishBatchRequest(topic=topic, messages=[msg(f"m{i}".encode()) for i in range(5)]))
    got: list[lpb.PullResponse] = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        batch = sub.PullBatch(
            lpb.PullBatchRequest(subscription=name, max_events=2), timeout=10
        ).pull_responses
        assert len(batch) <= 2
        got.extend(batch)
    assert sorted(r.pubsub_event.message.data for r in got) == [f"m{i}".encode() for i in range(5)]
    nothing = sub.PullBatch(lpb.PullBatchRequest(subscription=name, return_immediately=True, max_events=0))
    assert list(nothing.pull_responses) == []  # all leased: an empty list, no error
    # Nack: redelivered at once; a deadline of 0 by ModifyAckDeadline is the same.
    first, second = got[0], got[1]
    sub.Nack(lpb.NackRequest(subscription=name, ack_id=[first.ack_id]))
    again = pull_one(sub, name)
    assert again.pubsub_event.message.message_id == first.pubsub_event.message.message_id
    sub.ModifyAckDeadline(
        lpb.ModifyAckDeadlineRequest(subscription=name, ack_id=second.ack_id, ack_deadline_seconds=0)
    )
    third = pull_one(sub, name)
    assert third.pubsub_event.message.message_id == second.pubsub_event.message.message_id
    for bad in (-1, 601):
        assert (
            code_of(
                lambda b=bad: sub.ModifyAckDeadline(
                    lpb.ModifyAckDeadlineRequest(
                        subscription=name, ack_id=third.ack_id, ack_deadline_seconds=b
                    )
                )
            )
            == grpc.StatusCode.INVALID_ARGUMENT
        )
    assert code_of(lambda: sub.ModifyAckDeadline(lpb.ModifyAckDeadlineRequest(subscription=name))) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert code_of(lambda: sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=["junk"]))) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    ids = [r.ack_id for r in got[2:]] + [again.ack_id, third.ack_id]
    sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=ids))
    sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=ids))  # again: still fine
    assert (
        list(sub.PullBatch(lpb.PullBatchRequest(subscription=name, return_immediately=True)).pull_responses)
        == []
    )


def test_cross_api_delivery_both_ways(gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str]) -> None:
    pub, sub = stubs
    v1_pub, v1_sub = clients(gw)
    topic, legacy_sub = topic_and_sub(stubs, uid)
    v1_subscription = v1_name("subscriptions", uid("v1sub"))
    v1_sub.create_subscription(name=v1_subscription, topic=v1_name("topics", topic))
    pub.Publish(lpb.PublishRequest(topic=topic, message=msg(b"from-legacy", n=42, s="v")))
    v1_pub.publish(v1_name("topics", topic), b"from-v1", a="1", b="two").result(timeout=30)
    # v1 sees the numeric label as its decimal string, and nothing of the gateway's header.
    seen: dict[bytes, dict[str, str]] = {}
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        resp = v1_sub.pull(subscription=v1_subscription, max_messages=10, timeout=10)
        for m in resp.received_messages:
            seen[m.message.data] = dict(m.message.attributes)
        if resp.received_messages:
            v1_sub.acknowledge(
                subscription=v1_subscription, ack_ids=[m.ack_id for m in resp.received_messages]
            )
    assert seen == {b"from-legacy": {"n": "42", "s": "v"}, b"from-v1": {"a": "1", "b": "two"}}
    assert records.NUMERIC_HEADER not in str(seen)
    # The early API sees v1's attributes as string labels, and its own numbers as numbers.
    events = {}
    for _ in range(2):
        r = pull_one(sub, legacy_sub)
        events[r.pubsub_event.message.data] = labels_of(r.pubsub_event)
        sub.Acknowledge(lpb.AcknowledgeRequest(subscription=legacy_sub, ack_id=[r.ack_id]))
    assert events == {b"from-legacy": {"n": 42, "s": "v"}, b"from-v1": {"a": "1", "b": "two"}}
    # One subscription, two APIs: a lease through one is acked through the other.
    v1_pub.publish(v1_name("topics", topic), b"shared").result(timeout=30)
    leased = pull_one(sub, v1_subscription)  # a full v1 name works too
    assert leased.pubsub_event.subscription == v1_subscription  # shown as given
    v1_sub.acknowledge(subscription=v1_subscription, ack_ids=[leased.ack_id])
    v1_sub.modify_ack_deadline(subscription=v1_subscription, ack_ids=[leased.ack_id], ack_deadline_seconds=0)
    after = sub.PullBatch(lpb.PullBatchRequest(subscription=v1_subscription, return_immediately=True))
    assert list(after.pull_responses) == []  # acked: a nack after the ack changes nothing


def test_subscription_admin(gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str]) -> None:
    pub, sub = stubs
    _, v1_sub = clients(gw)
    topic = uid("top")
    pub.CreateTopic(lpb.Topic(name=topic))
    made = sub.CreateSubscription(lpb.Subscription(topic=topic, ack_deadline_seconds=30))
    assert made.name and made.topic == topic and made.ack_deadline_seconds == 30  # name assigned
    assert not made.HasField("garbage_collect_seconds")
    assert v1_sub.get_subscription(subscription=v1_name("subscriptions", made.name)).topic == v1_name(
        "topics", topic
    )
    named = uid("sub")
    sub.CreateSubscription(lpb.Subscription(name=named, topic=topic, garbage_collect_seconds=3600))
    got = sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=named))
    assert (got.name, got.topic, got.ack_deadline_seconds, got.garbage_collect_seconds) == (
        named,
        topic,
        10,
        3600,
    )
    assert code_of(lambda: sub.CreateSubscription(lpb.Subscription(name=named, topic=topic))) == (
        grpc.StatusCode.ALREADY_EXISTS
    )
    assert code_of(lambda: sub.CreateSubscription(lpb.Subscription(name=uid("s2"), topic=uid("none")))) == (
        grpc.StatusCode.NOT_FOUND
    )
    for fields in ({"ack_deadline_seconds": 5}, {"garbage_collect_seconds": -1}, {"query": "(("}):
        assert (
            code_of(
                lambda f=fields: sub.CreateSubscription(lpb.Subscription(name=uid("s3"), topic=topic, **f))  # type: ignore[arg-type]
            )
            == grpc.StatusCode.INVALID_ARGUMENT
        )
    listed = sub.ListSubscriptions(lpb.ListSubscriptionsRequest(query=f'pubsub.topic = "{topic}"'))
    assert sorted(s.name for s in listed.subscription) == sorted([made.name, named])
    paged = sub.ListSubscriptions(
        lpb.ListSubscriptionsRequest(query=f'pubsub.topic = "{topic}"', max_results=1)
    )
    assert len(paged.subscription) == 1 and paged.next_page_token
    sub.DeleteSubscription(lpb.DeleteSubscriptionRequest(subscription=named))
    for call in (
        lambda: sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=named)),
        lambda: sub.Pull(lpb.PullRequest(subscription=named)),
        lambda: sub.DeleteSubscription(lpb.DeleteSubscriptionRequest(subscription=named)),
    ):
        assert code_of(call) == grpc.StatusCode.NOT_FOUND


def is_truncation(r: lpb.PullResponse) -> bool:
    return r.pubsub_event.WhichOneof("type") == "truncated"


def pull_until(
    sub: lgrpc.SubscriberServiceStub,
    name: str,
    done: Callable[[list[lpb.PullResponse]], bool],
    seconds: float = 30,
) -> list[lpb.PullResponse]:
    """PullBatch (acking messages, not events) until `done(everything pulled)`."""
    got: list[lpb.PullResponse] = []
    deadline = time.monotonic() + seconds
    while not done(got):
        assert time.monotonic() < deadline, [r.pubsub_event for r in got]
        batch = list(
            sub.PullBatch(lpb.PullBatchRequest(subscription=name, max_events=100), timeout=10).pull_responses
        )
        got += batch
        acks = [r.ack_id for r in batch if not is_truncation(r)]
        if acks:
            sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=acks))
    return got


def data_of(got: list[lpb.PullResponse]) -> list[bytes]:
    return [r.pubsub_event.message.data for r in got if not is_truncation(r)]


def test_truncate_drops_the_backlog_and_delivers_one_event(
    gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str]
) -> None:
    pub, sub = stubs
    _, v1_sub = clients(gw)
    topic, name = topic_and_sub(stubs, uid)
    pub.PublishBatch(
        lpb.PublishBatchRequest(topic=topic, messages=[msg(f"old{i}".encode()) for i in range(5)])
    )
    leased = pull_one(sub, name)  # the runner holds the backlog; one of it is leased out
    assert leased.pubsub_event.message.data.startswith(b"old")
    assert sub.TruncateSubscription(lpb.TruncateSubscriptionRequest(subscription=name)) == empty_pb2.Empty()
    event = sub.Pull(lpb.PullRequest(subscription=name, return_immediately=True), timeout=10)
    assert is_truncation(event) and event.pubsub_event.subscription == name
    assert not event.pubsub_event.HasField("message")
    # Leased to us: no second copy while its deadline runs.
    again = sub.PullBatch(lpb.PullBatchRequest(subscription=name, return_immediately=True), timeout=10)
    assert not any(is_truncation(r) for r in again.pull_responses)
    # v1 knows no events: the id is none of its ack ids.
    with pytest.raises(gexc.InvalidArgument):
        v1_sub.acknowledge(subscription=v1_name("subscriptions", name), ack_ids=[event.ack_id])
    sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=[event.ack_id]))
    pub.PublishBatch(lpb.PublishBatchRequest(topic=topic, messages=[msg(b"new0"), msg(b"new1")]))
    got = pull_until(sub, name, lambda got: {b"new0", b"new1"} <= set(data_of(got)))
    assert sorted(data_of(got)) == [b"new0", b"new1"]  # nothing of the backlog, no second event
    assert not any(is_truncation(r) for r in got)
    # Acks of the event again and of the message leased before the truncation: stale, fine.
    sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=[event.ack_id, leased.ack_id]))
    sub.Nack(lpb.NackRequest(subscription=name, ack_id=[event.ack_id]))
    assert code_of(lambda: sub.Pull(lpb.PullRequest(subscription=name, return_immediately=True))) == (
        grpc.StatusCode.FAILED_PRECONDITION
    )
    assert (
        code_of(lambda: sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=["trunc:zz"])))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    missing = uid("none")
    assert (
        code_of(lambda: sub.TruncateSubscription(lpb.TruncateSubscriptionRequest(subscription=missing)))
        == grpc.StatusCode.NOT_FOUND
    )


def test_pull_batch_puts_the_event_first_and_nacks_redeliver_it(
    stubs: Stubs, uid: Callable[[str], str]
) -> None:
    pub, sub = stubs
    topic, name = topic_and_sub(stubs, uid)
    pub.PublishBatch(lpb.PublishBatchRequest(topic=topic, messages=[msg(b"old")]))
    sub.TruncateSubscription(lpb.TruncateSubscriptionRequest(subscription=name))
    pub.PublishBatch(
        lpb.PublishBatchRequest(topic=topic, messages=[msg(f"new{i}".encode()) for i in range(3)])
    )
    first = list(
        sub.PullBatch(lpb.PullBatchRequest(subscription=name, max_events=10), timeout=10).pull_responses
    )
    assert first and is_truncation(first[0])
    assert not any(is_truncation(r) for r in first[1:])
    messages = [r.ack_id for r in first[1:]]
    # A Nack of the event (with a message's id) gives it back at once, first again.
    sub.Nack(lpb.NackRequest(subscription=name, ack_id=[first[0].ack_id, *messages]))
    only = sub.PullBatch(lpb.PullBatchRequest(subscription=name, max_events=1), timeout=10).pull_responses
    assert len(only) == 1 and is_truncation(only[0])
    # So does a deadline of 0; a longer one keeps it leased.
    sub.ModifyAckDeadline(
        lpb.ModifyAckDeadlineRequest(subscription=name, ack_id=only[0].ack_id, ack_deadline_seconds=0)
    )
    third = sub.Pull(lpb.PullRequest(subscription=name, return_immediately=True), timeout=10)
    assert is_truncation(third)
    sub.ModifyAckDeadline(
        lpb.ModifyAckDeadlineRequest(subscription=name, ack_id=third.ack_id, ack_deadline_seconds=60)
    )
    got = pull_until(sub, name, lambda got: {b"new0", b"new1", b"new2"} <= set(data_of(got)))
    assert not any(is_truncation(r) for r in got) and b"old" not in data_of(got)
    sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=[third.ack_id]))
    sub.Nack(lpb.NackRequest(subscription=name, ack_id=[third.ack_id]))  # acked: the nack changes nothing
    after = sub.PullBatch(lpb.PullBatchRequest(subscription=name, return_immediately=True), timeout=10)
    assert list(after.pull_responses) == []


def test_truncation_policy_is_validated_stored_and_shown(stubs: Stubs, uid: Callable[[str], str]) -> None:
    _, sub = stubs
    topic = uid("top")
    stubs[0].CreateTopic(lpb.Topic(name=topic))
    policy = lpb.Subscription.TruncationPolicy
    by_bytes, by_age = uid("bytes"), uid("age")
    made = sub.CreateSubscription(
        lpb.Subscription(name=by_bytes, topic=topic, truncation_policy=policy(max_bytes=1000))
    )
    assert (
        made.truncation_policy.WhichOneof("policy") == "max_bytes"
        and made.truncation_policy.max_bytes == 1000
    )
    sub.CreateSubscription(
        lpb.Subscription(name=by_age, topic=topic, truncation_policy=policy(max_age_seconds=60))
    )
    got = sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=by_age))
    assert got.truncation_policy.WhichOneof("policy") == "max_age_seconds"
    assert got.truncation_policy.max_age_seconds == 60
    listed = sub.ListSubscriptions(lpb.ListSubscriptionsRequest(query=f'pubsub.topic = "{topic}"'))
    assert {s.name: s.truncation_policy.max_bytes for s in listed.subscription} == {by_bytes: 1000, by_age: 0}
    plain = uid("plain")
    sub.CreateSubscription(lpb.Subscription(name=plain, topic=topic))
    assert not sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=plain)).HasField(
        "truncation_policy"
    )
    for bad in (policy(max_bytes=0), policy(max_bytes=-5), policy(max_age_seconds=0), policy()):
        refused = uid("bad")
        assert (
            code_of(
                lambda b=bad, r=refused: sub.CreateSubscription(
                    lpb.Subscription(name=r, topic=topic, truncation_policy=b)
                )
            )
            == grpc.StatusCode.INVALID_ARGUMENT
        ), bad
        assert code_of(lambda r=refused: sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=r))) == (
            grpc.StatusCode.NOT_FOUND
        )


def test_max_age_seconds_drops_old_messages_with_an_event(stubs: Stubs, uid: Callable[[str], str]) -> None:
    pub, sub = stubs
    age = 3
    topic, name = topic_and_sub(
        stubs, uid, truncation_policy=lpb.Subscription.TruncationPolicy(max_age_seconds=age)
    )
    pub.PublishBatch(
        lpb.PublishBatchRequest(topic=topic, messages=[msg(f"old{i}".encode()) for i in range(3)])
    )
    time.sleep(age + 0.5)  # what is tested is the passing of time
    got = pull_until(sub, name, lambda got: any(is_truncation(r) for r in got), seconds=20)
    assert data_of(got) == []  # too old when fetched: dropped, never delivered
    events = [r for r in got if is_truncation(r)]
    assert len(events) == 1
    sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=[events[0].ack_id]))
    pub.Publish(lpb.PublishRequest(topic=topic, message=msg(b"fresh")))
    r = pull_one(sub, name, timeout=age)
    assert r.pubsub_event.message.data == b"fresh"


def test_max_bytes_drops_the_oldest_messages_with_an_event(stubs: Stubs, uid: Callable[[str], str]) -> None:
    pub, sub = stubs
    topic, name = topic_and_sub(
        stubs, uid, truncation_policy=lpb.Subscription.TruncationPolicy(max_bytes=2000)
    )
    count = 20
    pub.PublishBatch(
        lpb.PublishBatchRequest(
            topic=topic, messages=[msg(f"m{i:02}".encode().ljust(500, b".")) for i in range(count)]
        )
    )
    first = pull_one(sub, name)  # starts the runner; the owner checks the backlog every second
    assert not is_truncation(first)
    time.sleep(2.5)  # a check or two: a pull now would lease the whole backlog before the owner judges it
    got = pull_until(sub, name, lambda got: any(is_truncation(r) for r in got), seconds=20)
    assert is_truncation(got[0])  # the event before the messages that remain
    got = got + pull_until(sub, name, lambda more: b"m19" in {d[:3] for d in data_of(got + more)}, seconds=10)
    kept = {d[:3] for d in data_of(got)}
    assert len(kept) <= 8, sorted(kept)  # about max_bytes' worth (4 of 500 bytes) is kept
    assert len([r for r in got if is_truncation(r)]) == 1


def test_push_config_is_stored_and_cleared(
    gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str]
) -> None:
    pub, sub = stubs
    _, v1_sub = clients(gw)
    topic = uid("top")
    pub.CreateTopic(lpb.Topic(name=topic))
    name = uid("sub")
    made = sub.CreateSubscription(
        lpb.Subscription(name=name, topic=topic, push_config=lpb.PushConfig(push_endpoint="machinename:8888"))
    )
    assert made.push_config.push_endpoint == "machinename:8888"
    assert (
        v1_sub.get_subscription(subscription=v1_name("subscriptions", name)).push_config.push_endpoint == ""
    )
    sub.ModifyPushConfig(lpb.ModifyPushConfigRequest(subscription=name))  # empty: pause
    assert not sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=name)).HasField("push_config")
    sub.ModifyPushConfig(
        lpb.ModifyPushConfigRequest(subscription=name, push_config=lpb.PushConfig(push_endpoint="[::1]:9"))
    )
    assert (
        sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=name)).push_config.push_endpoint
        == "[::1]:9"
    )
    for bad in ("http://h/x", "h", "h:0", "169.254.169.254:80"):
        assert (
            code_of(
                lambda b=bad: sub.ModifyPushConfig(
                    lpb.ModifyPushConfigRequest(
                        subscription=name, push_config=lpb.PushConfig(push_endpoint=b)
                    )
                )
            )
            == grpc.StatusCode.INVALID_ARGUMENT
        )
    assert (
        code_of(
            lambda: sub.CreateSubscription(
                lpb.Subscription(
                    name=uid("s2"), topic=topic, push_config=lpb.PushConfig(push_endpoint="nope")
                )
            )
        )
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert code_of(lambda: sub.ModifyPushConfig(lpb.ModifyPushConfigRequest(subscription=uid("none")))) == (
        grpc.StatusCode.NOT_FOUND
    )


def test_query_filters_delivery(gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str]) -> None:
    pub, sub = stubs
    _, v1_sub = clients(gw)
    query = 'color = "red"'
    topic, name = topic_and_sub(stubs, uid, query=query)
    got = sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=name))
    assert got.query == query
    v1_filter = v1_sub.get_subscription(subscription=v1_name("subscriptions", name)).filter
    assert v1_filter  # the query's v1 translation, which delivery applies
    pub.PublishBatch(
        lpb.PublishBatchRequest(
            topic=topic, messages=[msg(b"blue", color="blue"), msg(b"red", color="red"), msg(b"none")]
        )
    )
    r = pull_one(sub, name)
    assert r.pubsub_event.message.data == b"red"
    sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=[r.ack_id]))
    assert list(sub.PullBatch(lpb.PullBatchRequest(subscription=name, max_events=10)).pull_responses) == []


def test_delete_topic_deletes_its_subscriptions(
    gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str]
) -> None:
    pub, sub = stubs
    _, v1_sub = clients(gw)
    topic, name = topic_and_sub(stubs, uid)
    other = uid("other")
    sub.CreateSubscription(lpb.Subscription(name=other, topic=topic))
    pub.DeleteTopic(lpb.DeleteTopicRequest(topic=topic))
    for s in (name, other):
        assert code_of(lambda s=s: sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=s))) == (
            grpc.StatusCode.NOT_FOUND
        )
        with pytest.raises(gexc.NotFound):
            v1_sub.get_subscription(subscription=v1_name("subscriptions", s))
    pub.CreateTopic(lpb.Topic(name=topic))  # the name is free again


def test_idle_subscriptions_are_garbage_collected(
    gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str]
) -> None:
    _, sub = stubs
    _, v1_sub = clients(gw)
    _, name = topic_and_sub(stubs, uid, garbage_collect_seconds=2)
    kept_topic, kept = topic_and_sub(stubs, uid, "kept")  # no garbage_collect_seconds: kept
    deadline = time.monotonic() + 30
    full = v1_name("subscriptions", name)
    while time.monotonic() < deadline:
        try:
            v1_sub.get_subscription(subscription=full)  # (v1's Get is no presence)
        except gexc.NotFound:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"{name} was not garbage-collected")
    assert code_of(lambda: sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=name))) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert code_of(lambda: sub.Pull(lpb.PullRequest(subscription=name))) == grpc.StatusCode.NOT_FOUND
    assert sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=kept)).topic == kept_topic


def test_calls_need_the_permissions_of_their_v1_twins(start_gateway: GatewayFactory, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    members = {
        "t-admin": "user:admin@example.com",
        "t-pub": "user:pub@example.com",
        "t-sub": "user:sub@example.com",
    }
    tokens.write_text(
        "".join(f"{t} {m}\n" for t, m in {**members, "t-nobody": "user:no@example.com"}.items())
    )
    roles = {
        "roles/pubsub.admin": "t-admin",
        "roles/pubsub.publisher": "t-pub",
        "roles/pubsub.subscriber": "t-sub",
    }
    bindings = [{"role": r, "members": [members[t]]} for r, t in roles.items()]
    policy = tmp_path / "iam.json"
    policy.write_text(json.dumps({"projects/iam-legacy": {"bindings": bindings}}))
    gw = start_gateway(
        "--auth-token-file", str(tokens), "--iam-policy-file", str(policy), "--legacy-project", "iam-legacy"
    )
    with grpc.insecure_channel(gw.address) as channel:
        pub, sub = lgrpc.PublisherServiceStub(channel), lgrpc.SubscriberServiceStub(channel)

        def as_(token: str) -> tuple[tuple[str, str], ...]:
            return (("authorization", f"Bearer {token}"),)

        topic, name = "iam-topic", "iam-sub"
        assert code_of(lambda: pub.CreateTopic(lpb.Topic(name=topic))) == grpc.StatusCode.UNAUTHENTICATED
        denied = grpc.StatusCode.PERMISSION_DENIED
        assert code_of(lambda: pub.CreateTopic(lpb.Topic(name=topic), metadata=as_("t-nobody"))) == denied
        pub.CreateTopic(lpb.Topic(name=topic), metadata=as_("t-admin"))
        sub.CreateSubscription(lpb.Subscription(name=name, topic=topic), metadata=as_("t-admin"))
        publish = lpb.PublishRequest(topic=topic, message=msg(b"x"))
        pub.Publish(publish, metadata=as_("t-pub"))
        assert code_of(lambda: pub.Publish(publish, metadata=as_("t-sub"))) == denied
        pull = lpb.PullBatchRequest(subscription=name, max_events=10)
        assert code_of(lambda: sub.PullBatch(pull, metadata=as_("t-pub"))) == denied
        got = sub.PullBatch(pull, metadata=as_("t-sub"), timeout=30).pull_responses
        sub.Acknowledge(
            lpb.AcknowledgeRequest(subscription=name, ack_id=[r.ack_id for r in got]), metadata=as_("t-sub")
        )
        nack = lpb.NackRequest(subscription=name, ack_id=["x"])
        assert code_of(lambda: sub.Nack(nack, metadata=as_("t-pub"))) == denied
        delete = lpb.DeleteTopicRequest(topic=topic)
        assert code_of(lambda: pub.DeleteTopic(delete, metadata=as_("t-pub"))) == denied
        assert code_of(lambda: pub.DeleteTopic(delete, metadata=as_("t-sub"))) == denied
        pub.DeleteTopic(delete, metadata=as_("t-admin"))


HOSTILE = {
    "undecodable": b"\xff\xff\xff\xff",
    "field 1 not UTF-8": b"\x0a\x02\xff\xfe",
    "field 1 of 1 MB": b"\x0a\x80\x80\x40" + b"a" * (1 << 20),
    "empty": b"",
}
NEVER = {
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}


def test_hostile_requests_get_the_apis_statuses(gw: GatewayProcess, stubs: Stubs) -> None:
    """Every method of both services, sent bytes that are no request, invalid UTF-8 or a 1 MB
    name: a status of the API, never one the clients retry or INTERNAL, and nothing made."""
    pub, _ = stubs
    before = [t.name for t in pub.ListTopics(lpb.ListTopicsRequest(max_results=1000)).topic]
    with grpc.insecure_channel(gw.address) as channel:
        for desc in (
            lgrpc.tech_dot_pubsub_dot_pubsub__pb2.DESCRIPTOR.services_by_name[s]
            for s in ("PublisherService", "SubscriberService")
        ):
            for method in desc.methods:
                call = channel.unary_unary(f"/{desc.full_name}/{method.name}")
                for what, body in HOSTILE.items():
                    try:
                        call(body, timeout=30)
                        code = grpc.StatusCode.OK
                    except grpc.RpcError as err:
                        code = err.code()  # type: ignore[attr-defined]
                    assert code not in NEVER, (method.name, what, code)
                    if what != "empty" or method.name not in {"ListTopics", "ListSubscriptions"}:
                        assert code != grpc.StatusCode.OK, (method.name, what)
    after = [t.name for t in pub.ListTopics(lpb.ListTopicsRequest(max_results=1000)).topic]
    assert after == before


def test_huge_garbage_collect_seconds_stay_a_valid_duration(stubs: Stubs, uid: Callable[[str], str]) -> None:
    _, sub = stubs
    _, name = topic_and_sub(stubs, uid, garbage_collect_seconds=2**62)
    assert (
        sub.GetSubscription(lpb.GetSubscriptionRequest(subscription=name)).garbage_collect_seconds
        == 315_576_000_000
    )


def test_long_queries_with_numbers_filter_delivery(
    gw: GatewayProcess, stubs: Stubs, uid: Callable[[str], str]
) -> None:
    """A query whose v1 translation passes v1's 256-byte filter limit is still delivered by,
    and the subscription stays updatable through v1; numeric labels compare as numbers."""
    pub, sub = stubs
    _, v1_sub = clients(gw)
    keys = " OR ".join(f"foo.com/k{i} = 1" for i in range(12))
    query = f'(n = 7 AND foo.com/device_type != "tablet") OR ({keys})'
    topic, name = topic_and_sub(stubs, uid, query=query)
    full = v1_name("subscriptions", name)
    assert len(v1_sub.get_subscription(subscription=full).filter.encode()) > 256
    v1_sub.update_subscription(
        subscription={"name": full, "ack_deadline_seconds": 30},
        update_mask={"paths": ["ack_deadline_seconds"]},
    )
    messages = [
        msg(b"seven", n=7),
        msg(b"seven-as-text", n="7"),  # the same attribute: a query cannot tell them apart
        msg(b"tablet", n=7, **{"foo.com/device_type": "tablet"}),
        msg(b"eight", n=8),
        msg(b"k11", **{"foo.com/k11": 1}),
    ]
    pub.PublishBatch(lpb.PublishBatchRequest(topic=topic, messages=messages))
    got: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        for r in sub.PullBatch(
            lpb.PullBatchRequest(subscription=name, max_events=10), timeout=10
        ).pull_responses:
            got.add(r.pubsub_event.message.data)
            sub.Acknowledge(lpb.AcknowledgeRequest(subscription=name, ack_id=[r.ack_id]))
    assert got == {b"seven", b"seven-as-text", b"k11"}
    assert list(sub.PullBatch(lpb.PullBatchRequest(subscription=name, max_events=10)).pull_responses) == []
