"""kafka.settled: a request answered with a retriable error, or one that passes on its own (a
broker's handle torn down as it restarts, a group's coordinator moving where the request says so),
is sent again; any other error, or one that outlasts the timeout, reaches the caller."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from conveyor import kafka


class Answers:
    """Stands where a request would: answers with each error in turn, then with "done"."""

    def __init__(self, *errors: KafkaError) -> None:
        self.errors, self.calls = list(errors), 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))
        return "done"


# As librdkafka hands a commit's answer over: a bare code, not flagged retriable.
NOT_COORDINATOR = KafkaError(KafkaError.NOT_COORDINATOR)


def test_a_coordinator_moving_is_asked_again_where_the_request_says_it_passes() -> None:
    answers = Answers(NOT_COORDINATOR, KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
    assert kafka.settled(answers, timeout=10, interval=0.01, passing=kafka.COORDINATOR_MOVING) == "done"
    assert answers.calls == 3


def test_a_coordinator_moving_reaches_a_request_that_does_not_say_it_passes() -> None:
    answers = Answers(NOT_COORDINATOR)
    with pytest.raises(KafkaException):
        kafka.settled(answers, timeout=10, interval=0.01)
    assert answers.calls == 1


def test_a_retriable_answer_is_asked_again() -> None:
    answers = Answers(*[KafkaError(KafkaError.REQUEST_TIMED_OUT, "timed out", retriable=True)] * 2)
    assert kafka.settled(answers, timeout=10, interval=0.01) == "done"
    assert answers.calls == 3


def test_a_final_answer_reaches_the_caller_at_once() -> None:
    answers = Answers(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied"))
    with pytest.raises(KafkaException, match="denied"):
        kafka.settled(answers, timeout=10, interval=0.01, passing=kafka.COORDINATOR_MOVING)
    assert answers.calls == 1


def test_an_answer_that_passes_but_outlasts_the_timeout_reaches_the_caller() -> None:
    answers = Answers(*[NOT_COORDINATOR] * 10)
    with pytest.raises(KafkaException):
        kafka.settled(answers, timeout=0.6, interval=0.2, passing=kafka.COORDINATOR_MOVING)
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
