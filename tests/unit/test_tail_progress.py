"""A log reader of a deleted subscription commits no more applied progress: a commit after the
deleter removed the `<group>.applied` group would create that group again, for ever. And what
other threads ask of a reader is done on its own thread's next turn, in the order asked."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from gateway.kafka.consumer import TailReader


class Commits:
    def __init__(self) -> None:
        self.made: list[list[TopicPartition]] = []
        self.changes: list[tuple[str, list[tuple[str, int, int]]]] = []

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self.changes.append(("assign", [(tp.topic, tp.partition, tp.offset) for tp in tps]))

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        self.changes.append(("unassign", [(tp.topic, tp.partition, tp.offset) for tp in tps]))

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.made.append(offsets)

    def close(self) -> None: ...


def reader() -> tuple[TailReader, Commits]:
    tail = TailReader({"bootstrap.servers": "127.0.0.1:1"}, "t", lambda _: None, progress_group="g.applied")
    tail._consumer.close()  # no broker is reached: the commits are recorded instead
    commits = Commits()
    tail._consumer = commits  # type: ignore[assignment]
    return tail, commits


def test_progress_reported_is_committed_on_the_next_turn() -> None:
    tail, commits = reader()
    tail.report_progress({("log", 0): 12})
    tail._hand_over()
    assert [[(tp.topic, tp.partition, tp.offset) for tp in c] for c in commits.made] == [[("log", 0, 12)]]


def test_dropped_progress_is_never_committed_nor_is_any_reported_after() -> None:
    tail, commits = reader()
    tail.report_progress({("log", 0): 12})
    tail.drop_progress()
    tail.report_progress({("log", 1): 7})
    tail._hand_over()
    assert commits.made == []


def test_assignment_changes_wait_for_the_readers_turn_and_keep_their_order() -> None:
    tail, commits = reader()
    tail.add({("log", 0): 5})
    tail.remove([("log", 0)])
    tail.add({("log", 0): 9, ("log", 1): 0})
    assert commits.changes == []  # the consumer is the reader thread's alone
    tail._hand_over()
    assert commits.changes == [
        ("assign", [("log", 0, 5)]),
        ("unassign", [("log", 0, -1001)]),
        ("assign", [("log", 0, 9), ("log", 1, 0)]),
    ]
    tail._hand_over()
    assert len(commits.changes) == 3
