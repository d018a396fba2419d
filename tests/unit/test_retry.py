"""The Kafka clients' retry policy (:mod:`cdclake.io.retry`) on real ``KafkaError`` values."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdclake.io.retry import on_retriable_kafka_error


def _failing(errors: list[KafkaError]):
    calls = []

    def ask() -> str:
        calls.append(1)
        if errors:
            raise KafkaException(errors.pop(0))
        return "answered"

    return ask, calls


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    ],
)
def test_a_partition_of_a_topic_just_created_is_asked_again(code):
    ask, calls = _failing([KafkaError(code), KafkaError(code)])
    assert on_retriable_kafka_error(10.0)(ask)() == "answered"
    assert len(calls) == 3


def test_an_error_librdkafka_marks_retriable_is_asked_again():
    ask, calls = _failing([KafkaError(KafkaError._TRANSPORT, retriable=True)])
    assert on_retriable_kafka_error(10.0)(ask)() == "answered"
    assert len(calls) == 2


def test_other_errors_are_raised_at_once():
    ask, calls = _failing([KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)])
    with pytest.raises(KafkaException) as e:
        on_retriable_kafka_error(10.0)(ask)()
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert len(calls) == 1


def test_a_retriable_error_that_persists_is_raised_after_the_timeout():
    ask, calls = _failing([KafkaError(KafkaError.LEADER_NOT_AVAILABLE)] * 100)
    with pytest.raises(KafkaException):
        on_retriable_kafka_error(0.5)(ask)()
    assert 1 < len(calls) < 100
