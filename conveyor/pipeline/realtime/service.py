"""The real-time service: ``views run``'s query (conveyor.pipeline.realtime.job) run until
SIGTERM, for a set time, or through what the topics hold now, with its metrics.

Typed config in, a :class:`conveyor.service.Loop` out for :func:`conveyor.service.serve`, as the
lake's scheduler and the throttle. The summary a person reads at the end is the caller's ``on_end``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.config import Platform, RealtimeView
from conveyor.pipeline.realtime import job, live_query
from conveyor.pipeline.realtime.metrics import RealtimeMetrics
from conveyor.pipeline.realtime.plan import job_id
from conveyor.pipeline.realtime.store import check_mode, connect
from conveyor.service import Loop

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Told the job's metrics, when it started and ended (monotonic clock) and the records it was behind
#: the stream at its last batch.
OnEnd = Callable[[RealtimeMetrics, float, float, int], None]


@dataclass(frozen=True)
class RealtimeConfig:
    platform: Platform
    #: The job's views (plan.job_views): a job is its set of views, each set with its own checkpoint.
    views: Mapping[str, RealtimeView]
    #: Stop after this many seconds; None: only when stopped (or caught up, with ``available_now``).
    seconds: float | None = None
    #: Read what the topics hold now, then stop (micro-batch mode only).
    available_now: bool = False
    #: After each batch, write the metrics here (node_exporter's textfile format).
    metrics_file: Path | None = None


class RealtimeService(Loop):
    def __init__(self, spark: SparkSession, config: RealtimeConfig, on_end: OnEnd) -> None:
        self.metrics = RealtimeMetrics(config.metrics_file)
        super().__init__(self.metrics.registry, self._stream)
        self.config = config
        self._spark = spark
        self._on_end = on_end

    def _stream(self, stop: threading.Event) -> int:
        config = self.config
        started = time.monotonic()
        live = config.platform.pipeline.realtime.mode == "real-time"
        check_mode(connect(config.platform), job_id(config.views), list(config.views), live)
        if live:
            behind = live_query.run(self._spark, config.platform, config.views, self.metrics, stop, config.seconds)
        else:
            behind = job.run(self._spark, config.platform, config.views, self.metrics, stop, config.seconds,
                             config.available_now)
        self._on_end(self.metrics, started, time.monotonic(), behind)
        return 0
