"""Records without a key avoid partitions whose writes have been outstanding too long."""

from __future__ import annotations

import time

from gateway.kafka.producer import SLOW_WRITE_SECONDS, Producer


def _producer() -> Producer:
    return Producer({"bootstrap.servers": "127.0.0.1:1"})  # never started: no client is made


def test_picks_spread_over_all_partitions_when_none_is_slow() -> None:
    producer = _producer()
    picked = {producer._pick("t", 6) for _ in range(600)}
    assert picked == set(range(6))


def test_a_partition_slow_to_confirm_is_avoided() -> None:
    producer = _producer()
    long_ago = time.monotonic() - SLOW_WRITE_SECONDS - 0.5
    producer._writing[("t", 2)] = {1: long_ago}
    producer._writing[("t", 4)] = {2: long_ago, 3: time.monotonic()}
    picked = {producer._pick("t", 6) for _ in range(600)}
    assert picked == {0, 1, 3, 5}


def test_a_write_just_started_does_not_make_a_partition_slow() -> None:
    producer = _producer()
    producer._writing[("t", 2)] = {1: time.monotonic()}
    assert 2 in {producer._pick("t", 6) for _ in range(600)}


def test_other_topics_do_not_count() -> None:
    producer = _producer()
    producer._writing[("u", 2)] = {1: time.monotonic() - 10}
    assert 2 in {producer._pick("t", 6) for _ in range(600)}


def test_when_every_partition_is_slow_any_is_used() -> None:
    producer = _producer()
    for p in range(3):
        producer._writing[("t", p)] = {p: time.monotonic() - 10}
    assert {producer._pick("t", 3) for _ in range(300)} == {0, 1, 2}
