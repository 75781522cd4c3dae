"""Exactly-once delivery: judging ack ids against the owner's current leases.

With `enable_exactly_once_delivery`, an ack id is valid only while its delivery's lease is the
current one and has not expired. Invalid ids are reported per id with the reasons the official
clients understand. The Python client treats an id that is not listed as failed whenever the
call fails, so in a call that fails for some ids, the ids that succeeded are listed as
transient failures: the client retries them alone, and the retry succeeds (an ack of an acked
message, or a repeated deadline change, is idempotent).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.errors import AckIdsFailed

INVALID = "PERMANENT_FAILURE_INVALID_ACK_ID"
NOT_OWNER = "TRANSIENT_FAILURE_PARTITION_MOVING"
UNREACHABLE = "TRANSIENT_FAILURE_OWNER_UNREACHABLE"
SUCCEEDED_IN_FAILED_CALL = "TRANSIENT_FAILURE_RETRY_ALONE"
NOT_WRITTEN = "TRANSIENT_FAILURE_LOG_UNAVAILABLE"  # the ack is not durable yet


# The reasons travel in a gRPC trailer (ErrorInfo in grpc-status-details-bin, base64 on the
# wire), and gRPC clients drop a response whose metadata passes 16 KiB.
MAX_LISTED_BYTES = 6_000


def failed(ack_ids: Sequence[str], failures: dict[str, str]) -> AckIdsFailed:
    listed = {i: failures.get(i, SUCCEEDED_IN_FAILED_CALL) for i in ack_ids}
    bad = sum(1 for r in failures.values() if not r.startswith("TRANSIENT_"))
    message = (
        f"{len(failures)} of {len(ack_ids)} ack IDs failed ({bad} invalid: their leases "
        "expired, were superseded by a redelivery, or were acknowledged)."
    )
    if _size(listed) <= MAX_LISTED_BYTES:
        return AckIdsFailed(message, listed)
    # Too many to list: the failures that fit (permanent ones first), in a call failing with a
    # status the subscribers retry for the ids not listed; each retry lists more.
    part: dict[str, str] = {}
    size = 0
    for ack_id, reason in sorted(failures.items(), key=lambda f: f[1].startswith("TRANSIENT_")):
        size += _entry_size(ack_id, reason)
        if size > MAX_LISTED_BYTES:
            break
        part[ack_id] = reason
    return AckIdsFailed(message + f" Listed: {len(part)}; retry the others.", part, retry_rest=True)


def _entry_size(ack_id: str, reason: str) -> int:
    return len(ack_id) + len(reason) + 8  # a map entry's tags and lengths


def _size(listed: dict[str, str]) -> int:
    return sum(_entry_size(i, r) for i, r in listed.items())
