"""``conveyor views run`` in Spark's real-time mode (``pipeline.realtime.mode: real-time``):
the query, where a new one starts, and the driver's reports.

The tasks write the views themselves (:mod:`conveyor.pipeline.realtime.live`), so the driver learns
what happened from Redis: every few seconds it reads the partitions' positions and counters and the
tasks' latencies, reports them as one interval (log line, metrics, the run's summary) and publishes
the positions to the monitoring group.

Taken from Spark 4.1.1 as it is: PySpark's ``trigger()`` has no ``realTime`` argument (the JVM's
``Trigger.RealTime`` is set instead); only the Kafka connector's V2 source runs in the mode (the
micro-batch job turns it off for SPARK-55271, see conveyor.pipeline.spark); and the mode's
allowlist names no Python operator, so its check is off.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

from conveyor.config import Part, Platform, RealtimeView
from conveyor.pipeline.errors import PipelineError, RunFailedError, spark_failures
from conveyor.pipeline.kafka_source import list_watermarks, source_cluster
from conveyor.pipeline.realtime.contracts import ViewContracts
from conveyor.pipeline.realtime.deltas import BatchPlan, ContractBehindError
from conveyor.pipeline.realtime.job import checkpoint_location, event_claims, kafka_stream
from conveyor.pipeline.realtime.live import LiveWork, Position, diagnostics_key, live_state, position_key, write_live
from conveyor.pipeline.realtime.metrics import BatchReport, RealtimeMetrics, seconds_text
from conveyor.pipeline.realtime.plan import job_id
from conveyor.pipeline.realtime.rejects import RejectsOutput
from conveyor.pipeline.realtime.store import Client, RedisBehindError, ViewStore, connect, mode_key, rebuild_command, \
    redis_target
from conveyor.positions import PositionFeed, group_name, spark_client_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("conveyor.realtime")

#: Seconds between the driver's reports.
REPORT_EVERY = 2.0


def start_offsets(platform: Platform, views: Mapping[str, RealtimeView], client: Client) -> dict[str, dict[str, int]]:
    """Where a query without a checkpoint starts, per partition: past the partition's ``done`` in
    Redis (the checkpoint was lost, the views were not), else at the earliest offset, or at the
    latest, which is recorded in Redis first: a new job killed in its first real-time batch (whose
    offsets Spark has not logged yet) must not start again at a later tail."""
    job = job_id(views)
    store = ViewStore(client, job)
    offsets: dict[str, dict[str, int]] = {}
    for topic in sorted({v.topic for v in views.values()}):
        _, marks = list_watermarks(platform, topic)
        offsets[topic] = {}
        for partition, mark in marks.items():
            where = position_key(job, topic, partition)
            if platform.pipeline.realtime.starting_offsets == "latest" and not client.exists(where):
                store.commit_to(where, "done", mark.high - 1, None, {})
            done = Position.of(client.hgetall(where)).done
            offsets[topic][str(partition)] = done + 1 if done >= 0 else mark.low
    return offsets


def start(spark: SparkSession, platform: Platform, views: Mapping[str, RealtimeView], work: LiveWork,
          offsets: Mapping[str, Mapping[str, int]]) -> StreamingQuery:
    """The real-time query; ``offsets``: where it starts without a checkpoint (:func:`start_offsets`)."""
    settings = platform.pipeline.realtime
    spark.conf.set("spark.sql.streaming.disabledV2MicroBatchReaders", "")
    spark.conf.set("spark.sql.streaming.realTimeMode.allowlistCheck", "false")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(settings.real_time_rows))
    rows = kafka_stream(spark, platform, views, json.dumps(offsets))
    stream = (rows.mapInArrow(partial(write_live, work=work), "records bigint").writeStream.format("noop")
              .outputMode("update").queryName(f"realtime-{job_id(views)}")
              .option("checkpointLocation", checkpoint_location(platform, views)))
    trigger = spark._jvm.org.apache.spark.sql.streaming.Trigger.RealTime(
        f"{round(settings.real_time_batch * 1000)} milliseconds")
    stream._jwrite = stream._jwrite.trigger(trigger)
    return stream.start()


def live_work(platform: Platform, views: Mapping[str, RealtimeView], plan: BatchPlan) -> LiveWork:
    """What the job's tasks need (the side output's topic is created here, once)."""
    return LiveWork(plan, event_claims(platform, views), redis_target(platform), job_id(views),
                    {v.name: v.ttl_seconds for v in plan.views},
                    RejectsOutput(platform, source_cluster(platform), platform.pipeline.realtime.rejects_topic))


def _contract_behind(failure: RunFailedError) -> bool:
    """Whether a task stopped on a record of a contract version newer than the query's plan."""
    cause = failure.__cause__
    texts = [str(cause)]
    java = getattr(cause, "java_exception", None)
    while java is not None and len(texts) < 10:
        texts.append(str(java.toString()))
        java = java.getCause()
    return any(ContractBehindError.__name__ in text for text in texts)


class _Reporter:
    """The job's progress since the last look, from the partitions' positions and the tasks' notes."""

    def __init__(self, client: Client, job: str, partitions: list[tuple[str, int]]) -> None:
        self.client, self.job, self.partitions = client, job, partitions
        self.counters: Counter[str] = Counter()
        self.notes: Counter[str] = Counter()
        self.taken_at = time.monotonic()
        self.intervals = 0
        self.positions: dict[tuple[str, int], int] = {}
        self.take()  # what earlier runs did is not this run's
        self.intervals = 0

    def take(self) -> tuple[BatchReport, dict[str, int]]:
        positions, counters = live_state(self.client, self.job, self.partitions)
        self.positions = {partition: position.done + 1 for partition, position in positions.items()}
        notes = Counter({k: int(v) for k, v in self.client.hgetall(diagnostics_key(self.job)).items()})
        now = time.monotonic()
        grown, noted = counters - self.counters, notes - self.notes
        self.counters, self.notes, seconds, self.taken_at = counters, notes, now - self.taken_at, now
        self.intervals += 1
        report = BatchReport(self.intervals, grown["records"], grown["applied"], noted["keys"], noted["keys"],
                             {k: v for k, v in grown.items() if k not in {"records", "applied", "duplicates"}},
                             seconds, Counter({int(k[3:]): v for k, v in noted.items() if k.startswith("ms:")}),
                             True, grown["duplicates"],
                             {k.removeprefix("saturated:"): v for k, v in noted.items() if k.startswith("saturated:")})
        return report, {k: v for k, v in noted.items() if k in {"reread", "recovered"}}


def _check_slots(spark: SparkSession, partitions: int) -> None:
    slots = spark.sparkContext.defaultParallelism
    if slots < partitions:
        raise PipelineError(
            f"real-time mode runs one task per partition, all at once: the views' topics have {partitions} "
            f"partitions and Spark has {slots} task slots; give pipeline.spark.master local[{partitions}] (or a "
            "cluster with that many cores), or set pipeline.realtime.mode: micro-batch")


def run(spark: SparkSession, platform: Platform, views: Mapping[str, RealtimeView], metrics: RealtimeMetrics,
        stop: threading.Event, seconds: float | None = None) -> int:
    """Run the real-time-mode query until ``stop`` is set or ``seconds`` have passed; 0 records
    behind (the mode has no backlog cap)."""
    platform = platform.acting_as(Part.realtime)
    job = job_id(views)
    client = connect(platform)
    location = checkpoint_location(platform, views)
    if not client.exists(mode_key(job)) and _has_logged_batches(spark, location):
        raise _redis_lost(metrics, views, f"its checkpoint {location} has logged real-time batches")
    client.set(mode_key(job), "real-time")  # the job's mode from now on (store.check_mode)
    offsets = start_offsets(platform, views, client)
    partitions = [(topic, int(p)) for topic, starts in offsets.items() for p in starts]
    _check_slots(spark, len(partitions))
    reporter = _Reporter(client, job, partitions)
    deadline = None if seconds is None else time.monotonic() + seconds
    contracts = ViewContracts(platform, views)
    try:
        while True:
            work = live_work(platform, views, contracts.caught_up(live=True))
            try:
                _stream(spark, platform, views, work, offsets, metrics, reporter, stop, deadline)
                return 0
            except RunFailedError as failure:
                if not client.exists(mode_key(job)):  # a task found its partition's position gone
                    raise _redis_lost(metrics, views, "a task found its partition's position gone") from None
                if not _contract_behind(failure):
                    raise
                log.info("real-time %s: a record of a contract version registered after the query started; "
                         "reading the registry again and starting the query over", job)
                offsets = start_offsets(platform, views, client)
    finally:
        contracts.close()


def _has_logged_batches(spark: SparkSession, location: str) -> bool:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{location}/offsets")
    files = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return bool(files.exists(path) and len(files.listStatus(path)) > 0)


def _redis_lost(metrics: RealtimeMetrics, views: Mapping[str, RealtimeView], why: str) -> RedisBehindError:
    metrics.observe_redis_lost()
    return RedisBehindError(
        f"Redis lost the views' data: {why}, but Redis holds none of the job's real-time state (a FLUSHALL, a "
        f"failover to a lagging replica?); counts are gone from the views. Rebuild them from Kafka: "
        f"{rebuild_command(list(views))}")


def _stream(spark: SparkSession, platform: Platform, views: Mapping[str, RealtimeView], work: LiveWork,
            offsets: Mapping[str, Mapping[str, int]], metrics: RealtimeMetrics, reporter: _Reporter,
            stop: threading.Event, deadline: float | None) -> None:
    job = job_id(views)
    feed = PositionFeed(platform, source_cluster(platform), group_name("realtime", job), "spark checkpoint",
                        registry=metrics.registry, client_ids=[spark_client_id("realtime", job)])
    with spark_failures(f"real-time job {job} (restart it: the views skip what they hold)"):
        query = start(spark, platform, views, work, offsets)
        try:
            while query.isActive and not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                query.awaitTermination(REPORT_EVERY)
                _report(reporter, metrics)
                feed.publish(reporter.positions)
        finally:
            query.stop()
            work.rejects.close()
            _report(reporter, metrics)
            feed.publish_and_wait(reporter.positions)
            feed.close()
        failure = query.exception()
        if failure is not None:
            raise failure


def _report(reporter: _Reporter, metrics: RealtimeMetrics) -> None:
    report, notes = reporter.take()
    if not report.records and not any(notes.values()):
        return
    metrics.observe(report)
    latency = report.latency()
    log.info("real-time %d: %d records, %d events applied, %d keys written, %d duplicates, rejected %s in %.1fs, "
             "latency p50 %s p99 %s%s", report.batch_id, report.records, report.applied, report.keys_written,
             report.duplicates, report.rejects or "none", report.seconds, seconds_text(latency.get(0.5)),
             seconds_text(latency.get(0.99)),
             "; after a restart: " + ", ".join(f"{n} {k}" for k, n in notes.items()) if any(notes.values()) else "")
    if report.saturated:
        log.warning("real-time %d: counters at a 64-bit bound (saturated) in %s", report.batch_id, report.saturated)
