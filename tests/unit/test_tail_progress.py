"""A log reader of a deleted subscription commits no more applied progress: a commit after the
deleter removed the `<group>.applied` group would create that group again, for ever."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from gateway.kafka.consumer import TailReader


class Commits:
    def __init__(self) -> None:
        self.made: list[list[TopicPartition]] = []

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
    tail._commit_progress()
    assert [[(tp.topic, tp.partition, tp.offset) for tp in c] for c in commits.made] == [[("log", 0, 12)]]


def test_dropped_progress_is_never_committed_nor_is_any_reported_after() -> None:
    tail, commits = reader()
    tail.report_progress({("log", 0): 12})
    tail.drop_progress()
    tail.report_progress({("log", 1): 7})
    tail._commit_progress()
    assert commits.made == []
