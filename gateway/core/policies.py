"""A subscription's delivery policies, derived from its resource: filter, retention, retry
backoff and dead-lettering. Runners apply them to running deliveries whenever the
subscription changes, without a restart."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.clock import to_ms
from gateway.translate import filters, limits
from gateway.translate.meta import SubscriptionMeta
from gateway.translate.records import Headers, Record

DEFAULT_MIN_BACKOFF_MS, DEFAULT_MAX_BACKOFF_MS = 10_000, 600_000
DEFAULT_RETENTION_MS = limits.DEFAULT_RETENTION * 1000


@dataclasses.dataclass(frozen=True, slots=True)
class Policies:
    filter: filters.Predicate | None = None
    retention_ms: int = DEFAULT_RETENTION_MS
    backoff: Callable[[int], int] | None = None
    max_attempts: int | None = None
    dead_letter_kafka_topic: str | None = None
    # The seed API's TruncationPolicy (SubscriptionMeta.legacy_truncate_*; 0: not set), applied
    # by the partitions' owner (runner.py, docs/truncation.md).
    truncate_max_age_ms: int = 0
    truncate_max_bytes: int = 0

    @property
    def truncates(self) -> bool:
        return bool(self.truncate_max_age_ms or self.truncate_max_bytes)


def backoff_of(minimum_ms: int, maximum_ms: int) -> Callable[[int], int]:
    """Delay before the next delivery after `deliveries` failed ones: exponential, capped."""

    def delay(deliveries: int) -> int:
        return int(min(maximum_ms, minimum_ms * 2 ** max(0, min(deliveries - 1, 30))))

    return delay


def of(
    sub: pubsub_pb2.Subscription, dead_letter_kafka_topic: str | None, meta: SubscriptionMeta | None = None
) -> Policies:
    rp = sub.retry_policy if sub.HasField("retry_policy") else None
    backoff = None
    if rp is not None:
        lo = to_ms(rp.minimum_backoff) if rp.HasField("minimum_backoff") else DEFAULT_MIN_BACKOFF_MS
        hi = to_ms(rp.maximum_backoff) if rp.HasField("maximum_backoff") else DEFAULT_MAX_BACKOFF_MS
        backoff = backoff_of(lo, hi)
    dlp = sub.dead_letter_policy if sub.HasField("dead_letter_policy") else None
    return Policies(
        # Checked against the API's limits when it was set; a legacy label query's translation
        # (docs/legacy-query.md) may be longer than v1's 256 bytes.
        filter=filters.parse(sub.filter, max_bytes=None),
        retention_ms=to_ms(sub.message_retention_duration) or DEFAULT_RETENTION_MS,
        backoff=backoff,
        max_attempts=(dlp.max_delivery_attempts or 5) if dlp is not None and dlp.dead_letter_topic else None,
        dead_letter_kafka_topic=dead_letter_kafka_topic if dlp is not None else None,
        truncate_max_age_ms=max(0, meta.legacy_truncate_max_age_seconds) * 1000 if meta is not None else 0,
        truncate_max_bytes=max(0, meta.legacy_truncate_max_bytes) if meta is not None else 0,
    )


def dead_letter_headers(record: Record, subscription: str, deliveries: int) -> Headers:
    """The message's attributes plus where it came from and how often it was delivered."""
    published = datetime.datetime.fromtimestamp(record.timestamp_ms // 1000, tz=datetime.UTC)
    published += datetime.timedelta(milliseconds=record.timestamp_ms % 1000)
    extra: Headers = [
        ("CloudPubSubDeadLetterSourceDeliveryCount", str(deliveries).encode()),
        ("CloudPubSubDeadLetterSourceSubscription", subscription.split("/")[-1].encode()),
        ("CloudPubSubDeadLetterSourceSubscriptionProject", subscription.split("/")[1].encode()),
        (
            "CloudPubSubDeadLetterSourceTopicPublishTime",
            published.isoformat(timespec="milliseconds").replace("+00:00", "Z").encode(),
        ),
    ]
    return [*(record.headers or []), *extra]
