"""The named values of the lease logic and the Kafka modules: the named tuples behave as the
bare tuples they replace, and what goes into the lease/ack log stays plain tuples, encoded
byte for byte as before (orjson refuses named tuples)."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
import pytest

from gateway.kafka import consumer
from gateway.kafka.producer import TxnRecord
from gateway.leases import logformat
from gateway.leases.commands import Ack, Checkpoint, Lease, SetDeadline
from gateway.leases.fold import Folded, fold
from gateway.leases.ranges import RangeSet, to_ranges
from gateway.leases.state import AckOrder, LeaseTerm, PartitionState


class _Pair(NamedTuple):
    a: int
    b: int


def test_orjson_refuses_named_tuples() -> None:
    """Why ranges and (offset, generation) pairs stay plain tuples: commands are encoded as
    they are, and a named tuple in one would fail the write of the lease/ack log."""
    with pytest.raises(TypeError):
        orjson.dumps({"ranges": (_Pair(1, 2),)})
    assert orjson.dumps({"ranges": ((1, 2),)}) == b'{"ranges":[[1,2]]}'


def _exact_tuples(value: Any) -> bool:
    """Every tuple in `value` (a command's field) is a plain one, nested ones too."""
    if isinstance(value, tuple):
        return type(value) is tuple and all(_exact_tuples(v) for v in value)
    return True


def test_commands_from_the_lease_logic_encode_as_before() -> None:
    s: PartitionState[str] = PartitionState(0, 10)
    s.add_records((o, f"r{o}") for o in range(10, 20))
    taken = s.take(4, now_ms=0, deadline_ms=5000)
    assert all(type(t) is tuple for t in taken)
    s.apply(Ack(0, tuple(to_ranges([11, 12, 15]))), now_ms=0)
    cp = s.checkpoint()
    for field in (cp.acked, cp.leases, cp.attempts):
        assert _exact_tuples(field)
    assert logformat.encode(cp) == logformat.encode(
        Checkpoint(0, 10, ((11, 13), (15, 16)), ((10, 14, 1, 5000),), ((10, 14, 1),))
    )
    ranges = tuple(to_ranges([3, 4, 5, 9]))
    assert _exact_tuples(ranges) and _exact_tuples(tuple(RangeSet(ranges)))
    assert logformat.encode(Ack(0, ranges)) == logformat.encode(Ack(0, ((3, 6), (9, 10))))
    entries = tuple((o, g) for o, g, _ in taken)
    assert logformat.encode(Lease(0, entries, 7000)) == logformat.encode(
        Lease(0, ((10, 1), (11, 1), (12, 1), (13, 1)), 7000)
    )
    assert logformat.encode(SetDeadline(0, entries[:1], 0)) == logformat.encode(SetDeadline(0, ((10, 1),), 0))


def test_named_results_unpack_and_compare_as_tuples() -> None:
    s: PartitionState[str] = PartitionState(0, 0)
    s.add_records((o, f"r{o}") for o in range(3))
    s.take(3, now_ms=0, deadline_ms=1000)

    term = s.lease_of(1)
    assert isinstance(term, LeaseTerm) and term == (1, 1000)
    assert (term.generation, term.deadline_ms) == (term[0], term[1]) == (1, 1000)
    generation, deadline = term
    assert (generation, deadline) == (1, 1000)
    assert s.lease_of(7) is None

    order = s.order_acks([2, 0])
    assert isinstance(order, AckOrder) and order == ([0, 2], [])
    now, held = order
    assert now == order.now == [0, 2] and held == order.held == []

    log = [(b"e.0.w.1", logformat.encode(Ack(0, ((0, 2),))))]
    folded = fold(0, 0, log, now_ms=0)
    assert isinstance(folded, Folded)
    state, keys = folded
    assert state is folded.state and keys is folded.folded == {b"e.0.w.1"}
    assert state.watermark == 2


def test_txn_record_is_the_tuple_it_names() -> None:
    r = TxnRecord("t", None, b"k", b"v", None)
    assert r == ("t", None, b"k", b"v", None)
    topic, partition, key, value, headers = r
    assert (topic, partition, key, value, headers) == (r.topic, r.partition, r.key, r.value, r.headers)


class _Watermarks:
    def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
        return 4, 9


def test_offsets_are_first_and_end() -> None:
    got = consumer._watermarks(_Watermarks(), consumer.TopicPartition("t", 0), 1.0)  # type: ignore[arg-type]
    assert isinstance(got, consumer.Offsets) and got == (4, 9)
    assert (got.first, got.end) == got
    low, high = got
    assert (low, high) == (4, 9)
