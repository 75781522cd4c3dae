"""The lease/ack log's names (gateway.leases.logformat) as readers outside the gateway use them.

Spark (spark/acklog.py, spark/acks.py) reads and writes the log through these constants, so a
change here is a change of the on-disk format: the literals below pin it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.leases import logformat
from gateway.leases.commands import Ack, Checkpoint, Command, Lease, SetDeadline

HYP = hsettings(max_examples=200, deadline=None, database=None)


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        (Ack(0, ((10, 20),)), b'{"v":1,"p":0,"epoch":0,"type":"ack","ranges":[[10,20]]}'),
        (Ack(3, ((1, 2), (5, 9)), 2), b'{"v":1,"p":3,"epoch":2,"type":"ack","ranges":[[1,2],[5,9]]}'),
        (Ack(1, ()), b'{"v":1,"p":1,"epoch":0,"type":"ack","ranges":[]}'),
        (
            Lease(1, ((12, 1), (13, 2)), 1700000000000, 4),
            b'{"v":1,"p":1,"epoch":4,"type":"lease","deadline":1700000000000,"entries":[[12,1],[13,2]]}',
        ),
        (
            SetDeadline(2, ((12, 1),), 0, 3),
            b'{"v":1,"p":2,"epoch":3,"type":"deadline","deadline":0,"entries":[[12,1]]}',
        ),
        (
            Checkpoint(0, 10, ((11, 12),), ((12, 14, 1, 1700000000000),), ((12, 14, 1),)),
            b'{"v":1,"p":0,"epoch":0,"type":"checkpoint","watermark":10,"acked":[[11,12]],'
            b'"lease_runs":[[12,14,1,1700000000000]],"attempt_runs":[[12,14,1]]}',
        ),
        (
            Checkpoint(5, 10, ((11, 12),), (), (), 1, log_offset=57),
            b'{"v":1,"p":5,"epoch":1,"type":"checkpoint","watermark":10,"acked":[[11,12]],'
            b'"log_offset":57,"lease_runs":[],"attempt_runs":[]}',
        ),
    ],
)
def test_encode_bytes_are_pinned(cmd: Command, expected: bytes) -> None:
    """Byte for byte, key order included: existing logs and their readers depend on it."""
    assert logformat.encode(cmd) == expected
    assert logformat.decode(expected) == cmd


def test_the_names() -> None:
    assert logformat.VERSION == 1
    assert (logformat.CHECKPOINT_KEY_PREFIX, logformat.COMMAND_KEY_PREFIX) == ("s.", "e.")
    assert logformat.KEY_SEPARATOR == "."
    types = (logformat.TYPE_ACK, logformat.TYPE_LEASE, logformat.TYPE_DEADLINE, logformat.TYPE_CHECKPOINT)
    assert types == ("ack", "lease", "deadline", "checkpoint")
    assert logformat.CHECKPOINT_RUNS_MARK == ',"lease'
    for runs in (logformat.FIELD_LEASE_RUNS, logformat.FIELD_LEASES):
        assert f',"{runs}"'.startswith(logformat.CHECKPOINT_RUNS_MARK)


def test_keys_are_built_from_the_prefixes() -> None:
    cp, cmd = logformat.checkpoint_key(3, 7), logformat.command_key(3, "w-1", 5)
    assert (cp, cmd, logformat.command_prefix(3)) == (b"s.3.7", b"e.3.w-1.5", b"e.3.")
    assert cp.decode().startswith(logformat.CHECKPOINT_KEY_PREFIX)
    assert cmd.decode().startswith(logformat.COMMAND_KEY_PREFIX)
    assert cp.decode().split(logformat.KEY_SEPARATOR)[logformat.CHECKPOINT_KEY_EPOCH] == "7"
    assert logformat.is_checkpoint_key(cp) and not logformat.is_checkpoint_key(cmd)
    assert logformat.is_command_key(cmd) and not logformat.is_command_key(cp)


def _ddl_names(ddl: str) -> list[str]:
    return [column.split(" ", 1)[0] for column in ddl.split(", ")]


def _written(cmd: Command) -> set[str]:
    return set(json.loads(logformat.encode(cmd)))


ACK = Ack(0, ((10, 20),), 1)
CHECKPOINT = Checkpoint(0, 10, ((11, 12),), ((12, 14, 1, 1),), ((12, 14, 1),), 1, log_offset=57)


def test_the_spark_ddl_is_the_schema_spark_has_always_read() -> None:
    assert logformat.ACKED_SPARK_DDL == (
        "v INT, type STRING, epoch BIGINT, watermark BIGINT, "
        "acked ARRAY<ARRAY<BIGINT>>, ranges ARRAY<ARRAY<BIGINT>>"
    )


def test_the_spark_ddl_names_the_fields_encode_writes_for_ack_and_checkpoint() -> None:
    """Every field of an ack and of a checkpoint but the partition (Spark has the log
    partition) and the checkpoint's log_offset and runs (Spark needs none of them)."""
    names = _ddl_names(logformat.ACKED_SPARK_DDL)
    assert len(names) == len(set(names))
    not_read = {"p", "log_offset", "lease_runs", "attempt_runs"}
    assert set(names) == (_written(ACK) | _written(CHECKPOINT)) - not_read
    assert not_read <= _written(ACK) | _written(CHECKPOINT)


@pytest.mark.parametrize("cmd", [ACK, Lease(0, ((1, 1),), 5, 1), SetDeadline(0, ((1, 1),), 5), CHECKPOINT])
def test_spark_types_cover_every_field_encode_writes(cmd: Command) -> None:
    written = json.loads(logformat.encode(cmd))
    assert _ddl_names(logformat.spark_ddl(*written)) == list(written)
    for name, value in written.items():
        kind = logformat.SPARK_TYPES[name]
        if isinstance(value, str):
            assert kind == "STRING", name
        elif isinstance(value, list):
            assert kind == "ARRAY<ARRAY<BIGINT>>", name
        else:
            assert kind in ("INT", "BIGINT"), name


checkpoints = st.builds(
    Checkpoint,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)), max_size=4).map(tuple),
    st.lists(st.tuples(*[st.integers(0, 2**53)] * 4), max_size=4).map(tuple),
    st.lists(st.tuples(*[st.integers(0, 2**53)] * 3), max_size=4).map(tuple),
    st.integers(0, 2**31),
    st.one_of(st.just(-1), st.integers(0, 2**63 - 1)),
)


@HYP
@given(checkpoints)
def test_a_checkpoint_before_its_runs_mark_holds_all_but_the_runs(cp: Checkpoint) -> None:
    """What spark/acklog.py decodes of a checkpoint: the text before the mark, closed."""
    text = logformat.encode(cp).decode()
    head = json.loads(text.split(logformat.CHECKPOINT_RUNS_MARK, 1)[0] + "}")
    whole = json.loads(text)
    assert head == {k: v for k, v in whole.items() if k not in ("lease_runs", "attempt_runs")}
    assert set(logformat.ACKED_FIELDS) - {"ranges"} <= set(head)


def test_the_first_checkpoint_format_splits_at_the_same_mark() -> None:
    old = (
        '{"v":1,"type":"checkpoint","p":0,"epoch":2,"watermark":10,"acked":[[11,12]],'
        '"leases":[[12,1,1700000000000]],"attempts":[[12,1]]}'
    )
    head = json.loads(old.split(logformat.CHECKPOINT_RUNS_MARK, 1)[0] + "}")
    assert head == {"v": 1, "type": "checkpoint", "p": 0, "epoch": 2, "watermark": 10, "acked": [[11, 12]]}
