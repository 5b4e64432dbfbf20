"""The lake's de-duplication, done on the run's branch after the rows' append and before ``main``
moves to it (conveyor.pipeline.guard), so readers never see the copies.

A copy is a row whose ``event_id`` landed before within ``dedup_window`` of this run (exact topics;
a topic delivered at least once keeps its copies), whatever its
event time: a retry through the other data centre hours later, a replicator that lagged, a backfill.
Every row carries ``landed_at``, the instant its run listed the partitions' ends, the same for all
rows of a commit; so the files landed since a moment are exactly those whose ``landed_at`` bounds
are at or after it, and Iceberg's file statistics prune every other file without opening it. The
lookup reads one column (``event_id``) of those files, and the storage it costs is that one
timestamp column, constant within each file (Parquet keeps it in a few bytes per page).

The append is the run's one pass over the range. The copies are then found from keys alone: the
new rows' ``event_id`` and coordinates, read back from the files the append added (Iceberg's
incremental read between two snapshots), against the ids the table held that landed in the window.
A copy is a new row whose event_id an earlier offset of the range has (the first offset is kept) or
that landed in the window before. When there are any, one more commit on the branch deletes them by
their coordinates among this run's rows only (their ``landed_at``), looking only in the hours their
event times span. Nothing of the rows is shuffled: only ids and coordinates, about 60 bytes a
record, where the rows are a kilobyte or more.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from conveyor.config import Delivery, Platform
from conveyor.pipeline.schema import LANDED_AT
from conveyor.pipeline.tables import iceberg_table, on_branch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_COORDINATES = ["kafka_partition", "kafka_offset"]


def dedup_window(platform: Platform, topic: str) -> float:
    """Seconds back a run looks for copies of ``topic``'s events: the lake's window for an exact
    topic, none for one delivered at least once, whose copies are kept (and cost no lookup)."""
    if platform.topics[topic].delivery is not Delivery.exact:
        return 0.0
    return platform.pipeline.lake.dedup_window


def _at_snapshot(spark: SparkSession, table: str, **options: str) -> DataFrame:
    return spark.read.format("iceberg").options(**options).load(table)


def copies(spark: SparkSession, table: str, base: int, appended: int, since: datetime) -> DataFrame:
    """Coordinates, event times and landing time of the rows snapshot ``appended`` added after
    ``base`` that are copies: of an earlier offset among them, or of a row ``base`` held that landed
    at or after ``since``."""
    from pyspark.sql import Window
    from pyspark.sql.functions import col, lit, row_number

    new = _at_snapshot(spark, table, **{"start-snapshot-id": str(base), "end-snapshot-id": str(appended)})
    landed = (_at_snapshot(spark, table, versionAsOf=str(base)).where(col(LANDED_AT) >= since)
              .select("event_id").distinct().withColumn("seen", lit(True)))
    # One scan of the new keys and one shuffle by event_id, which the ordering by offset reuses.
    first = Window.partitionBy("event_id").orderBy(*_COORDINATES)
    marked = new.select("event_id", "event_time", LANDED_AT, *_COORDINATES).join(landed, "event_id", "left")
    return (marked.withColumn("n", row_number().over(first))
            .where(col("seen").isNotNull() | (col("n") > 1)).select(*_COORDINATES, "event_time", LANDED_AT))


def drop_copies(spark: SparkSession, table: str, branch: str, base: int, since: datetime) -> int:
    """Delete from ``branch`` (whose head is the run's append on ``base``) the rows that are copies;
    the rows deleted."""
    from pyspark.sql.functions import count as count_
    from pyspark.sql.functions import lit, unix_micros
    from pyspark.sql.functions import max as max_
    from pyspark.sql.functions import min as min_

    appended = iceberg_table(spark, table).snapshot(branch).snapshotId()
    # Kept on the executors: counted once, read again by the delete, and (unlike a cached plan)
    # free of table references, which a MERGE's source may not hold in Spark 4.1.
    found = copies(spark, table, base, appended, since).localCheckpoint(eager=True)
    count, earliest, latest, landed = found.select(count_(lit(1)), unix_micros(min_("event_time")),
                                                   unix_micros(max_("event_time")), unix_micros(max_(LANDED_AT))).first()
    if count:
        view = f"conveyor_copies_{branch}"
        found.createOrReplaceTempView(view)
        try:
            # The copies' own event times bound the rows to delete, so Iceberg reads only their
            # hours of the table to find them, not every file it ever wrote; their landing time
            # keeps the delete to this run's rows, whatever an older row's coordinates.
            spark.sql(
                f"MERGE INTO {on_branch(table, branch)} t USING {view} d "
                "ON t.kafka_partition = d.kafka_partition AND t.kafka_offset = d.kafka_offset "
                f"AND t.event_time BETWEEN {_timestamp(earliest)} AND {_timestamp(latest)} "
                f"AND t.{LANDED_AT} = {_timestamp(landed)} "
                "WHEN MATCHED THEN DELETE"
            )
        finally:
            spark.catalog.dropTempView(view)
    return count


def _timestamp(micros: int) -> str:
    """A SQL literal of the instant ``micros`` after the epoch, its zone written out."""
    moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)
    return f"TIMESTAMP '{moment.isoformat()}'"
