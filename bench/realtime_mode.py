"""The ``rtm`` path of bench.realtime_views: Spark 4.1's real-time mode running the views' own
parsing, contract check, de-duplication and aggregation, to measure what the mode gives before the
job is built on it.

Real-time mode runs one long batch (``batch_seconds``) whose tasks, one per Kafka partition, stay
up and process records as they arrive. Here each task runs :func:`conveyor.pipeline.realtime.deltas.project`
over Arrow batches of ``rows`` records (``mapInArrow``, fed as soon as that many records arrived)
and adds each batch's partial sums to Redis at once with HINCRBY. That is **not exactly once**:
the adds carry no fence, and a replayed real-time batch need not read the same records (its end is
decided by time, not fixed in the offset log before it runs, as a micro-batch's is). How the job
would fence its writes in this mode: docs/realtime.md, "Spark's real-time mode".

Two settings the job does not use are needed: Spark's V2 Kafka source (the only one with real-time
support; the job keeps V1 for SPARK-55271, see conveyor.pipeline.spark) and
``realTimeMode.allowlistCheck`` off (Spark 4.1.1's allowlist names no Python operator).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from functools import partial

import pyarrow as pa
import redis

from conveyor.config import Part, Platform, RealtimeView
from conveyor.pipeline.kafka_source import java_client_options, source_cluster
from conveyor.pipeline.realtime.deltas import BatchPlan, latencies, merge, project
from conveyor.pipeline.realtime.job import event_claims, topic_plans
from conveyor.pipeline.realtime.plan import ViewPlan
from conveyor.pipeline.realtime.store import EventClaims, redis_target

#: Redis hashes the tasks report to: applied-event counts per latency in ms, and records read.
LATENCY_KEY, COUNTS_KEY = "bench:rtm:latency", "bench:rtm:counts"


def _apply_live(batches: Iterator[pa.RecordBatch], plan: BatchPlan, claims: EventClaims | None,
                url: str) -> Iterator[pa.RecordBatch]:
    """mapInArrow: each Arrow batch's partial sums added to the views as soon as it is aggregated."""
    client = redis.Redis.from_url(url)
    for batch in batches:
        result = merge(pa.Table.from_batches(list(project(iter([batch]), plan, claims))))
        pipe = client.pipeline(transaction=False)
        for key, (_, fields) in result.deltas.items():
            for name, value in fields.items():
                pipe.hincrby(key, name, value)
        pipe.execute()
        written_ms = time.time_ns() // 1_000_000
        pipe = client.pipeline(transaction=False)
        for latency_ms, count in latencies(result.times, written_ms).items():
            pipe.hincrby(LATENCY_KEY, str(latency_ms), count)
        pipe.hincrby(COUNTS_KEY, "records", result.records)
        pipe.execute()
        yield pa.RecordBatch.from_pydict({"records": [result.records]})


def start(spark, platform: Platform, views: Mapping[str, RealtimeView], checkpoint: str, rows: int,  # noqa: ANN001
          batch_seconds: float):  # noqa: ANN201 (PySpark's StreamingQuery, imported lazily by the bench)
    """Start the views' real-time-mode query (from the tail of their topic) and return it."""
    platform = platform.acting_as(Part.realtime)
    spark.conf.set("spark.sql.streaming.disabledV2MicroBatchReaders", "")
    spark.conf.set("spark.sql.streaming.realTimeMode.allowlistCheck", "false")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(rows))
    # The job's own plan and de-dup claims; no watermark (the bench sends no late events).
    plans = tuple(ViewPlan.of(name, view) for name, view in views.items())
    plan = BatchPlan(topic_plans(platform, views), plans, (None,) * len(plans),
                     round(platform.pipeline.realtime.future_tolerance * 1000))
    url = redis_target(platform).urls[0]
    topics = sorted({v.topic for v in views.values()})
    frame = (spark.readStream.format("kafka").options(**java_client_options(platform, source_cluster(platform)))
             .option("subscribe", ",".join(topics)).option("startingOffsets", "latest").load()
             .select("topic", "partition", "offset", "timestamp", "key", "value"))
    live = partial(_apply_live, plan=plan, claims=event_claims(platform, views), url=url)
    stream = (frame.mapInArrow(live, "records bigint").writeStream.format("noop").outputMode("update")
              .option("checkpointLocation", checkpoint))
    # PySpark 4.1.1 has no realTime argument to trigger(); the JVM's Trigger.RealTime is the same setting.
    trigger = spark._jvm.org.apache.spark.sql.streaming.Trigger.RealTime(f"{round(batch_seconds * 1000)} milliseconds")
    stream._jwrite = stream._jwrite.trigger(trigger)
    return stream.start()
