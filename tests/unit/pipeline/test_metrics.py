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


def test_the_steady_state_latency_counts_only_the_batches_after_its_start(monkeypatch):
    from collections import Counter

    from conveyor.pipeline.realtime import metrics as realtime_metrics
    from conveyor.pipeline.realtime.metrics import BatchReport, RealtimeMetrics

    def batch(batch_id: int, latencies_ms: dict[int, int]) -> BatchReport:
        return BatchReport(batch_id, sum(latencies_ms.values()), sum(latencies_ms.values()), 1, 1, {}, 0.1,
                           Counter(latencies_ms), True)

    metrics = RealtimeMetrics()
    clock = iter([10.0, 20.0, 30.0])
    monkeypatch.setattr(realtime_metrics.time, "monotonic", lambda: next(clock))
    metrics.observe(batch(0, {30_000: 100}))  # the start-up batch: 30 s late
    metrics.observe(batch(1, {400: 100}))
    metrics.observe(batch(2, {600: 100}))
    events, steady = metrics.latency_since(20.0)
    assert events == 200
    assert steady == {0.5: 0.4, 0.99: 0.6}
    assert metrics.run_latency()[0.99] == 30.0
    assert metrics.latency_since(31.0) == (0, {})


def test_where_a_batch_s_time_goes_is_exported_per_stage_and_kept_for_the_latest_triggers():
    from collections import Counter

    from conveyor.pipeline.realtime.metrics import BatchReport, RealtimeMetrics

    metrics = RealtimeMetrics()
    metrics.observe(BatchReport(7, 10, 10, 1, 1, {}, 1.5, Counter({300: 10}), True,
                                stages={"spark": 1.2, "redis": 0.3}))
    for batch_id in range(1002):
        metrics.observe_trigger(batch_id, {"addBatch": 1500, "walCommit": 40 + batch_id})
    value = metrics.registry.get_sample_value
    assert value("conveyor_realtime_batch_stage_seconds", {"stage": "spark"}) == 1.2
    assert value("conveyor_realtime_trigger_stage_seconds", {"stage": "walCommit"}) == 1.041
    assert sorted(metrics.triggers)[:1] == [2] and len(metrics.triggers) == 1000
