"""The lease/ack log's record format (gateway.leases.logformat)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.leases import logformat
from gateway.leases.commands import Ack, Checkpoint, Lease, SetDeadline

HYP = hsettings(max_examples=200, deadline=None, database=None)

partitions = st.integers(0, 2**31 - 1)
offsets = st.integers(0, 2**63 - 1)
generations = st.integers(1, 2**32)
epochs = st.integers(0, 2**31)
deadlines = st.integers(0, 2**53)
pairs = st.lists(st.tuples(offsets, offsets), max_size=6).map(tuple)
entries = st.lists(st.tuples(offsets, generations), max_size=6).map(tuple)

acks = st.builds(Ack, partitions, pairs, epochs)
leases = st.builds(Lease, partitions, entries, deadlines, epochs)
set_deadlines = st.builds(SetDeadline, partitions, entries, deadlines, epochs)
checkpoints = st.builds(
    Checkpoint,
    partitions,
    offsets,
    pairs,
    st.lists(st.tuples(offsets, offsets, generations, deadlines), max_size=6).map(tuple),
    st.lists(st.tuples(offsets, offsets, generations), max_size=6).map(tuple),
    epochs,
    st.one_of(st.just(-1), offsets),
)
commands = st.one_of(acks, leases, set_deadlines, checkpoints)


@HYP
@given(commands)
def test_round_trip(cmd) -> None:  # type: ignore[no-untyped-def]
    value = logformat.encode(cmd)
    assert value.isascii()
    assert b" " not in value  # compact
    assert logformat.decode(value) == cmd
    # The standard library's compact JSON of the same document, byte for byte (docs/lease-log.md).
    assert value == json.dumps(json.loads(value), separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        (Ack(0, ((10, 20),)), {"v": 1, "type": "ack", "p": 0, "epoch": 0, "ranges": [[10, 20]]}),
        (
            Lease(0, ((12, 1),), 1700000000000),
            {"v": 1, "type": "lease", "p": 0, "epoch": 0, "deadline": 1700000000000, "entries": [[12, 1]]},
        ),
        (
            SetDeadline(0, ((12, 1),), 1700000000000, 3),
            {"v": 1, "type": "deadline", "p": 0, "epoch": 3, "deadline": 1700000000000, "entries": [[12, 1]]},
        ),
        (
            Checkpoint(0, 10, ((11, 12),), ((12, 14, 1, 1700000000000),), ((12, 14, 1),)),
            {
                "v": 1,
                "type": "checkpoint",
                "p": 0,
                "epoch": 0,
                "watermark": 10,
                "acked": [[11, 12]],
                "lease_runs": [[12, 14, 1, 1700000000000]],
                "attempt_runs": [[12, 14, 1]],
            },
        ),
        (
            Checkpoint(0, 10, ((11, 12),), (), (), 1, log_offset=57),
            {
                "v": 1,
                "type": "checkpoint",
                "p": 0,
                "epoch": 1,
                "watermark": 10,
                "acked": [[11, 12]],
                "log_offset": 57,
                "lease_runs": [],
                "attempt_runs": [],
            },
        ),
    ],
)
def test_documented_format(cmd, expected: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    """The JSON shape documented in the module docstring (read by Spark's from_json)."""
    assert json.loads(logformat.encode(cmd)) == expected
    assert logformat.decode(json.dumps(expected).encode()) == cmd


def test_the_first_checkpoint_format_is_still_read() -> None:
    """Logs written before runs: one entry per offset, each read as a run of one."""
    old = (
        b'{"v":1,"type":"checkpoint","p":0,"epoch":2,"watermark":10,"acked":[[11,12]],'
        b'"leases":[[12,1,1700000000000],[13,2,1700000000001]],"attempts":[[12,1],[13,2]]}'
    )
    assert logformat.decode(old) == Checkpoint(
        0,
        10,
        ((11, 12),),
        ((12, 13, 1, 1700000000000), (13, 14, 2, 1700000000001)),
        ((12, 13, 1), (13, 14, 2)),
        2,
    )


def test_epoch_defaults_to_zero() -> None:
    assert logformat.decode(b'{"v":1,"type":"ack","p":2,"ranges":[]}') == Ack(2, ())


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"{",
        b"{}",
        b'{"v":2,"type":"ack","p":0,"ranges":[]}',  # unknown version
        b'{"v":0,"type":"ack","p":0,"ranges":[]}',
        b'{"v":"1","type":"ack","p":0,"ranges":[]}',
        b'{"type":"ack","p":0,"ranges":[]}',  # no version
        b'{"v":1,"type":"nack","p":0,"ranges":[]}',  # unknown type
        b'{"v":1,"type":null,"p":0}',
        b'{"v":1,"p":0,"ranges":[]}',  # no type
        b'{"v":1,"type":"ack","ranges":[]}',  # no partition
        b'{"v":1,"type":"ack","p":"x","ranges":[]}',
        b'{"v":1,"type":"ack","p":null,"ranges":[]}',
        b'{"v":1,"type":"ack","p":0}',  # missing fields
        b'{"v":1,"type":"ack","p":0,"ranges":null}',
        b'{"v":1,"type":"ack","p":0,"ranges":[[1]]}',
        b'{"v":1,"type":"ack","p":0,"ranges":[[1,2,3]]}',
        b'{"v":1,"type":"ack","p":0,"ranges":[1,2]}',
        b'{"v":1,"type":"ack","p":0,"ranges":[[1,"x"]]}',
        b'{"v":1,"type":"ack","p":0,"epoch":"x","ranges":[]}',
        b'{"v":1,"type":"lease","p":0,"entries":[[1,1]]}',
        b'{"v":1,"type":"lease","p":0,"deadline":null,"entries":[[1,1]]}',
        b'{"v":1,"type":"deadline","p":0,"deadline":5}',
        b'{"v":1,"type":"checkpoint","p":0,"watermark":1,"acked":[],"leases":[[1,1]],"attempts":[]}',
        b'{"v":1,"type":"checkpoint","p":0,"acked":[],"leases":[],"attempts":[]}',
        b'{"v":1,"type":"checkpoint","p":0,"watermark":1,"acked":[],"leases":[]}',
        b'{"v":1,"type":"checkpoint","p":0,"watermark":1,"acked":[],"lease_runs":[[1,2,1]],"attempt_runs":[]}',
        b'{"v":1,"type":"checkpoint","p":0,"watermark":1,"acked":[],"lease_runs":[],"attempt_runs":[[1,"x",1]]}',
        b'{"v":1,"type":"checkpoint","p":0,"watermark":1,"acked":[],"lease_runs":[]}',
    ],
)
def test_bad_records(value: bytes) -> None:
    with pytest.raises(logformat.BadLogRecord):
        logformat.decode(value)


@pytest.mark.parametrize(
    "value",
    [
        # JSON values that are not objects (once raised AttributeError)
        b"null",
        b"[]",
        b"1",
        b'"ack"',
        b"true",
        # non-finite numbers, which json.loads accepts (once raised OverflowError)
        b'{"v":1,"type":"ack","p":Infinity,"ranges":[]}',
        b'{"v":1,"type":"ack","p":0,"epoch":-Infinity,"ranges":[]}',
        b'{"v":1,"type":"lease","p":0,"deadline":Infinity,"entries":[]}',
        b'{"v":1,"type":"ack","p":NaN,"ranges":[]}',
    ],
)
def test_bad_records_of_other_shapes(value: bytes) -> None:
    with pytest.raises(logformat.BadLogRecord):
        logformat.decode(value)


@pytest.mark.parametrize("value", [b"[" * 100_000, b'{"a":' * 100_000])
def test_bad_records_deeply_nested(value: bytes) -> None:
    with pytest.raises(logformat.BadLogRecord):
        logformat.decode(value)


def test_bad_log_record_is_value_error() -> None:
    assert issubclass(logformat.BadLogRecord, ValueError)


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(),
    st.text(max_size=5),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@HYP
@given(
    body=st.fixed_dictionaries(
        {"v": st.sampled_from([1, 1, 1, 2, None])},
        optional={
            "type": st.sampled_from(["ack", "lease", "deadline", "checkpoint", "x"]) | json_values,
            "p": st.integers(0, 5) | json_values,
            "epoch": st.integers(0, 5) | json_values,
            "deadline": st.integers(0, 5) | json_values,
            "watermark": st.integers(0, 5) | json_values,
            "ranges": json_values,
            "entries": json_values,
            "acked": json_values,
            "leases": json_values,
            "attempts": json_values,
        },
    )
)
def test_decode_total_on_json_objects(body: dict[str, object]) -> None:
    """Any JSON object either decodes to a command or raises BadLogRecord, nothing else."""
    value = json.dumps(body).encode()
    try:
        cmd = logformat.decode(value)
    except logformat.BadLogRecord:
        return
    assert isinstance(cmd, Ack | Lease | SetDeadline | Checkpoint)


def test_keys() -> None:
    assert logformat.checkpoint_key(3) == b"s.3.0"
    assert logformat.checkpoint_key(3, 2) == b"s.3.2"
    assert logformat.command_key(1, "w-1", 5) == b"e.1.w-1.5"
    assert logformat.is_command_key(logformat.command_key(0, "w", 0))
    assert not logformat.is_command_key(logformat.checkpoint_key(0))
    assert logformat.command_key(0, "w", 1) != logformat.command_key(0, "w", 2)
    assert logformat.command_key(0, "w", 1) != logformat.command_key(1, "w", 1)
    assert logformat.checkpoint_key(1) != logformat.checkpoint_key(11)
    for key in (logformat.checkpoint_key(12), logformat.command_key(12, "abc", 99)):
        assert key.isascii()
