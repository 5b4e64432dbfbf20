"""The lake's Iceberg tables: names, creation, commits that carry offsets, and what a commit says.

Per topic, ``lake.events.<topic>`` (the contract's columns and Kafka's coordinates, partitioned by
the event's date and hour) and ``lake.quarantine.<topic>`` (bad records with their reason); one
``lake.ops.gaps`` for offsets retention deleted before they landed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from conveyor.pipeline.errors import LakeConfigError
from conveyor.pipeline.offsets import Gap, Positions
from conveyor.pipeline.schema import LANDED_AT, Column, quote, table_columns_ddl
from conveyor.pipeline.catalog import CATALOG

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from conveyor.config import Platform

GAPS_TABLE = f"{CATALOG}.ops.gaps"
NAMESPACES = ("events", "quarantine", "ops")
#: Snapshot summary properties written in the same commit as the data.
OFFSETS_PROPERTY = "conveyor.offsets"
LISTED_AT_PROPERTY = "conveyor.listed-at"
RUN_PROPERTY = "conveyor.run-id"

PARTITION_SUMMARY_LIMIT = "write.summary.partition-limit"
# No shuffle before writing (each task writes its rows' hours itself), and a bounded number of old
# metadata files: a run every 30 minutes commits twice per topic.
_PROPERTIES = {
    "format-version": "2",
    # Snappy, as Spark's own Parquet sink: zstd files are smaller but cost a third more CPU per run.
    "write.parquet.compression-codec": "snappy",
    "write.distribution-mode": "none",
    "write.spark.fanout.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    # Rows added and removed per hour partition in each snapshot's summary: the audit reads from
    # them how many copies each de-dup dropped in which hour (conveyor.pipeline.audit).
    PARTITION_SUMMARY_LIMIT: "10000",
}
_QUARANTINE_COLUMNS = (
    "kafka_partition int, kafka_offset bigint, kafka_timestamp timestamp, kafka_key binary, "
    "raw_value binary, reason string, quarantined_at timestamp"
)
_GAPS_COLUMNS = (
    "topic string, kafka_partition int, first_offset bigint, last_offset bigint, missing bigint, "
    "detected_at timestamp"
)


def data_table(topic: str) -> str:
    return f"{CATALOG}.events.{quote(topic)}"


def lake_topics(platform: Platform, requested: list[str] | None = None) -> list[str]:
    """The topics a run lands: those asked for, else pipeline.lake.topics, else every topic that
    names the ``lake`` service among its consumers."""
    configured = platform.pipeline.lake.topics
    if requested:
        topics = requested
    elif configured is not None:
        topics = configured
    else:
        topics = [name for name, spec in platform.topics.items() if "lake" in spec.consumers]
    unknown = [t for t in topics if t not in platform.topics]
    if unknown:
        raise LakeConfigError(f"not declared in platform.yaml: {', '.join(unknown)}")
    if not topics:
        raise LakeConfigError("no topic to land: set pipeline.lake.topics or pass --topics")
    return topics


def quarantine_table(topic: str) -> str:
    return f"{CATALOG}.quarantine.{quote(topic)}"


def _properties_sql() -> str:
    return ", ".join(f"'{key}'='{value}'" for key, value in _PROPERTIES.items())


@dataclass(frozen=True)
class Commit:
    """What a table's current state says: totals now, and the latest offsets committed with data."""

    #: The current snapshot: a commit that starts from this state lands right after it.
    snapshot_id: int
    committed_at: datetime
    records: int
    files: int
    bytes: int
    #: Rows the current snapshot added.
    added_records: int
    #: Next offset per partition, from the latest snapshot that carries offsets (None: never).
    positions: dict[int, int] | None
    #: When the committed run listed its end offsets: everything appended before is landed.
    listed_at: datetime | None
    run_id: str | None


def _create_namespace(spark: SparkSession, namespace: str) -> None:
    """Create ``namespace`` unless it exists. Iceberg's JDBC catalog reports two runs creating it at
    once as an SQL error (a duplicate key) rather than "already exists": it exists either way."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    except (PySparkException, Py4JError):
        if not spark.catalog.databaseExists(namespace):
            raise


def ensure_tables(spark: SparkSession, topic: str, columns: tuple[Column, ...]) -> None:
    """Create the topic's tables and the gaps table if missing; add columns a contract gained."""
    table = data_table(topic)
    for namespace in NAMESPACES:  # a Hadoop catalog makes folders; JDBC, REST and Hive need them declared
        _create_namespace(spark, f"{CATALOG}.{namespace}")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} ({table_columns_ddl(columns)}) USING iceberg "
        f"PARTITIONED BY (hours(event_time)) TBLPROPERTIES ({_properties_sql()})"
    )
    existing = {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}
    if LANDED_AT not in existing:  # a table of an older Conveyor: its rows have no landing time
        spark.sql(f"ALTER TABLE {table} ADD COLUMN {LANDED_AT} timestamp")
    if not iceberg_table(spark, table).properties().containsKey(PARTITION_SUMMARY_LIMIT):
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{PARTITION_SUMMARY_LIMIT}'='{_PROPERTIES[PARTITION_SUMMARY_LIMIT]}')")
    for column in columns:
        have = existing.get(column.name)
        if have is None:
            spark.sql(f"ALTER TABLE {table} ADD COLUMN {column.ddl}")
        elif have != column.kind.spark_type:
            raise LakeConfigError(
                f"{table}: column {column.name} is {have} but the contract now makes it "
                f"{column.kind.spark_type}; Iceberg cannot change it in place"
            )
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {quarantine_table(topic)} ({_QUARANTINE_COLUMNS}) USING iceberg "
        f"PARTITIONED BY (days(kafka_timestamp)) TBLPROPERTIES ({_properties_sql()})"
    )
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {GAPS_TABLE} ({_GAPS_COLUMNS}) USING iceberg TBLPROPERTIES ({_properties_sql()})"
    )


def table_exists(spark: SparkSession, table: str) -> bool:
    return bool(spark.catalog.tableExists(table))


def as_utc(moment: datetime) -> datetime:
    """PySpark returns timestamps as naive times of this process's zone; astimezone reads a naive
    time as local, so this holds whatever TZ the process runs in."""
    return moment.astimezone(timezone.utc)


def live_records(summary: Mapping[str, str]) -> int:
    """Rows a reader sees at a snapshot (its summary: a dict, or Iceberg's Java map): the data
    files' records less the rows position delete files remove. The lake's own deletes rewrite files,
    but an owner may set a table to merge-on-read (say, to erase a user's events), and then the
    deleted rows stay counted in total-records."""
    # `or 0`: Iceberg's map, seen through py4j, answers None for a missing key instead of a default.
    return int(summary.get("total-records") or 0) - int(summary.get("total-position-deletes") or 0)


def iceberg_table(spark: SparkSession, table: str) -> Any:
    """The table's Iceberg ``Table`` (Java), refreshed from the catalog now. Spark's catalog keeps
    loaded tables for 30 s and refreshes them only on its own commits, so without the refresh a
    commit of another process (another lake run) could be missed for that long."""
    jvm = spark.sparkContext._jvm
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    loaded.refresh()
    return loaded


def ancestry(iceberg: Any, snapshot: Any) -> Iterator[Any]:
    """``snapshot`` and its ancestors, newest first, by their parent ids: the table's history only
    logs the snapshots ``main`` pointed at, and a fast-forward skips the branch's others (the
    append that carried the offsets, when a de-dup delete followed it)."""
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parentId()
        snapshot = iceberg.snapshot(parent) if parent is not None else None


def current_commit(spark: SparkSession, table: str) -> Commit | None:
    """The table's current snapshot, and the offsets of the latest one in its ancestry that has
    them (a de-dup delete or a maintenance commit such as a compaction carries none). None for a
    table never written."""
    iceberg = iceberg_table(spark, table)
    current = iceberg.currentSnapshot()
    if current is None:
        return None
    summary = current.summary()
    with_offsets = next((s.summary() for s in ancestry(iceberg, current) if s.summary().containsKey(OFFSETS_PROPERTY)),
                        None)
    positions = listed_at = run_id = None
    if with_offsets is not None:
        positions = {int(p): int(o) for p, o in json.loads(with_offsets.get(OFFSETS_PROPERTY)).items()}
        listed_at = datetime.fromisoformat(with_offsets.get(LISTED_AT_PROPERTY))
        run_id = with_offsets.get(RUN_PROPERTY)
    return Commit(
        snapshot_id=int(current.snapshotId()),
        committed_at=datetime.fromtimestamp(current.timestampMillis() / 1000, timezone.utc),
        records=live_records(summary),
        files=int(summary.get("total-data-files") or 0),
        bytes=int(summary.get("total-files-size") or 0),
        added_records=int(summary.get("added-records") or 0),
        positions=positions,
        listed_at=listed_at,
        run_id=run_id,
    )


def commit_properties(positions: Positions, listed_at: datetime, run_id: str) -> dict[str, str]:
    return {
        OFFSETS_PROPERTY: json.dumps({str(p): o for p, o in sorted(positions.items())}),
        LISTED_AT_PROPERTY: listed_at.isoformat(),
        RUN_PROPERTY: run_id,
    }


def on_branch(table: str, branch: str | None) -> str:
    """The identifier that reads and writes ``branch`` of ``table`` (``main`` for None)."""
    # Iceberg 1.11 names a branch in the table's identifier (its "branch" write option came later).
    return table if branch is None else f"{table}.`branch_{branch}`"


def append(rows: DataFrame, table: str, properties: Mapping[str, str], branch: str | None = None) -> None:
    """One Iceberg commit (to ``branch``, else to main): the rows and the properties land together
    or not at all."""
    writer = rows.writeTo(on_branch(table, branch))
    for key, value in properties.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.append()


def record_gaps(spark: SparkSession, gaps: tuple[Gap, ...], detected_at: datetime) -> None:
    """Add gaps to the gaps table; a run redone after a kill finds the same gaps (same first
    offset), which widen an existing row instead of adding one."""
    found = spark.createDataFrame(
        [(g.topic, g.partition, g.first, g.last, g.count, detected_at) for g in gaps], _GAPS_COLUMNS
    )
    found.createOrReplaceTempView("conveyor_found_gaps")
    spark.sql(
        f"MERGE INTO {GAPS_TABLE} g USING conveyor_found_gaps n "
        "ON g.topic = n.topic AND g.kafka_partition = n.kafka_partition AND g.first_offset = n.first_offset "
        "WHEN MATCHED AND n.last_offset > g.last_offset THEN "
        "UPDATE SET g.last_offset = n.last_offset, g.missing = n.missing "
        "WHEN NOT MATCHED THEN INSERT *"
    )


def gaps_of(spark: SparkSession, topic: str) -> list[Gap]:
    if not table_exists(spark, GAPS_TABLE):
        return []
    from pyspark.sql.functions import col

    rows = spark.table(GAPS_TABLE).where(col("topic") == topic).orderBy("kafka_partition", "first_offset").collect()
    return [Gap(r.topic, r.kafka_partition, r.first_offset, r.last_offset) for r in rows]
