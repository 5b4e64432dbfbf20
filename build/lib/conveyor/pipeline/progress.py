"""Progress of the Spark work under way, for the CLI's progress display.

Spark's own console bar is off (it would draw over ours); instead a thread polls the driver's status
tracker and reports the completed and total tasks of the active stages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkTasks:
    """Calls ``report(completed, total)`` while Spark stages run; a context manager."""

    def __init__(self, spark: SparkSession, report: Callable[[int, int], None], interval: float = 0.5) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._report = report
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="spark-progress", daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            stages = [self._tracker.getStageInfo(s) for s in self._tracker.getActiveStageIds()]
            stages = [s for s in stages if s is not None]
            if stages:
                self._report(sum(s.numCompletedTasks for s in stages), sum(s.numTasks for s in stages))

    def __enter__(self) -> SparkTasks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
