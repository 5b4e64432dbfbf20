"""What the gateways accepted, per (topic, event hour), counted from each writable cluster's log:
the side of the audit that the lake is checked against.

A gateway answers 2xx only once its cluster has acknowledged every record of the request (acks=all),
so each accepted event is a record in the log of a writable cluster, where the gateway wrote it or
failed over to. Counting those logs gives the producers' own count without trusting a count any
process keeps: a gateway killed with SIGKILL takes nothing away from it. Records a replicator copied
into a writable cluster carry its origin header and are not counted twice.

Where retention has deleted records of a partition, the hours up to its first retained record can
no longer be counted whole: :attr:`Accepted.held_from` says from which hour on a topic's count is
whole, and the audit judges no hour before it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from conveyor import kafka
from conveyor.config import Part, Platform
from conveyor.config.clusters import ClusterRole
from conveyor.pipeline.completeness import floor_hour
from conveyor.pipeline.kafka_source import java_client_options
from conveyor.pipeline.tables import as_utc
from conveyor.replicate.plan import ORIGIN_HEADER

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: (topic, event hour)
Key = tuple[str, datetime]
_TIMEOUT = 30.0
_HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Accepted:
    counts: dict[Key, int]
    #: Per topic, the first hour whose records every writable cluster still holds; a topic absent
    #: here lost nothing to retention.
    held_from: dict[str, datetime]


def writable_clusters(platform: Platform) -> list[str]:
    return sorted(name for name, spec in platform.clusters.items() if spec.role == ClusterRole.writable)


#: (cluster, topic, partition)
Partition = tuple[str, str, int]


def _log_starts(platform: Platform, cluster: str, topics: list[str]) -> dict[Partition, int]:
    """Each partition's earliest offset, for the ``topics`` that exist on ``cluster``."""
    admin = kafka.admin(platform, cluster)
    try:
        listed = admin.list_topics(timeout=_TIMEOUT).topics
        partitions = [TopicPartition(t, p) for t in topics if t in listed and listed[t].error is None
                      for p in listed[t].partitions]
        if not partitions:
            return {}
        futures = admin.list_offsets({tp: OffsetSpec.earliest() for tp in partitions},
                                     isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=_TIMEOUT)
        return {(cluster, tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
    except KafkaException as exc:
        raise kafka.KafkaOperationError.from_exception(f"listing the offsets of {', '.join(topics)} on {cluster}",
                                                      exc) from None


def held_from(starts: dict[Partition, int], first_written: dict[Partition, datetime],
              now: datetime) -> dict[str, datetime]:
    """Per topic with records deleted, the hour after the one its latest-starting partition's first
    retained record was written in (an event's hour is its own time, which a record written before
    that may still carry). Pure."""
    found: dict[str, datetime] = {}
    for (cluster, topic, partition), start in starts.items():
        if start <= 0:
            continue
        written = first_written.get((cluster, topic, partition), now)
        bound = floor_hour(written.astimezone(timezone.utc)) + _HOUR
        found[topic] = max(found.get(topic, bound), bound)
    return found


def accepted_counts(spark: SparkSession, platform: Platform, topics: list[str]) -> Accepted:
    """Every record of ``topics`` in every writable cluster's log, counted per event hour."""
    from pyspark.sql.functions import (coalesce, col, count, date_trunc, exists, expr, get_json_object, lit,
                                       try_to_timestamp)
    from pyspark.sql.functions import min as min_

    platform = platform.acting_as(Part.lake)
    counts: dict[Key, int] = defaultdict(int)
    first_written: dict[Partition, datetime] = {}
    starts: dict[Partition, int] = {}
    for cluster in writable_clusters(platform):
        on_cluster = _log_starts(platform, cluster, topics)
        present = sorted({t for _, t, _ in on_cluster})
        if not present:
            continue
        starts.update(on_cluster)
        records = (spark.read.format("kafka").options(**java_client_options(platform, cluster))
                   .option("subscribe", ",".join(present)).option("startingOffsets", "earliest")
                   .option("endingOffsets", "latest").option("kafka.isolation.level", "read_committed")
                   .option("includeHeaders", "true").load()).cache()
        try:
            # A record without headers has none (null), not an empty list.
            copied = coalesce(exists(col("headers"), lambda h: h["key"] == lit(ORIGIN_HEADER)), lit(False))
            written = records.where(~copied)
            # A value framed with a registry id (0x00 and four bytes) holds its JSON from byte 6.
            body = expr("CASE WHEN substring(value, 1, 1) = X'00' THEN substring(value, 6) ELSE value END")
            hour = date_trunc("hour", try_to_timestamp(get_json_object(body.cast("string"), "$.event_time")))
            for row in written.groupBy("topic", hour.alias("hour")).agg(count(lit(1)).alias("n")).collect():
                if row.hour is not None:
                    counts[(row.topic, as_utc(row.hour))] += int(row.n)
            for row in records.groupBy("topic", "partition").agg(min_("timestamp").alias("first")).collect():
                first_written[(cluster, row.topic, row.partition)] = as_utc(row.first)
        finally:
            records.unpersist()
    return Accepted(dict(counts), held_from(starts, first_written, datetime.now(timezone.utc)))
