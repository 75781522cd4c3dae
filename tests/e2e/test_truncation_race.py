"""Nothing published before a TruncateSubscription, or before the time of a Seek, comes back
after it: publish and cut back to back, many times, on a topic of 4 partitions served by two
gateway processes whose deliveries are running (they fetched the messages before the cut).

The early API's client (generated from our proto) truncates; the official v1 client seeks to
a time. Pulls go to both processes, since each delivers only the partitions it owns."""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.cloud import pubsub_v1
from google.protobuf import timestamp_pb2

from gateway._pb.tech.pubsub import pubsub_pb2 as lpb
from gateway._pb.tech.pubsub import pubsub_pb2_grpc as lgrpc
from tests.e2e.clients import clients
from tests.gateways import GatewayProcess

PROJECT = "cut-e2e"
ROUNDS = 12
PER_ROUND = 8  # messages published before each cut, in 4 requests (spread over the partitions)


@pytest.fixture(scope="module")
def pair(kafka_bootstrap: str, log_dir: Path) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    prefix = f"cut{uuid.uuid4().hex[:6]}"
    first = GatewayProcess(kafka_bootstrap, prefix, log_dir, "--legacy-project", PROJECT).start()
    second = GatewayProcess(kafka_bootstrap, prefix, log_dir, "--legacy-project", PROJECT).start()
    yield first, second
    first.kill()
    second.kill()


def _is_event(r: lpb.PullResponse) -> bool:
    return r.pubsub_event.truncated


class _LegacyDriver:
    """Both processes through the early API: publish, truncate, PullBatch and ack."""

    def __init__(
        self, pair: tuple[GatewayProcess, GatewayProcess], tag: str, max_age_seconds: int = 0
    ) -> None:
        self._channels = [grpc.insecure_channel(gw.address) for gw in pair]
        self.pubs = [lgrpc.PublisherServiceStub(c) for c in self._channels]
        self.subs = [lgrpc.SubscriberServiceStub(c) for c in self._channels]
        self.topic, self.name = f"topic-{tag}", f"sub-{tag}"
        self.pubs[0].CreateTopic(lpb.Topic(name=self.topic))
        policy = (
            lpb.Subscription.TruncationPolicy(max_age_seconds=max_age_seconds) if max_age_seconds else None
        )
        self.subs[0].CreateSubscription(
            lpb.Subscription(name=self.name, topic=self.topic, truncation_policy=policy)
        )

    def publish(self, side: int, texts: list[str]) -> None:
        messages = [lpb.PubsubMessage(data=t.encode()) for t in texts]
        self.pubs[side].PublishBatch(lpb.PublishBatchRequest(topic=self.topic, messages=messages), timeout=30)

    def cut(self, side: int) -> None:
        self.subs[side].TruncateSubscription(
            lpb.TruncateSubscriptionRequest(subscription=self.name), timeout=60
        )

    def pull(self, side: int) -> tuple[list[str], bool]:
        """(the data delivered, whether a truncation event came), everything acked."""
        stub = self.subs[side]
        got = stub.PullBatch(
            lpb.PullBatchRequest(subscription=self.name, max_events=100, return_immediately=True), timeout=30
        ).pull_responses
        if got:
            stub.Acknowledge(lpb.AcknowledgeRequest(subscription=self.name, ack_id=[r.ack_id for r in got]))
        texts = [r.pubsub_event.message.data.decode() for r in got if not _is_event(r)]
        return texts, any(_is_event(r) for r in got)

    def close(self) -> None:
        for channel in self._channels:
            channel.close()


class _SeekDriver:
    """Both processes through the official v1 client: publish, Seek to now, Pull and ack."""

    def __init__(self, pair: tuple[GatewayProcess, GatewayProcess], tag: str) -> None:
        made = [clients(gw) for gw in pair]
        self.pubs = [p for p, _ in made]
        self.subs = [s for _, s in made]
        self.topic = f"projects/{PROJECT}/topics/topic-{tag}"
        self.name = f"projects/{PROJECT}/subscriptions/sub-{tag}"
        self.pubs[0].create_topic(name=self.topic)
        self.subs[0].create_subscription(name=self.name, topic=self.topic)

    def publish(self, side: int, texts: list[str]) -> None:
        for future in [self.pubs[side].publish(self.topic, t.encode()) for t in texts]:
            future.result(timeout=30)

    def cut(self, side: int) -> None:
        # Kafka's timestamps are milliseconds: a message published in the same one as the
        # seek's time would be on either side of it.
        time.sleep(0.002)
        when = timestamp_pb2.Timestamp()
        when.GetCurrentTime()
        self.subs[side].seek(request={"subscription": self.name, "time": when}, timeout=60)
        time.sleep(0.002)

    def pull(self, side: int) -> tuple[list[str], bool]:
        sub: pubsub_v1.SubscriberClient = self.subs[side]
        with warnings.catch_warnings():  # return_immediately is deprecated, and what this wants
            warnings.simplefilter("ignore", DeprecationWarning)
            got = sub.pull(
                request={"subscription": self.name, "max_messages": 100, "return_immediately": True},
                timeout=30,
            ).received_messages
        if got:
            sub.acknowledge(subscription=self.name, ack_ids=[m.ack_id for m in got])
        return [m.message.data.decode() for m in got], False

    def close(self) -> None:
        for client in self.subs:
            client.close()


@pytest.mark.parametrize("driver", [_LegacyDriver, _SeekDriver], ids=["truncate", "seek-to-time"])
def test_nothing_published_before_the_cut_comes_back(
    pair: tuple[GatewayProcess, GatewayProcess], driver: type[_LegacyDriver | _SeekDriver]
) -> None:
    d = driver(pair, uuid.uuid4().hex[:8])
    try:
        # Warm: both processes' runners join the group and fetch (a first message pulled).
        d.publish(0, ["warm"])
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while "warm" not in seen:
            assert time.monotonic() < deadline, "the first message never came"
            for side in (0, 1):
                seen += d.pull(side)[0]
            time.sleep(0.1)
        late: list[str] = []  # published before a cut, delivered after it returned
        twice: list[str] = []
        events = 0
        for rnd in range(ROUNDS):
            before = [f"r{rnd}-drop{i}" for i in range(PER_ROUND)]
            for i in range(0, PER_ROUND, 2):
                d.publish(rnd % 2, before[i : i + 2])
            d.cut(rnd % 2)
            after = f"r{rnd}-after"
            d.publish((rnd + 1) % 2, [after])
            delivered: list[str] = []
            deadline = time.monotonic() + 30
            while after not in delivered:
                assert time.monotonic() < deadline, f"round {rnd}: {after} never came ({delivered})"
                for side in (rnd % 2, (rnd + 1) % 2):
                    texts, event = d.pull(side)
                    delivered += texts
                    events += event
            time.sleep(0.3)  # a duplicate of `after`, or a late old message, would come by now
            for side in (0, 1):
                delivered += d.pull(side)[0]
            late += [t for t in delivered if t != after]
            twice += [after] * (delivered.count(after) - 1)
        assert late == [], f"delivered after the cut returned: {late}"
        assert twice == [], f"delivered twice: {twice}"
        if driver is _LegacyDriver:
            assert events == ROUNDS, "one truncation event a round, before what came after it"
    finally:
        d.close()


def test_a_truncation_events_lease_holds_in_every_process(
    pair: tuple[GatewayProcess, GatewayProcess],
) -> None:
    d = _LegacyDriver(pair, uuid.uuid4().hex[:8])
    try:
        d.cut(0)
        first = (
            d.subs[0]
            .PullBatch(lpb.PullBatchRequest(subscription=d.name, return_immediately=True), timeout=30)
            .pull_responses
        )
        events = [r for r in first if _is_event(r)]
        assert len(events) == 1, first
        ack_id = events[0].ack_id
        for stub in d.subs:  # leased for the ack deadline (10 s): neither process hands it out
            again = stub.PullBatch(
                lpb.PullBatchRequest(subscription=d.name, return_immediately=True), timeout=30
            )
            assert not any(_is_event(r) for r in again.pull_responses)
        d.subs[1].Nack(lpb.NackRequest(subscription=d.name, ack_id=[ack_id]))  # through the other one
        back = d.subs[0].PullBatch(
            lpb.PullBatchRequest(subscription=d.name, return_immediately=True), timeout=30
        )
        assert [r.ack_id for r in back.pull_responses if _is_event(r)] == [ack_id]
        d.subs[1].Acknowledge(lpb.AcknowledgeRequest(subscription=d.name, ack_id=[ack_id]))
        for stub in d.subs:
            stub.ModifyAckDeadline(
                lpb.ModifyAckDeadlineRequest(subscription=d.name, ack_id=ack_id, ack_deadline_seconds=0)
            )
            left = stub.PullBatch(
                lpb.PullBatchRequest(subscription=d.name, return_immediately=True), timeout=30
            )
            assert not any(_is_event(r) for r in left.pull_responses), "acked: no event any more"
    finally:
        d.close()


def test_nothing_a_snapshot_holds_acked_comes_back_after_a_seek_to_it(
    pair: tuple[GatewayProcess, GatewayProcess],
) -> None:
    """Each round: messages published and acked, a snapshot, a Seek to a time before them (so
    both processes fetch them again as unacked), then a Seek to the snapshot: once it returns,
    none of them is delivered."""
    d = _SeekDriver(pair, uuid.uuid4().hex[:8])
    try:
        late: list[str] = []
        for rnd in range(6):
            before = timestamp_pb2.Timestamp()
            before.GetCurrentTime()
            time.sleep(0.002)
            texts = [f"r{rnd}-acked{i}" for i in range(PER_ROUND)]
            for i in range(0, PER_ROUND, 2):
                d.publish(rnd % 2, texts[i : i + 2])
            got: list[str] = []
            deadline = time.monotonic() + 30
            while not set(texts) <= set(got):
                assert time.monotonic() < deadline, f"round {rnd}: not all came ({got})"
                for side in (0, 1):
                    got += d.pull(side)[0]
            snapshot = d.name.replace("/subscriptions/", "/snapshots/") + f"-{rnd}"
            d.subs[0].create_snapshot(name=snapshot, subscription=d.name)
            d.subs[1].seek(request={"subscription": d.name, "time": before}, timeout=60)
            time.sleep(0.5)  # both processes fetch them again, unacked
            d.subs[rnd % 2].seek(request={"subscription": d.name, "snapshot": snapshot}, timeout=60)
            after = f"r{rnd}-after"
            d.publish(0, [after])
            delivered: list[str] = []
            deadline = time.monotonic() + 30
            while after not in delivered:
                assert time.monotonic() < deadline, f"round {rnd}: {after} never came ({delivered})"
                for side in (0, 1):
                    delivered += d.pull(side)[0]
            time.sleep(0.3)
            for side in (0, 1):
                delivered += d.pull(side)[0]
            late += [t for t in delivered if t != after]
        assert late == [], f"acked in the snapshot, delivered after the Seek to it returned: {late}"
    finally:
        d.close()


def test_the_truncation_policy_drops_what_aged_in_both_processes_before_its_event(
    pair: tuple[GatewayProcess, GatewayProcess],
) -> None:
    """max_age_seconds 2 on 4 partitions owned by two processes: messages left unpulled for
    longer are dropped by their owners, an event comes, and nothing of them after it."""
    d = _LegacyDriver(pair, uuid.uuid4().hex[:8], max_age_seconds=2)
    try:
        # Warm: a message older than 2 s when first fetched is dropped, so publish until one
        # arrives (both processes' runners have joined by then), then ack whatever event came.
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while not any(t.startswith("warm") for t in seen):
            assert time.monotonic() < deadline, "no message came"
            d.publish(0, [f"warm{len(seen)}"])
            for side in (0, 1):
                seen += d.pull(side)[0]
            time.sleep(0.2)
        for side in (0, 1):
            d.pull(side)
        for rnd in range(3):
            aged = [f"r{rnd}-aged{i}" for i in range(PER_ROUND)]
            for i in range(0, PER_ROUND, 2):
                d.publish(i // 2 % 2, aged[i : i + 2])
            time.sleep(4.5)  # 2 s to age, the owners' once-a-second check, and a margin
            delivered: list[str] = []
            event = False
            deadline = time.monotonic() + 30
            while not event:
                assert time.monotonic() < deadline, f"round {rnd}: no truncation event ({delivered})"
                for side in (0, 1):
                    texts, got = d.pull(side)
                    delivered += texts
                    event = event or got
            after = f"r{rnd}-after"
            d.publish(1, [after])
            deadline = time.monotonic() + 30
            while after not in delivered:
                assert time.monotonic() < deadline, f"round {rnd}: {after} never came ({delivered})"
                for side in (0, 1):
                    delivered += d.pull(side)[0]
            assert delivered == [after], f"round {rnd}: aged messages delivered: {delivered}"
    finally:
        d.close()
