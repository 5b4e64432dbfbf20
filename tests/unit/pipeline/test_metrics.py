"""The lake job's metrics after a run, including a gap and the completeness gauge."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from conveyor.pipeline.lake import RunSummary, TopicRun
from conveyor.pipeline.metrics import LakeMetrics
from conveyor.pipeline.offsets import Gap, PartitionRange


def test_a_run_with_a_gap_is_counted_per_partition_and_completeness_is_exported():
    listed_at = datetime(2025, 3, 1, 10, 25, tzinfo=timezone.utc)
    run = TopicRun(
        topic="ad-events", ranges=(PartitionRange(0, 25, 30), PartitionRange(1, 0, 4)),
        gaps=(Gap("ad-events", 0, 10, 24),), records_read=9, bytes_read=900, landed=7, quarantined=1,
        duplicates_dropped=1, orphans_deleted=0, committed=True, seconds=2.0, listed_at=listed_at,
    )
    metrics = LakeMetrics(timedelta(minutes=10))
    metrics.observe(RunSummary("r1", listed_at, (run,), 3.0))
    value = metrics.registry.get_sample_value
    assert value("conveyor_lake_lost_records_total", {"topic": "ad-events", "partition": "0"}) == 15
    assert value("conveyor_lake_gaps_total", {"topic": "ad-events"}) == 1
    assert value("conveyor_lake_rows_landed_total", {"topic": "ad-events"}) == 7
    assert value("conveyor_lake_rows_quarantined_total", {"topic": "ad-events"}) == 1
    assert value("conveyor_lake_runs_total", {"result": "ok"}) == 1
    # Landed to 10:25, 10 minutes late: hours up to 10:00 are complete.
    complete = datetime(2025, 3, 1, 10, 0, tzinfo=timezone.utc).timestamp()
    assert value("conveyor_lake_complete_until_timestamp_seconds", {"topic": "ad-events"}) == complete
