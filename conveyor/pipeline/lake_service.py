"""The lake service: ``lake run`` as one run, or as a scheduler running again every interval
until SIGTERM, each run observed in the lake's metrics (conveyor.pipeline.metrics).

Typed config in, a :class:`conveyor.service.Loop` out for :func:`conveyor.service.serve`, as the
real-time service and the throttle. What the runs look like to a person (progress, summaries,
failures) is the caller's, through the callbacks it passes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.config import Platform
from conveyor.pipeline.lake import RunSummary, StepCallback, run_once
from conveyor.pipeline.metrics import LakeMetrics
from conveyor.pipeline.schedule import RETRYABLE, Schedule, exit_status
from conveyor.service import Loop

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Opens the progress display of one run; what it yields is told each topic's step.
Progress = Callable[[], AbstractContextManager[StepCallback]]


@dataclass(frozen=True)
class LakeConfig:
    platform: Platform
    #: Only these topics; None: pipeline.lake.topics.
    topics: list[str] | None = None
    #: After each run, write the metrics here (node_exporter's textfile format).
    metrics_file: Path | None = None


class LakeJob:
    """Runs of the lake on one Spark session, each counted in the job's metrics."""

    def __init__(self, spark: SparkSession, config: LakeConfig, progress: Progress,
                 on_summary: Callable[[RunSummary], None]) -> None:
        self.config = config
        self.metrics = LakeMetrics(timedelta(seconds=config.platform.pipeline.lake.allowed_lateness))
        self._spark = spark
        self._progress = progress
        self._on_summary = on_summary

    def land(self) -> RunSummary:
        with self._progress() as step:
            summary = run_once(self._spark, self.config.platform, self.config.topics, step)
        self._on_summary(summary)
        self.metrics.observe(summary)
        if self.config.metrics_file is not None:
            self.metrics.write(self.config.metrics_file)
        return summary

    def once(self) -> int:
        """One run; its exit status. Not a service: Ctrl-C interrupts it as it does any command, and
        its failure is the command's."""
        return exit_status(bool(self.land().lost))


class LakeScheduler(Loop):
    """A run of ``job`` every ``schedule.every`` seconds until stopped. A run failing in Spark or
    Kafka is counted (``conveyor_lake_runs{result="failed"}``), told to ``on_failure``, and redone by
    the next run; any other failure ends the service. Exits 3 when any run found data lost."""

    def __init__(self, job: LakeJob, schedule: Schedule, on_failure: Callable[[Exception], None]) -> None:
        super().__init__(job.metrics.registry, self._runs)
        self.job = job
        self.schedule = schedule
        self._on_failure = on_failure

    def _runs(self, stop: threading.Event) -> int:
        lost = False
        while not stop.is_set():
            started = time.monotonic()
            try:
                lost = bool(self.job.land().lost) or lost
            except RETRYABLE as err:
                self.job.metrics.failed()
                self._on_failure(err)
            stop.wait(self.schedule.wait(started, time.monotonic()))
        return exit_status(lost)
