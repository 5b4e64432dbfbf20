"""``conveyor views run``: one Structured Streaming query from the central cluster into the
views in Redis.

The query reads the views' topics with Spark's official Kafka connector (read committed, its own
checkpoint folder per job) and hands each micro-batch to :class:`BatchWriter` (foreachBatch). The
writer aggregates the batch itself, statelessly: no Spark state store, so nothing waits for a window
to close. Exactly-once comes from the batch id: Spark fixes a batch's offsets in its offset log
before the batch runs and replays the same offsets with the same id after a crash; the watermarks
come from the job's state in Redis as it was before the batch, so the replay decides lateness the
same way; every Redis write is skipped where that batch id has already written; and an event id
claimed by one record in the de-dup window is counted at that record only, in any attempt.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

from conveyor.config import Part, Platform, RealtimeView
from conveyor.gctune import tune_for_throughput
from conveyor.pipeline.errors import PipelineError, RunFailedError, spark_failures
from conveyor.pipeline.kafka_source import CONTRACT_HEADER_SQL, java_client_options, source_cluster
from conveyor.pipeline.object_store import hadoop_uri
from conveyor.pipeline.realtime.contracts import ViewContracts
from conveyor.pipeline.realtime.deltas import CONTRACT, OUTPUT_DDL, latencies, merge, project
from conveyor.pipeline.realtime.metrics import BatchReport, RealtimeMetrics, seconds_text
from conveyor.pipeline.realtime.plan import ViewPlan, job_id
from conveyor.pipeline.realtime.rejects import RejectsOutput
from conveyor.pipeline.realtime.failover import WritesInDoubtError, await_replicas, replicated_masters
from conveyor.pipeline.realtime.store import (CheckpointBehindError, EventClaims, RedisBehindError, ViewStore,
                                              claims_prefix, clear_job, connect, redis_target)
from conveyor.positions import PositionFeed, group_name, spark_client_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("conveyor.realtime")
#: Times a batch is written before writes in doubt stop the job (a Redis Cluster failover takes one).
WRITE_ATTEMPTS = 5
_KAFKA_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")


def checkpoint_location(platform: Platform, views: Mapping[str, RealtimeView]) -> str:
    """The job's checkpoint: under pipeline.realtime.checkpoint, a URI of any Hadoop file system
    (file:///, hdfs://, s3:// or s3a://: Spark writes it through Hadoop), else a folder under runtime.home."""
    checkpoint = hadoop_uri(platform.pipeline.realtime.checkpoint)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", checkpoint):
        return f"{checkpoint.rstrip('/')}/{job_id(views)}"
    return str(platform.home / checkpoint / job_id(views))


def event_claims(platform: Platform, views: Mapping[str, RealtimeView]) -> EventClaims | None:
    """The job's de-duplication claims in Redis; None with ``dedup_window: 0s``."""
    window = platform.pipeline.realtime.dedup_window
    return EventClaims(redis_target(platform), claims_prefix(job_id(views)), math.ceil(window)) if window > 0 else None


class BatchWriter:
    """foreachBatch: aggregate the micro-batch to deltas, write them and the rejects, commit."""

    def __init__(self, platform: Platform, views: Mapping[str, RealtimeView], metrics: RealtimeMetrics) -> None:
        settings = platform.pipeline.realtime
        self.contracts = ViewContracts(platform, views)
        self.views = self.contracts.plan.views
        self.ttls = {v.name: v.ttl_seconds for v in self.views}
        self.store = ViewStore(connect(platform), job_id(views))
        self.claims = event_claims(platform, views)
        self.rejects = RejectsOutput(platform, source_cluster(platform), settings.rejects_topic)
        self.metrics = metrics
        #: Redis and the checkpoint disagree: what failed the batch, raised by :func:`run` as it is
        #: (Spark's wrapping of it would say "restart it", and every restart fails the same way).
        self.failure: PipelineError | None = None
        tune_for_throughput()  # the driver merges every batch's partial sums in Python

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        try:
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                masters = replicated_masters(self.store.client)
                self._write(frame, batch_id)
                try:
                    await_replicas(self.store.client, masters, f"{self.store.key}:replicated:")
                    return
                except WritesInDoubtError as err:
                    if attempt == WRITE_ATTEMPTS:
                        raise
                    self.metrics.observe_writes_in_doubt()
                    log.warning("batch %d: %s; writing it again", batch_id, err)
        except (RedisBehindError, CheckpointBehindError) as err:
            self.failure = err
            raise

    def _write(self, frame: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        stages = _Stopwatch()
        try:
            newest = self.store.state().newest_before(batch_id, [v.name for v in self.views])
        except RedisBehindError:
            self.metrics.observe_redis_lost()
            raise
        plan = self.contracts.caught_up().after(newest)
        stages.lap("state")
        partials = frame.mapInArrow(partial(project, plan=plan, claims=self.claims), OUTPUT_DDL).toArrow()
        stages.lap("spark")
        result = merge(partials)
        stages.lap("merge")
        self.rejects.send(batch_id, result.rejects)
        stages.lap("rejects")
        applied = self.store.apply(
            batch_id, {key: (self.ttls[view], fields) for key, (view, fields) in result.deltas.items()})
        written_ms = time.time_ns() // 1_000_000
        counters = {"records": result.records, "applied": result.applied, **result.reject_counts()}
        if result.duplicates:  # absent rather than 0: the state lists only what happened
            counters["duplicates"] = result.duplicates
        # The watermarks follow event time but never pass the clock: an event from the future (within
        # future_tolerance) is counted, and does not make the on-time events after it late. Only a
        # first commit stores it, so a replay still reads the watermark its first attempt used.
        horizon = None if result.max_ms is None else min(result.max_ms, written_ms)
        first = self.store.commit(batch_id, horizon, counters)
        stages.lap("redis")
        saturated = dict(Counter(result.deltas[key][0] for key in applied.saturated))
        report = BatchReport(batch_id, result.records, result.applied, applied.written, len(result.deltas),
                             result.reject_counts(), time.monotonic() - started,
                             latencies(result.times, written_ms), first, result.duplicates, saturated, stages.laps)
        self.metrics.observe(report)
        latency = report.latency()
        log.info("batch %d%s: %d records, %d events applied to %d keys (%d written), %d duplicates, rejected %s, "
                 "%.2fs (%s), latency p50 %s p99 %s", batch_id, "" if first else " (replay)", report.records,
                 report.applied, report.keys, applied.written, report.duplicates, report.rejects or "none",
                 report.seconds, " ".join(f"{k} {v:.2f}" for k, v in report.stages.items()),
                 seconds_text(latency.get(0.5)), seconds_text(latency.get(0.99)))
        if saturated:
            log.warning("batch %d: counters at a 64-bit bound (saturated) in %s", batch_id, saturated)


class _Stopwatch:
    """Seconds since the previous lap, by stage name."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, stage: str) -> None:
        now = time.monotonic()
        self.laps[stage] = round(now - self._last, 4)
        self._last = now


def kafka_stream(spark: SparkSession, platform: Platform, views: Mapping[str, RealtimeView], starting_offsets: str,
                 **options: str) -> DataFrame:
    """The views' topics as a stream of Kafka rows (topic, partition, offset, timestamp, key, value,
    and each record's contract header), read committed; ``options``: more of the connector's."""
    from pyspark.sql.functions import expr

    reader = (
        spark.readStream.format("kafka")
        .options(**java_client_options(platform, source_cluster(platform)))
        .option("subscribe", ",".join(sorted({v.topic for v in views.values()})))
        .option("startingOffsets", starting_offsets)
        .option("kafka.isolation.level", "read_committed")
        # One client id for every consumer of the query, so the throttle can quota it (conveyor.positions).
        .option("kafka.client.id", spark_client_id("realtime", job_id(views)))
        # Retention deleting unread records fails the query loudly rather than skipping them.
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
        .options(**options)
    )
    return reader.load().select(*_KAFKA_COLUMNS, expr(CONTRACT_HEADER_SQL).alias(CONTRACT))


def start(spark: SparkSession, platform: Platform, views: Mapping[str, RealtimeView], writer: BatchWriter,
          available_now: bool = False) -> StreamingQuery:
    """Start the job's query: every ``trigger`` seconds, or with ``available_now`` through what the
    topics hold now and then stop."""
    settings = platform.pipeline.realtime
    stream = kafka_stream(spark, platform, views, settings.starting_offsets,
                          maxOffsetsPerTrigger=str(settings.max_records_per_batch))
    trigger = {"availableNow": True} if available_now else {"processingTime": f"{round(settings.trigger * 1000)} milliseconds"}
    return (stream.writeStream.queryName(f"realtime-{job_id(views)}").foreachBatch(writer)
            .option("checkpointLocation", checkpoint_location(platform, views)).trigger(**trigger).start())


def batch_positions(progress: object) -> dict[tuple[str, int], int]:
    """The next offset per partition after the batch a query progress reports: the Kafka source's
    ``endOffset`` (``{"topic": {"0": 42}}``) from the progress's JSON, since PySpark's
    ``SourceProgress.endOffset`` is the Python text of a dict; empty without a progress."""
    return _source_offsets(progress, "endOffset")


def records_behind(progress: object) -> int:
    """Records the partitions held at the batch's start beyond what the batch read: more than none
    only while ``max_records_per_batch`` holds the job back, that is while it catches up."""
    ends, latest = _source_offsets(progress, "endOffset"), _source_offsets(progress, "latestOffset")
    return sum(max(0, offset - ends.get(partition, offset)) for partition, offset in latest.items())


def _source_offsets(progress: object, field: str) -> dict[tuple[str, int], int]:
    if progress is None:
        return {}
    positions: dict[tuple[str, int], int] = {}
    for source in json.loads(progress.json).get("sources", ()):
        offsets = source.get(field)
        offsets = json.loads(offsets) if isinstance(offsets, str) else offsets
        for topic, partitions in (offsets or {}).items():
            positions.update({(topic, int(p)): int(o) for p, o in partitions.items()})
    return positions


def run(spark: SparkSession, platform: Platform, views: Mapping[str, RealtimeView], metrics: RealtimeMetrics,
        stop: threading.Event, seconds: float | None = None, available_now: bool = False) -> int:
    """Run the query until ``stop`` is set, ``seconds`` have passed, or (``available_now``) it has
    read everything; a failure inside Spark becomes a RunFailedError (the checkpoint replays it).
    Returns the records the job was behind at its last batch (:func:`records_behind`)."""
    platform = platform.acting_as(Part.realtime)
    writer = BatchWriter(platform, views, metrics)
    try:
        with spark_failures(f"real-time job {job_id(views)} (restart it: the checkpoint replays the failed batch)"):
            return _stream(spark, platform, views, writer, metrics, stop, seconds, available_now)
    except RunFailedError:
        if writer.failure is not None:  # the job's own finding, which a restart would only meet again
            raise writer.failure from None
        raise


def _stream(spark: SparkSession, platform: Platform, views: Mapping[str, RealtimeView], writer: BatchWriter,
            metrics: RealtimeMetrics, stop: threading.Event, seconds: float | None, available_now: bool) -> int:
    # The checkpoint is the position; the monitoring group shows it to ops after every batch.
    feed = PositionFeed(platform, source_cluster(platform), group_name("realtime", job_id(views)),
                        "spark checkpoint", registry=metrics.registry,
                        client_ids=[spark_client_id("realtime", job_id(views))])
    query = start(spark, platform, views, writer, available_now)
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while query.isActive and not stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            query.awaitTermination(0.5)
            progress = query.lastProgress
            if progress is not None:
                metrics.observe_trigger(progress.batchId, progress.durationMs)
            feed.publish(batch_positions(progress))
    finally:
        # A stop (SIGTERM, --for) may land inside a batch: Spark interrupts it, the checkpoint replays
        # it at the next start, and py4j's logger would print the interrupted callback's traceback.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        query.stop()
        writer.rejects.close()
        writer.contracts.close()
        last = batch_positions(query.lastProgress)
        if last:
            feed.publish_and_wait(last)
        feed.close()
    failure = query.exception()
    if failure is not None:
        raise failure
    return records_behind(query.lastProgress)


def rebuild(spark: SparkSession, platform: Platform, views: Mapping[str, RealtimeView]) -> None:
    """Start a job over: delete its checkpoint and its views, state and claims in Redis, so that its
    next run (from ``earliest``) counts the topics again from what Kafka still holds."""
    location = checkpoint_location(platform, views)
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(location)
    path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(path, True)
    deleted = clear_job(connect(platform), job_id(views), [ViewPlan.of(n, v) for n, v in views.items()])
    log.info("rebuilding %s: deleted checkpoint %s and %d Redis keys", job_id(views), location, deleted)
