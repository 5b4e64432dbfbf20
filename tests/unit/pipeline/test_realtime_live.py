"""The real-time mode's pure parts: a partition's position read back from its Redis hash, and the
latency buckets the tasks note."""

from __future__ import annotations

from conveyor.pipeline.realtime.live import Position, fence_field, latency_bucket, position_key
from conveyor.pipeline.realtime.plan import is_counter


def test_a_position_reads_back_offset_zero_and_empty_event_times():
    assert Position.of({}) == Position(-1, -1, None, None)
    assert Position.of({"done": "0", "pending": "0", "pending_max": "", "max_ms": "1700000000123"}) == \
        Position(0, 0, None, 1_700_000_000_123)


def test_latencies_keep_two_digits_in_few_buckets():
    assert [latency_bucket(ms) for ms in (0, 999, 1000, 1234, 9999, 10_000, 12_345)] == \
        [0, 999, 1000, 1230, 9990, 10_000, 12_300]
    assert len({latency_bucket(ms) for ms in range(600_000)}) < 8_000


def test_the_partition_fence_is_no_counter_and_positions_are_per_job_and_partition():
    assert not is_counter(fence_field("ad-events", 3)) and is_counter("events:travel")
    assert position_key("j1", "ad-events", 3) == "conveyor:realtime:j1:pos:ad-events:3"
