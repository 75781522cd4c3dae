"""Milliseconds of protobuf Durations and Timestamps (gateway.clock)."""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from gateway.clock import to_ms


def test_to_ms_rounds_down_to_a_millisecond() -> None:
    assert to_ms(Duration(seconds=600)) == 600_000
    assert to_ms(Duration(seconds=1, nanos=999_999)) == 1000
    assert to_ms(Timestamp(seconds=1, nanos=5_000_000)) == 1005


def test_to_ms_is_exact_where_float_seconds_are_not() -> None:
    # (1060798 + 0.001) * 1000 in floating point is 1060798000.9999999: truncated, a millisecond short
    assert to_ms(Duration(seconds=1_060_798, nanos=1_000_000)) == 1_060_798_001


def test_to_ms_of_a_negative_duration() -> None:
    assert to_ms(Duration(seconds=-1, nanos=-500_000_000)) == -1500
