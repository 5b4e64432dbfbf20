"""The real-time job's Prometheus metrics (``--metrics-port``) and its run-wide latency."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import Counter as Tally
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, write_to_textfile
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from conveyor.pipeline.realtime.deltas import quantiles

QUANTILES = (0.5, 0.99)
#: A batch whose applied events were all written within this many seconds of their event time has
#: caught up with the stream (bench.realtime_views ends its warm-up at the same 10 s): Spark's start
#: and the backlog it left are behind the job from there on.
CAUGHT_UP_WITHIN = 10.0
#: Upper bounds (seconds) of the latency histogram: a batch every few seconds up to a backlog's minutes.
LATENCY_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass(frozen=True)
class BatchReport:
    batch_id: int
    records: int
    applied: int
    #: Keys this attempt wrote (a replay skips those its first attempt wrote).
    keys_written: int
    keys: int
    rejects: dict[str, int]
    seconds: float
    #: Applied events per latency in ms, event time to Redis write.
    latencies: Tally[int]
    #: False when the batch had been committed before (a replay after a crash).
    first_attempt: bool
    #: Records not counted: their event_id was counted at another record within the de-dup window.
    duplicates: int = 0
    #: View -> keys written where a batch's sum or a counter reached a 64-bit bound.
    saturated: dict[str, int] = field(default_factory=dict)
    #: Seconds of the batch function per stage, where a batch's time goes: the job's state from
    #: Redis ("state"), Spark's read and the workers' projection up to Arrow on the driver ("spark"),
    #: merging the partial sums ("merge"), the side output ("rejects"), the view writes and commit ("redis").
    stages: dict[str, float] = field(default_factory=dict)

    def latency(self) -> dict[float, float]:
        return {q: ms / 1000 for q, ms in quantiles(self.latencies, QUANTILES).items()}


@dataclass(frozen=True)
class SteadyState:
    """The job's latency once it had caught up with the stream."""

    #: The first batch whose p99 was within CAUGHT_UP_WITHIN; None when none was.
    caught_up_at: int | None
    #: Events applied by the batches after it, and their latency quantiles (seconds).
    events: int = 0
    latency: dict[float, float] = field(default_factory=dict)


class LatencyHistogram(Collector):
    """``conveyor_realtime_latency_seconds``: every applied event's latency, event time to Redis write.

    A collector over tallies rather than a prometheus_client Histogram: a batch brings its latencies
    as a tally by millisecond (up to hundreds of thousands of events), added to the buckets at once
    instead of an observe() per event."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Events per bucket (not cumulative), +Inf last.
        self._counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self._sum = 0.0

    def add(self, latencies_ms: Tally[int]) -> None:
        with self._lock:
            for ms, events in latencies_ms.items():
                self._counts[bisect_left(LATENCY_BUCKETS, ms / 1000)] += events
                self._sum += ms / 1000 * events

    def describe(self) -> Iterator[Metric]:
        """Its name, without its buckets: the registry refuses another collector of the same name."""
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        with self._lock:
            cumulative, total = list(accumulate(self._counts)), self._sum
        bounds = [*(repr(b) for b in LATENCY_BUCKETS), "+Inf"]
        family.add_metric([], list(zip(bounds, map(float, cumulative))), total)
        yield family

    @staticmethod
    def _family() -> HistogramMetricFamily:
        return HistogramMetricFamily("conveyor_realtime_latency_seconds", "Event time to Redis write, per applied event.")


class RealtimeMetrics:
    def __init__(self, file: Path | None = None) -> None:
        """``file``: after each batch, write the metrics there (node_exporter's textfile format), so
        the last batch's figures outlive a bounded run (ops reads such a file as a component)."""
        self.file = file
        self.registry = registry = CollectorRegistry()
        self.batches = Counter("conveyor_realtime_batches", "Micro-batches written, by attempt (first, replay).",
                               ["attempt"], registry=registry)
        self.records = Counter("conveyor_realtime_records", "Kafka records read.", registry=registry)
        self.applied = Counter("conveyor_realtime_events_applied", "Events added to at least one view.",
                               registry=registry)
        self.rejected = Counter("conveyor_realtime_events_rejected",
                                "Events sent to the side output: malformed, future, late or incomplete (per view).",
                                ["kind", "view"], registry=registry)
        self.keys = Counter("conveyor_realtime_keys_written", "Redis view keys written.", registry=registry)
        self.duplicates = Counter("conveyor_realtime_duplicates_dropped",
                                  "Records not counted: their event_id was counted within the de-dup window.",
                                  registry=registry)
        self.saturated = Counter("conveyor_realtime_counters_saturated",
                                 "View keys written where a batch's sum or a counter reached a 64-bit bound "
                                 "(saturated).",
                                 ["view"], registry=registry)
        self.redis_lost = Counter("conveyor_realtime_redis_lost",
                                  "Batches that found Redis behind the checkpoint (it lost the views' data) and "
                                  "stopped the job.", registry=registry)
        self.in_doubt = Counter("conveyor_realtime_writes_in_doubt",
                                "Batches written again because a Redis Cluster master could not show that a "
                                "replica held their writes (a failover).", registry=registry)
        self.latency = LatencyHistogram()
        registry.register(self.latency)
        self.duration = Gauge("conveyor_realtime_batch_duration_seconds", "Duration of the last batch.",
                              registry=registry)
        self.size = Gauge("conveyor_realtime_batch_records", "Kafka records in the last batch.", registry=registry)
        self.stage = Gauge("conveyor_realtime_batch_stage_seconds", "Seconds of the last batch's function per stage.",
                           ["stage"], registry=registry)
        self.trigger = Gauge("conveyor_realtime_trigger_stage_seconds",
                             "Spark's own durations of the last trigger (query progress durationMs), by stage.",
                             ["stage"], registry=registry)
        #: Spark's durations (ms) of the latest triggers, by batch id, for a bench's breakdown.
        self.triggers: dict[int, dict[str, int]] = {}
        self.run_latencies: Tally[int] = Tally()
        #: The latest batches, for the summary of a bounded run.
        self.reports: deque[BatchReport] = deque(maxlen=1000)

    def observe(self, report: BatchReport) -> None:
        self.batches.labels("first" if report.first_attempt else "replay").inc()
        self.records.inc(report.records)
        self.applied.inc(report.applied)
        self.keys.inc(report.keys_written)
        self.duplicates.inc(report.duplicates)
        for view, keys in report.saturated.items():
            self.saturated.labels(view).inc(keys)
        for name, count in report.rejects.items():
            kind, _, view = name.partition(":")
            self.rejected.labels(kind, view).inc(count)
        self.latency.add(report.latencies)
        self.duration.set(report.seconds)
        for stage, seconds in report.stages.items():
            self.stage.labels(stage).set(seconds)
        self.size.set(report.records)
        self.run_latencies.update(report.latencies)
        self.reports.append(report)
        self._write()

    def observe_redis_lost(self) -> None:
        self.redis_lost.inc()
        self._write()

    def observe_writes_in_doubt(self) -> None:
        self.in_doubt.inc()
        self._write()

    def _write(self) -> None:
        if self.file is not None:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            write_to_textfile(str(self.file), self.registry)

    def observe_trigger(self, batch_id: int, durations_ms: dict[str, int]) -> None:
        """Spark's durations of one trigger (addBatch holds the batch function; the rest is Spark's
        planning, offset and commit logs). Kept for the latest 1,000 batches; a trigger seen before
        (the job polls the last progress more often than batches end) is not taken again."""
        if batch_id in self.triggers:
            return
        for stage, ms in durations_ms.items():
            self.trigger.labels(stage).set(ms / 1000)
        self.triggers[batch_id] = dict(durations_ms)
        while len(self.triggers) > 1000:
            del self.triggers[min(self.triggers)]

    def run_latency(self) -> dict[float, float]:
        """Quantiles over every event applied since the job started."""
        return {q: ms / 1000 for q, ms in quantiles(self.run_latencies, QUANTILES).items()}

    def steady_state(self) -> SteadyState:
        """The batches after the first one that caught up with the stream: what a user of the views
        sees once the job runs as it will, its cold start (tens of seconds on two cores) and the
        backlog that piled up meanwhile left out, however long those took."""
        reports = list(self.reports)
        first = next((i for i, r in enumerate(reports)
                      if r.applied and r.latency()[0.99] <= CAUGHT_UP_WITHIN), None)
        if first is None:
            return SteadyState(None)
        tally: Tally[int] = Tally()
        for report in reports[first + 1:]:
            tally.update(report.latencies)
        return SteadyState(reports[first].batch_id, sum(tally.values()),
                           {q: ms / 1000 for q, ms in quantiles(tally, QUANTILES).items()})


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"
