"""kafka.settled and commit_settled: a request answered with a retriable error, or one that
passes on its own (a broker's handle torn down as it restarts), is sent again; any other error,
or one that outlasts the timeout, reaches the caller."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from conveyor import kafka


class Answers:
    """Stands where a consumer's commit would: answers with each error in turn, then commits."""

    def __init__(self, *errors: KafkaError) -> None:
        self.errors, self.calls = list(errors), 0

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous is False and offsets
        self.calls += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))


NOT_COORDINATOR = KafkaError(KafkaError.NOT_COORDINATOR, "Broker: Not coordinator", retriable=True)
OFFSETS = [TopicPartition("t", 0, 5)]


def test_a_retriable_answer_is_committed_again() -> None:
    answers = Answers(NOT_COORDINATOR, NOT_COORDINATOR)
    kafka.commit_settled(answers, OFFSETS, timeout=10)  # type: ignore[arg-type]
    assert answers.calls == 3


def test_a_final_answer_reaches_the_caller_at_once() -> None:
    answers = Answers(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied"))
    with pytest.raises(KafkaException, match="denied"):
        kafka.commit_settled(answers, OFFSETS, timeout=10)  # type: ignore[arg-type]
    assert answers.calls == 1


def test_a_retriable_answer_that_outlasts_the_timeout_reaches_the_caller() -> None:
    answers = Answers(*[NOT_COORDINATOR] * 10)
    with pytest.raises(KafkaException, match="Not coordinator"):
        kafka.commit_settled(answers, OFFSETS, timeout=0.6)  # type: ignore[arg-type]
    assert 2 <= answers.calls < 10


def test_a_request_caught_by_a_broker_restarting_is_asked_again() -> None:
    # librdkafka does not flag these retriable: seen failing `acls apply` just after a broker restart.
    torn_down = [KafkaError(KafkaError._DESTROY_BROKER, "Local: Broker handle destroyed without termination"),
                 KafkaError(KafkaError._TRANSPORT, "Local: Broker transport failure")]
    calls = []

    def ask() -> str:
        calls.append(1)
        if torn_down:
            raise KafkaException(torn_down.pop(0))
        return "read"

    assert kafka.settled(ask, timeout=10, interval=0.01) == "read"
    assert len(calls) == 3


def test_an_error_that_is_not_a_kafka_error_reaches_the_caller() -> None:
    def ask() -> None:
        raise KafkaException("no error object")

    with pytest.raises(KafkaException, match="no error object"):
        kafka.settled(ask, timeout=10, interval=0.01)
