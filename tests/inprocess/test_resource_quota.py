"""The resource store's quota bookkeeping: counts decided by the order of the resources log.

The store's records are the gateway's generated protos; its follower is fed here by hand."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.core.resources import Quota, Resource, ResourceStore
from gateway.errors import ResourceExhausted
from gateway.translate import limits
from gateway.translate.meta import TopicMeta


def quota_error(current: int) -> ResourceExhausted:
    return limits.quota_exceeded("topics", "p", current, 3, "--max-topics-per-project")


def _store() -> ResourceStore:
    """A store fed by hand with the records of its log (no Kafka: only the bookkeeping)."""
    none = cast(Any, None)
    return ResourceStore(none, none, {}, "resources", -1)


def _record(name: str, create: bool = True) -> bytes:
    return Resource(name, pubsub_pb2.Topic(name=name), TopicMeta(f"k.{name}", 1), op=name).encode(create)


def _feed(store: ResourceStore, *records: tuple[int, str, bool | None]) -> None:
    """(offset, name, create) records; create None is a deletion (a tombstone)."""
    store._follower.apply_batch(
        [
            (
                "resources",
                0,
                offset,
                f"topic/{name}".encode(),
                None if create is None else _record(name, create),
            )
            for offset, name, create in records
        ]
    )


def test_count_per_project_and_before_an_offset() -> None:
    store = _store()
    t = "projects/p/topics/"
    _feed(
        store,
        (0, t + "a", True),
        (1, "projects/q/topics/x", True),
        (2, t + "b", True),
        (3, t + "a", False),
        (4, t + "c", True),
    )  # an update keeps a's place in the order
    assert store.count("topic", t) == 3
    assert store.count("topic", "projects/q/topics/") == 1
    assert store.count("topic", t, before=2) == 1
    assert store.count("topic", t, before=4) == 2
    assert store.count("subscription", "projects/p/subscriptions/") == 0


def test_log_order_admits_exactly_the_limit() -> None:
    """Creates racing from several processes: each decides on what came before its own record,
    so exactly the first `limit` are admitted, whoever reads what when."""
    store = _store()
    t = "projects/p/topics/"
    _feed(store, *[(i, f"{t}t{i}", True) for i in range(6)])
    admitted = [i for i in range(6) if store.count("topic", t, before=i) < 3]
    assert admitted == [0, 1, 2]


def test_deleted_resources_free_their_place() -> None:
    store = _store()
    t = "projects/p/topics/"
    _feed(store, (0, t + "a", True), (1, t + "b", True), (2, t + "a", None), (3, t + "c", True))
    assert store.count("topic", t) == 2
    assert store.count("topic", t, before=3) == 1
    quota = Quota(t, 2, quota_error)
    with pytest.raises(ResourceExhausted):
        store.check_quota("topic", quota)
    store.check_quota("topic", Quota(t, 3, quota_error))


def test_a_create_that_lost_a_race_keeps_the_winners_place() -> None:
    store = _store()
    t = "projects/p/topics/"
    _feed(store, (0, t + "a", True), (5, t + "a", True))  # the second create lost
    assert store.count("topic", t, before=3) == 1
