"""The lake scheduler without Spark: when it runs again, which failures it outlives, its exit status."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from conveyor.kafka import KafkaOperationError
from conveyor.pipeline.errors import LakeConfigError, LakeConflictError, RunFailedError
from conveyor.pipeline.lake_service import LakeScheduler
from conveyor.pipeline.metrics import LakeMetrics
from conveyor.pipeline.schedule import EXIT_DATA_LOST, RETRYABLE, Schedule, exit_status


@pytest.mark.parametrize(("started", "now", "wait"), [
    (100.0, 100.0, 30.0),  # a run that took no time: a whole interval
    (100.0, 112.5, 17.5),
    (100.0, 130.0, 0.0),  # exactly one interval
    (100.0, 175.0, 0.0),  # overran: the next run starts at once, no slot is skipped
])
def test_the_next_run_starts_one_interval_after_the_previous_one_started(started, now, wait):
    assert Schedule(30.0).wait(started, now) == wait


def test_data_lost_is_exit_3_and_nothing_lost_exit_0():
    assert (exit_status(True), exit_status(False)) == (EXIT_DATA_LOST, 0) == (3, 0)


@pytest.mark.parametrize(("error", "retried"), [
    (RunFailedError("spark lost an executor"), True),
    (LakeConflictError("another run committed first"), True),
    (KafkaOperationError("listing offsets", KafkaError(KafkaError._TRANSPORT)), True),
    (LakeConfigError("no contract for topic t"), False),
    (ValueError("a bug"), False),
])
def test_only_spark_and_kafka_failures_are_left_to_the_next_run(error, retried):
    assert isinstance(error, RETRYABLE) is retried


class FakeJob:
    """Runs that return or raise what they are given, in turn; the scheduler is stopped after the last."""

    def __init__(self, outcomes: list[int | Exception]) -> None:
        self.metrics = LakeMetrics(timedelta(minutes=10))
        self.scheduler: LakeScheduler | None = None
        self._outcomes: Iterator[int | Exception] = iter(outcomes)
        self._left = len(outcomes)
        self.runs = 0

    def land(self) -> SimpleNamespace:
        self.runs += 1
        self._left -= 1
        if self._left == 0:
            assert self.scheduler is not None
            self.scheduler.stop()
        outcome = next(self._outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return SimpleNamespace(lost=outcome)


def scheduled(outcomes: list[int | Exception], every: float = 0.0) -> tuple[FakeJob, LakeScheduler, list[Exception]]:
    job, told = FakeJob(outcomes), []
    job.scheduler = LakeScheduler(job, Schedule(every), told.append)  # type: ignore[arg-type]
    return job, job.scheduler, told


def test_a_failed_run_is_counted_and_told_and_the_scheduler_runs_again():
    failure = RunFailedError("spark lost an executor")
    job, scheduler, told = scheduled([0, failure, 0])
    assert scheduler.run() == 0
    assert job.runs == 3 and told == [failure]
    assert job.metrics.registry.get_sample_value("conveyor_lake_runs_total", {"result": "failed"}) == 1


def test_data_lost_in_any_run_makes_the_scheduler_exit_3():
    _, scheduler, _ = scheduled([0, 15, 0])
    assert scheduler.run() == EXIT_DATA_LOST


def test_a_failure_the_next_run_would_meet_again_ends_the_scheduler():
    job, scheduler, told = scheduled([0, LakeConfigError("no contract for topic t"), 0])
    with pytest.raises(LakeConfigError):
        scheduler.run()
    assert job.runs == 2 and told == []


def test_a_scheduler_stopped_during_a_run_finishes_it_and_returns_without_waiting_for_the_next():
    job, scheduler, _ = scheduled([0], every=3600.0)
    started = time.monotonic()
    assert scheduler.run() == 0 and job.runs == 1
    assert time.monotonic() - started < 60
