"""The replicator's pure rules: buckets, partition mapping, bookkeeping records."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conveyor.config import Route
from conveyor.replicate import plan


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
