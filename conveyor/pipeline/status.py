"""``conveyor lake status``: per topic, what the lake holds and how far it is complete."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from conveyor.config import Platform
from conveyor.kafka import KafkaOperationError
from conveyor.pipeline.completeness import landed_until, last_complete_hour
from conveyor.pipeline.errors import spark_failures
from conveyor.pipeline.kafka_source import list_watermarks
from conveyor.pipeline.tables import lake_topics
from conveyor.pipeline.offsets import plan_ranges
from conveyor.pipeline.catalog import require_catalog
from conveyor.pipeline.tables import Commit, current_commit, data_table, gaps_of, quarantine_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    rows: int
    files: int
    bytes: int
    quarantined: int
    #: Offsets retention deleted before they landed, over all recorded gaps.
    lost: int
    gaps: int
    #: When the topic's last run committed; None if it never did.
    last_run: datetime | None
    last_complete_hour: datetime | None
    #: Offsets in Kafka not landed yet; None when Kafka could not be asked.
    pending: int | None


def _commit(spark: SparkSession, table: str) -> Commit | None:
    return current_commit(spark, table) if table_exists(spark, table) else None


def topic_status(spark: SparkSession, platform: Platform, topic: str) -> TopicStatus:
    data = _commit(spark, data_table(topic))
    quarantine = _commit(spark, quarantine_table(topic))
    gaps = gaps_of(spark, topic)
    positions = data.positions if data is not None else None
    listed_at = data.listed_at if data is not None else None
    try:
        now, marks = list_watermarks(platform, topic)
    except KafkaOperationError:
        marks = None
    if marks is not None:
        partitions, until = list(marks), landed_until(positions, listed_at, marks, now)
    else:  # what the last commit says
        partitions = list(positions or {})
        until = dict.fromkeys(partitions, listed_at) if listed_at else {}
    lateness = timedelta(seconds=platform.pipeline.lake.allowed_lateness)
    return TopicStatus(
        topic=topic,
        rows=data.records if data else 0,
        files=data.files if data else 0,
        bytes=data.bytes if data else 0,
        quarantined=quarantine.records if quarantine else 0,
        lost=sum(g.count for g in gaps),
        gaps=len(gaps),
        last_run=data.committed_at if data and data.positions is not None else None,
        last_complete_hour=last_complete_hour(until, partitions, lateness),
        pending=plan_ranges(topic, {"data": positions}, marks).records if marks is not None else None,
    )


def lake_status(spark: SparkSession, platform: Platform, topics: list[str] | None = None) -> list[TopicStatus]:
    require_catalog(spark, platform)
    with spark_failures("lake status"):
        return [topic_status(spark, platform, topic) for topic in lake_topics(platform, topics)]
