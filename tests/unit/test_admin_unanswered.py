"""Which failed admin calls count as unanswered, the ones after which the consumer-group admin
client is replaced (gateway/kafka/admin.py, librdkafka#4605)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from gateway.errors import Unavailable
from gateway.kafka.admin import _unanswered


def _failed(cause: BaseException) -> Unavailable:
    try:
        raise Unavailable("describing consumer group g") from cause
    except Unavailable as exc:
        return exc


def test_no_answer_in_time_or_a_lost_connection_is_unanswered() -> None:
    assert _unanswered(_failed(TimeoutError()))
    assert _unanswered(_failed(KafkaException(KafkaError(KafkaError._TIMED_OUT))))
    assert _unanswered(_failed(KafkaException(KafkaError(KafkaError._TRANSPORT))))


def test_an_answer_that_says_no_is_not() -> None:
    assert not _unanswered(_failed(KafkaException(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE))))
    assert not _unanswered(_failed(KafkaException(KafkaError(KafkaError.GROUP_ID_NOT_FOUND))))
    assert not _unanswered(Unavailable("no cause"))
