"""The replicator's pure rules: buckets, partition mapping, bookkeeping records, gaps, copied configs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conveyor.config import Route
from conveyor.replicate import plan, topic_configs


@given(st.dictionaries(st.text(min_size=1, max_size=20), st.integers(1, 64), max_size=30), st.integers(1, 64))
def test_every_partition_is_in_exactly_one_bucket(counts, buckets):
    grouped = plan.partitions_by_bucket(counts, buckets)
    assert set(grouped) == set(range(buckets))
    flat = [p for members in grouped.values() for p in members]
    assert len(flat) == len(set(flat)) == sum(counts.values())


def test_adding_partitions_or_topics_never_moves_existing_ones():
    before = plan.partitions_by_bucket({"a": 6, "b": 3}, 8)
    after = plan.partitions_by_bucket({"a": 12, "b": 3, "c": 5}, 8)
    for bucket, members in before.items():
        assert members <= after[bucket]


def test_same_partition_only_when_counts_match():
    assert plan.destination_partition(5, 12, 12) == 5
    assert plan.destination_partition(5, 12, 24) is None


def test_offset_records_round_trip_and_are_keyed_per_partition():
    key, value = plan.offset_record("ad-events", 7, 1234)
    assert plan.parse_offset_record(value) == ("ad-events", 7, 1234)
    assert key != plan.offset_record("ad-events", 8, 1234)[0]
    assert plan.transactional_id("dc1-central", 3) != plan.transactional_id("dc2-central", 3)


def test_routes_never_copy_internal_or_bookkeeping_topics():
    route = Route(source="dc1", destination="central", pattern=".*")
    assert route.selects("ad-events")
    assert not route.selects("__consumer_offsets")
    assert not route.selects(plan.route_topic("dc1-central"))


def test_a_gap_record_round_trips_and_reads_as_an_offset_record_too():
    gap = plan.Gap("ad-events", 3, 10, 24, found_ms=1_700_000_000_000)
    key, value = plan.gap_record(gap)
    assert plan.parse_gap_record(value) == gap and plan.parse_gap_record(value).found_ms == gap.found_ms
    assert gap.count == 15
    # A worker of the previous version reads it as the partition's offset: the one past the gap.
    assert plan.parse_offset_record(value) == ("ad-events", 3, 25)
    # Compaction keeps each gap: its key is neither the partition's offset key nor another gap's.
    assert key != plan.offset_record("ad-events", 3, 25)[0]
    assert key != plan.gap_record(plan.Gap("ad-events", 3, 30, 40))[0]
    assert key == plan.gap_record(plan.Gap("ad-events", 3, 10, 30))[0]  # found again, further on: one gap
    assert plan.parse_gap_record(plan.offset_record("ad-events", 3, 25)[1]) is None


def test_out_of_range_below_the_earliest_offset_is_a_gap_up_to_it():
    source = plan.SourcePartition("t", 1)
    assert plan.after_out_of_range(source, 10, 25, 40) == plan.Resume(25, plan.Gap("t", 1, 10, 24))
    assert plan.after_out_of_range(source, 0, 6, 10) == plan.Resume(6, plan.Gap("t", 1, 0, 5))


def test_out_of_range_beyond_the_end_copies_again_from_the_earliest_and_in_range_resumes_in_place():
    source = plan.SourcePartition("t", 0)
    assert plan.after_out_of_range(source, 500, 0, 20) == plan.Resume(0, truncated=True)
    assert plan.after_out_of_range(source, 25, 25, 40) == plan.Resume(25)
    assert plan.after_out_of_range(source, 40, 25, 40) == plan.Resume(40)


def test_undeclared_copies_take_the_source_configs():
    source = {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "1073741824",
              "max.message.bytes": "2097152", "compression.type": "zstd", "min.insync.replicas": "2"}
    mirrored = topic_configs.mirror_configs("t", source, "central", 3, 2)
    assert mirrored.configs == source and mirrored.differences == ()


def test_a_copy_never_gets_a_max_message_bytes_below_what_the_copier_writes():
    mirrored = topic_configs.mirror_configs("t", {"max.message.bytes": "65536"}, "central", 3, 2)
    assert mirrored.configs["max.message.bytes"] == str(topic_configs.MIN_COPY_MAX_MESSAGE_BYTES)
    [difference] = mirrored.differences
    assert (difference.config, difference.source, difference.destination) == ("max.message.bytes", "65536", "1048588")
    assert topic_configs.COPY_BATCH_BYTES < topic_configs.MIN_COPY_MAX_MESSAGE_BYTES


@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 3))
def test_min_insync_stays_within_the_destination(source_min_isr, factor, floor):
    mirrored = topic_configs.mirror_configs("t", {"min.insync.replicas": str(source_min_isr)}, "central", factor, floor)
    value = int(mirrored.configs["min.insync.replicas"])
    assert min(floor, factor) <= value <= factor
    assert value >= min(source_min_isr, factor)
    # Only a value the destination cannot have is a difference; one below its own floor is raised.
    assert [d.config for d in mirrored.differences] == (["min.insync.replicas"] if source_min_isr > factor else [])


def test_configs_the_destination_has_not_taken_are_listed():
    found = topic_configs.not_applied("t", {"retention.ms": "5"}, {"retention.ms": "5", "cleanup.policy": "delete"},
                                      {"retention.ms": "7", "cleanup.policy": "delete"}, "not yet")
    assert [(d.config, d.source, d.destination) for d in found] == [("retention.ms", "5", "7")]
