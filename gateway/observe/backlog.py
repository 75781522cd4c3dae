"""A partition's backlog, read off its delivery state when /metrics is scraped (pure)."""

from __future__ import annotations

import dataclasses
import itertools

from gateway.leases.state import PartitionState
from gateway.translate.records import Record

# Messages whose size is averaged to estimate the bytes of a backlog: a bounded sample, so a
# scrape costs the same whatever the backlog.
SIZE_SAMPLE = 64


@dataclasses.dataclass(frozen=True, slots=True)
class Backlog:
    messages: int  # unacknowledged messages: delivered or not
    bytes: int  # estimated (see `of`)
    oldest_ms: int | None  # publish time of the oldest unacked message, when it is in memory
    leased: int  # messages delivered and not yet acked, nacked or expired


def message_size(record: Record) -> int:
    """A message's size as Pub/Sub counts it: data, ordering key, attribute names and values."""
    n = len(record.value or b"") + len(record.key or b"")
    for name, value in record.headers or ():
        n += len(name) + len(value or b"")
    return n


def of(state: PartitionState[Record], end: int | None) -> Backlog:
    """The backlog of one owned partition. `end` is the partition's end offset as Kafka last
    told (None: unknown, then what was fetched so far is the end).

    Messages: the offsets from the watermark to the end, less those acked above the watermark
    (acked, filtered out, or gaps such as transaction markers). Bytes: that count times the mean
    size of up to SIZE_SAMPLE unacked messages held in memory (0 when none is). The oldest
    message's age needs its publish time, known once it has been fetched; the runner fetches in
    offset order, so it is known except right after the partition was assigned."""
    high = max(state.next_offset, end if end is not None else 0)
    watermark = state.watermark
    acked = 0
    for start, stop in state.acked:
        lo, hi = max(start, watermark), min(stop, high)
        if hi > lo:
            acked += hi - lo
    messages = max(0, high - watermark - acked)
    records = state.records
    size = 0
    if messages and records:
        sample = list(itertools.islice(records.values(), SIZE_SAMPLE))
        size = messages * sum(message_size(r) for r in sample) // len(sample)
    oldest = None
    if messages:
        first = state.acked.first_missing_from(watermark)
        record = records.get(first)
        if record is not None:
            oldest = record.timestamp_ms
    return Backlog(messages=messages, bytes=size, oldest_ms=oldest, leased=len(state.leases))
