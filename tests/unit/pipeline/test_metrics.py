"""The lake job's metrics after a run, including a gap and the completeness gauge; the real-time job's."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from conveyor.pipeline.lake import RunSummary, TopicRun
from conveyor.pipeline.metrics import LakeMetrics
from conveyor.pipeline.offsets import Gap, PartitionRange
from conveyor.pipeline.trust import Trust


def test_a_run_with_a_gap_is_counted_per_partition_and_completeness_is_exported():
    listed_at = datetime(2025, 3, 1, 10, 25, tzinfo=timezone.utc)
    run = TopicRun(
        topic="ad-events", ranges=(PartitionRange(0, 25, 30), PartitionRange(1, 0, 4)),
        gaps=(Gap("ad-events", 0, 10, 24),), records_read=9, bytes_read=900, landed=7, quarantined=1,
        duplicates_dropped=1, checked=9, trust=Trust("ad-events", False, "a test"), orphans_deleted=0, committed=True,
        seconds=2.0, listed_at=listed_at,
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


def test_the_steady_state_starts_after_the_first_batch_within_10_s_of_the_stream():
    from collections import Counter

    from conveyor.pipeline.realtime.metrics import BatchReport, RealtimeMetrics, SteadyState

    def batch(batch_id: int, latencies_ms: dict[int, int]) -> BatchReport:
        return BatchReport(batch_id, sum(latencies_ms.values()), sum(latencies_ms.values()), 1, 1, {}, 0.1,
                           Counter(latencies_ms), True)

    metrics = RealtimeMetrics()
    metrics.observe(batch(0, {30_000: 100}))  # Spark's cold start
    metrics.observe(batch(1, {55_000: 1, 38_000: 99}))  # the backlog that piled up meanwhile
    assert metrics.steady_state() == SteadyState(None)
    metrics.observe(batch(2, {9_000: 50, 10_000: 50}))  # within 10 s: caught up, its own backlog left out
    assert metrics.steady_state() == SteadyState(2, 0, {})
    metrics.observe(batch(3, {}))  # nothing arrived
    metrics.observe(batch(4, {400: 99, 600: 1}))
    metrics.observe(batch(5, {12_000: 3, 500: 97}))  # a slow batch later on still counts
    assert metrics.steady_state() == SteadyState(2, 200, {0.5: 0.5, 0.99: 12.0})
    assert metrics.run_latency()[0.99] == 38.0  # the whole run: the start-up backlog included


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
    # Every applied event's latency, in the histogram the rules take quantiles of.
    assert (value("conveyor_realtime_latency_seconds_bucket", {"le": "0.25"}),
            value("conveyor_realtime_latency_seconds_bucket", {"le": "0.5"}),
            value("conveyor_realtime_latency_seconds_sum")) == (0, 10, 3.0)
    assert value("conveyor_realtime_trigger_stage_seconds", {"stage": "walCommit"}) == 1.041
    assert sorted(metrics.triggers)[:1] == [2] and len(metrics.triggers) == 1000
