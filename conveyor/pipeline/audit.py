"""``conveyor lake audit``: what the gateways accepted against the rows that landed, per hour.

Exact data needs a check of delivery against the producer's own counts (docs/architecture.md,
section 1). What was accepted is counted from the writable clusters' logs, where every accepted
event is a record (conveyor.pipeline.accepted). An hour that is not complete yet may still be
landing, and an hour those logs no longer hold whole cannot be counted, so only complete, held
hours can fail the audit.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from conveyor.config import Platform
from conveyor.pipeline.completeness import is_complete, landed_until, last_complete_hour
from conveyor.pipeline.errors import spark_failures
from conveyor.pipeline.accepted import Key, accepted_counts
from conveyor.pipeline.kafka_source import list_watermarks
from conveyor.pipeline.tables import lake_topics
from conveyor.pipeline.catalog import require_catalog
from conveyor.pipeline.tables import (
    OFFSETS_PROPERTY,
    ancestry,
    as_utc,
    current_commit,
    data_table,
    iceberg_table,
    table_exists,
)

#: Where a snapshot summary keeps one partition's figures (Iceberg's SnapshotSummary).
PARTITION_PREFIX = "partitions."

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class HourAudit:
    topic: str
    hour: datetime
    produced: int
    #: Rows landed, and distinct event_ids among them.
    landed: int
    distinct: int
    complete: bool
    #: Copies the lake's de-dup dropped in the hour: a client's retry through the other data centre
    #: is accepted, and counted, by both gateways, and lands once.
    copies: int = 0
    #: The topic is delivered exactly (Topic.delivery): a loss or a copy fails the hour. Delivered at
    #: least once, its copies are kept and a loss only warns.
    exact: bool = True
    #: The writable clusters' logs still hold every record of the hour (retention deleted none of
    #: them): only then is ``produced`` whole.
    held: bool = True

    @property
    def lost(self) -> int:
        return max(0, self.produced - self.distinct - self.copies)

    @property
    def duplicates(self) -> int:
        return self.landed - self.distinct

    @property
    def unaudited(self) -> int:
        """Distinct events landed beyond the gateway's count (written around the gateway)."""
        return max(0, self.distinct - self.produced)

    @property
    def failed(self) -> bool:
        """A complete hour that broke an exact topic's promise: it pages."""
        return self.judged and self.exact and (self.lost > 0 or self.duplicates > 0)

    @property
    def warned(self) -> bool:
        """A complete hour that lost events of a topic delivered at least once: it warns."""
        return self.judged and not self.exact and self.lost > 0

    @property
    def judged(self) -> bool:
        """Complete in the lake and held whole by the logs: its figures are final."""
        return self.complete and self.held


def reconcile(
    produced: Mapping[Key, int], landed: Mapping[Key, tuple[int, int]], complete_until: Mapping[str, datetime | None],
    copies: Mapping[Key, int] | None = None, relaxed: Collection[str] = (), held_from: Mapping[str, datetime] | None = None,
) -> list[HourAudit]:
    """One line per (topic, hour) either side knows, in order; ``relaxed``: the topics delivered at
    least once; ``held_from``: per topic, the first hour the logs hold whole. Pure."""
    audits = []
    for topic, hour in sorted(set(produced) | set(landed)):
        rows, distinct = landed.get((topic, hour), (0, 0))
        complete = is_complete(hour, complete_until.get(topic))
        first_held = (held_from or {}).get(topic)
        audits.append(HourAudit(topic, hour, produced.get((topic, hour), 0), rows, distinct, complete,
                                (copies or {}).get((topic, hour), 0), exact=topic not in relaxed,
                                held=first_held is None or hour >= first_held))
    return audits


def _hour_of(partition: str) -> datetime | None:
    """The hour of a summary's ``event_time_hour=2026-11-26-14`` partition."""
    name, _, value = partition.partition("=")
    if name != "event_time_hour" or value in ("", "null"):
        return None
    return datetime.strptime(value, "%Y-%m-%d-%H").replace(tzinfo=timezone.utc)


def dropped_copies(summaries: Iterable[tuple[Mapping[str, str], Mapping[str, str] | None]]) -> dict[datetime, int]:
    """Copies removed per event hour by the lake's de-dup commits, from (snapshot summary, its
    parent's summary) pairs of a table's history: a de-dup commit follows the run's append (which
    carries the run's offsets) and carries none itself; its partition summaries say how many rows
    each hour lost. Pure."""
    dropped: dict[datetime, int] = {}
    for summary, parent in summaries:
        if parent is None or OFFSETS_PROPERTY in summary or OFFSETS_PROPERTY not in parent:
            continue
        for key, value in summary.items():
            hour = _hour_of(key.removeprefix(PARTITION_PREFIX)) if key.startswith(PARTITION_PREFIX) else None
            if hour is None:
                continue
            figures = dict(item.split("=", 1) for item in value.split(",") if "=" in item)
            removed = (int(figures.get("deleted-records", 0)) - int(figures.get("added-records", 0))
                       + int(figures.get("added-position-deletes", 0)))
            dropped[hour] = dropped.get(hour, 0) + removed
    return dropped


def copies_counts(spark: SparkSession, topic: str) -> dict[Key, int]:
    """Copies the lake dropped per (topic, hour), over the snapshots the table still keeps."""
    table = data_table(topic)
    if not table_exists(spark, table):
        return {}
    iceberg = iceberg_table(spark, table)
    current = iceberg.currentSnapshot()
    history = [dict(s.summary()) for s in ancestry(iceberg, current)] if current is not None else []
    pairs = zip(history, [*history[1:], None], strict=True)
    return {(topic, hour): n for hour, n in dropped_copies(pairs).items()}


def landed_counts(spark: SparkSession, topic: str) -> dict[Key, tuple[int, int]]:
    from pyspark.sql.functions import count, count_distinct, date_trunc, lit

    table = data_table(topic)
    if not table_exists(spark, table):
        return {}
    rows = (
        spark.table(table)
        .groupBy(date_trunc("hour", "event_time").alias("hour"))
        .agg(count(lit(1)).alias("rows"), count_distinct("event_id").alias("distinct"))
        .collect()
    )
    return {(topic, as_utc(r.hour)): (int(r.rows), int(r.distinct)) for r in rows}


def complete_until(spark: SparkSession, platform: Platform, topic: str) -> datetime | None:
    """The topic's last complete hour (see conveyor.pipeline.completeness)."""
    table = data_table(topic)
    commit = current_commit(spark, table) if table_exists(spark, table) else None
    if commit is None:
        return None
    now, marks = list_watermarks(platform, topic)
    lateness = timedelta(seconds=platform.pipeline.lake.allowed_lateness)
    return last_complete_hour(landed_until(commit.positions, commit.listed_at, marks, now), marks, lateness)


def audit_lake(spark: SparkSession, platform: Platform, topics: list[str] | None = None) -> list[HourAudit]:
    require_catalog(spark, platform)
    chosen = lake_topics(platform, topics)
    landed: dict[Key, tuple[int, int]] = {}
    copies: dict[Key, int] = {}
    with spark_failures("audit"):
        for topic in chosen:
            landed.update(landed_counts(spark, topic))
            copies.update(copies_counts(spark, topic))
        until = {topic: complete_until(spark, platform, topic) for topic in chosen}
        accepted = accepted_counts(spark, platform, chosen)
    return reconcile(accepted.counts, landed, until, copies, platform.relaxed_topics(), accepted.held_from)
