"""Per-id failures of an exactly-once ack fit in the trailer that carries them."""

from __future__ import annotations

from grpc import StatusCode

from gateway.core import exactly_once
from gateway.errors import Code


def _ids(n: int) -> list[str]:
    return [f"0123abcd-0-{o:x}-1" for o in range(n)]


def test_a_few_failures_list_every_id_and_the_call_is_invalid() -> None:
    ids = _ids(10)
    err = exactly_once.failed(ids, {ids[0]: exactly_once.INVALID})
    assert err.code == Code.INVALID_ARGUMENT
    assert err.failures[ids[0]] == exactly_once.INVALID
    assert all(err.failures[i] == exactly_once.SUCCEEDED_IN_FAILED_CALL for i in ids[1:])


def test_too_many_to_list_lists_what_fits_permanent_first_and_asks_for_a_retry() -> None:
    ids = _ids(2000)
    failures = dict.fromkeys(ids[:1000], exactly_once.NOT_OWNER) | dict.fromkeys(
        ids[1000:], exactly_once.INVALID
    )
    err = exactly_once.failed(ids, failures)
    assert err.code == Code.ABORTED
    assert StatusCode.ABORTED.value[0] == err.code.number
    size = sum(len(k) + len(v) + 8 for k, v in err.failures.items())
    assert 0 < size <= exactly_once.MAX_LISTED_BYTES
    assert set(err.failures.values()) == {exactly_once.INVALID}  # permanent ones come first
