"""A GroupFetcher's revocation callback does not look the topic up itself: the look, a blocking
metadata call, waits for the fetcher's loop (see GroupFetcher's docstring: made inside the poll,
it ends the poll's record of itself and the poll's next callback aborts the process). Seen as a
gateway killed by confluent-kafka's `CallState_get: Assertion 'cs != NULL'` when its broker
restarted: tests/e2e/test_broker_restart.py."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from confluent_kafka import TopicPartition

from gateway.kafka.consumer import GroupFetcher


class Consumer:
    """Counts metadata calls; answers a topic gone. Stops the loop after `polls` polls."""

    def __init__(self, fetcher: GroupFetcher, polls: int = 1) -> None:
        self.looked = 0
        self.fetcher = fetcher
        self.polls = polls

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        self.looked += 1
        self.thread = threading.get_ident()
        return SimpleNamespace(topics={})

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        pass

    def poll(self, timeout: float) -> None:
        self.polls -= 1
        if self.polls <= 0:
            self.fetcher._running = False


class Listener:
    def on_revoked(self, partitions: list[int], lost: bool) -> dict[int, int]:
        return {}

    def wants_records(self) -> bool:
        return True


@pytest.fixture
def fetcher() -> GroupFetcher:
    # No broker is needed to make a consumer; the fake stands in for every call made.
    made = GroupFetcher({"bootstrap.servers": "127.0.0.1:1"}, "g", "p.t", Listener(), 6000)  # type: ignore[arg-type]
    made._consumer.close()
    made._assigned = frozenset({0, 1})
    return made


def test_losing_the_last_partition_leaves_the_look_to_the_loop(
    fetcher: GroupFetcher, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = Consumer(fetcher)
    fetcher._on_lost(consumer, [TopicPartition("p.t", 0), TopicPartition("p.t", 1)])  # type: ignore[arg-type]
    assert consumer.looked == 0  # not within the callback

    fetcher._consumer = consumer  # type: ignore[assignment]
    fetcher._run()
    assert consumer.looked == 1
    assert "Kafka topic p.t, which consumer group g reads, does not exist" in caplog.text


def test_no_look_while_partitions_are_left_or_once_new_ones_came(fetcher: GroupFetcher) -> None:
    consumer = Consumer(fetcher, polls=2)
    fetcher._on_revoke(consumer, [TopicPartition("p.t", 0)])  # type: ignore[arg-type]
    fetcher._consumer = consumer  # type: ignore[assignment]
    fetcher._run()
    assert consumer.looked == 0  # partition 1 is still owned

    fetcher._running = True
    consumer.polls = 2
    fetcher._on_revoke(consumer, [TopicPartition("p.t", 1)])  # type: ignore[arg-type]
    fetcher._assigned = frozenset({2})  # a new assignment before the loop came round
    fetcher._run()
    assert consumer.looked == 0


def test_the_look_runs_on_the_loops_thread_only(fetcher: GroupFetcher) -> None:
    consumer = Consumer(fetcher)
    fetcher._consumer = consumer  # type: ignore[assignment]
    fetcher._on_lost(consumer, [TopicPartition("p.t", 0), TopicPartition("p.t", 1)])  # type: ignore[arg-type]
    loop = threading.Thread(target=fetcher._run)
    loop.start()
    loop.join(5)
    assert not loop.is_alive()
    assert consumer.looked == 1
    assert consumer.thread == loop.ident
