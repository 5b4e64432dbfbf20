"""The lake's de-duplication, done on the run's branch after the rows' append and before ``main``
moves to it (conveyor.pipeline.guard), so readers never see the copies.

The append is the run's one pass over the range. The copies are then found from keys alone: the
new rows' ``event_id`` and coordinates, read back from the files the append added (Iceberg's
incremental read between two snapshots), and the event ids the table held in the window before the
run. A copy is a new row whose event_id an earlier offset of the range has (the first offset is
kept) or the table already had with an event time in the window. When there are any, one more
commit on the branch deletes them by their coordinates, looking only in the hours their event times
span. Nothing of the rows is shuffled: only ids and coordinates, about 60 bytes a record, where the
rows are a kilobyte or more.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from conveyor.pipeline.guard import iceberg_table
from conveyor.pipeline.tables import on_branch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_COORDINATES = ["kafka_partition", "kafka_offset"]


def _at_snapshot(spark: SparkSession, table: str, **options: str) -> DataFrame:
    return spark.read.format("iceberg").options(**options).load(table)


def copies(spark: SparkSession, table: str, base: int, appended: int, since: datetime) -> DataFrame:
    """Coordinates and event times of the rows snapshot ``appended`` added after ``base`` that are
    copies: of an earlier offset among them, or of a row ``base`` held with an event time at or
    after ``since``."""
    from pyspark.sql import Window
    from pyspark.sql.functions import col, lit, row_number

    new = _at_snapshot(spark, table, **{"start-snapshot-id": str(base), "end-snapshot-id": str(appended)})
    landed = (_at_snapshot(spark, table, versionAsOf=str(base)).where(col("event_time") >= since)
              .select("event_id").distinct().withColumn("seen", lit(True)))
    # One scan of the new keys and one shuffle by event_id, which the ordering by offset reuses.
    first = Window.partitionBy("event_id").orderBy(*_COORDINATES)
    marked = new.select("event_id", "event_time", *_COORDINATES).join(landed, "event_id", "left")
    return (marked.withColumn("n", row_number().over(first))
            .where(col("seen").isNotNull() | (col("n") > 1)).select(*_COORDINATES, "event_time"))


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
    count, earliest, latest = found.select(count_(lit(1)), unix_micros(min_("event_time")),
                                           unix_micros(max_("event_time"))).first()
    if count:
        view = f"conveyor_copies_{branch}"
        found.createOrReplaceTempView(view)
        try:
            # The copies' own event times bound the rows to delete, so Iceberg reads only their
            # hours of the table to find them, not every file it ever wrote.
            spark.sql(
                f"MERGE INTO {on_branch(table, branch)} t USING {view} d "
                "ON t.kafka_partition = d.kafka_partition AND t.kafka_offset = d.kafka_offset "
                f"AND t.event_time BETWEEN {_timestamp(earliest)} AND {_timestamp(latest)} "
                "WHEN MATCHED THEN DELETE"
            )
        finally:
            spark.catalog.dropTempView(view)
    return count


def _timestamp(micros: int) -> str:
    """A SQL literal of the instant ``micros`` after the epoch, its zone written out."""
    moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)
    return f"TIMESTAMP '{moment.isoformat()}'"
