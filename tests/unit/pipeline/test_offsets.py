"""Offset ranges of a lake run and gap detection, from tables of cases."""

from __future__ import annotations

import json

import pytest

from conveyor.pipeline.errors import OffsetsAheadError
from conveyor.pipeline.offsets import Gap, PartitionRange, Watermarks, plan_ranges

T = "ad-events"
DATA, QUARANTINE = "data", "quarantine"


def marks(*pairs: tuple[int, int]) -> dict[int, Watermarks]:
    return {p: Watermarks(low, high) for p, (low, high) in enumerate(pairs)}


@pytest.mark.parametrize(
    ("case", "stored", "watermarks", "ranges", "gaps"),
    [
        ("first run starts at the earliest offsets",
         {DATA: None}, marks((5, 10), (0, 3)), [(0, 5, 10), (1, 0, 3)], []),
        ("the next run starts where the commit left off",
         {DATA: {0: 8, 1: 3}}, marks((5, 12), (0, 3)), [(0, 8, 12), (1, 3, 3)], []),
        ("retention deleted unread offsets: a gap, then the earliest",
         {DATA: {0: 8}}, marks((20, 30)), [(0, 20, 30)], [Gap(T, 0, 8, 19)]),
        ("everything unread was deleted and nothing is new",
         {DATA: {0: 8}}, marks((30, 30)), [(0, 30, 30)], [Gap(T, 0, 8, 29)]),
        ("a partition added since the last commit is read from 0",
         {DATA: {0: 4}}, marks((0, 4), (0, 6)), [(0, 4, 4), (1, 0, 6)], []),
        ("a partition added since, whose start retention took",
         {DATA: {0: 4}}, marks((0, 4), (2, 6)), [(0, 4, 4), (1, 2, 6)], [Gap(T, 1, 0, 1)]),
        ("the lowest position of the tables decides",
         {DATA: {0: 5}, QUARANTINE: {0: 9}}, marks((0, 12)), [(0, 5, 12)], []),
        ("a table never committed does not pull the read back to the earliest",
         {DATA: {0: 5}, QUARANTINE: None}, marks((0, 12)), [(0, 5, 12)], []),
    ],
)
def test_plan(case, stored, watermarks, ranges, gaps):
    plan = plan_ranges(T, stored, watermarks)
    assert plan.ranges == tuple(PartitionRange(*r) for r in ranges), case
    assert plan.gaps == tuple(gaps), case
    assert plan.end_positions == {p: m.high for p, m in watermarks.items()}


def test_each_table_keeps_only_what_it_has_not_landed():
    # A run was killed between the quarantine's commit (up to 9) and the rows' commit (still at 5).
    plan = plan_ranges(T, {QUARANTINE: {0: 9, 1: 4}, DATA: {0: 5, 1: 4}}, marks((0, 12), (0, 7)))
    assert plan.ranges == (PartitionRange(0, 5, 12), PartitionRange(1, 4, 7))
    assert plan.floors == {QUARANTINE: {0: 9, 1: 4}, DATA: {0: 5, 1: 4}}
    assert plan.needs_filter(QUARANTINE) and not plan.needs_filter(DATA)


def test_floors_never_fall_below_a_gap():
    plan = plan_ranges(T, {QUARANTINE: {0: 3}, DATA: {0: 2}}, marks((10, 12)))
    assert plan.floors == {QUARANTINE: {0: 10}, DATA: {0: 10}}
    assert plan.gaps == (Gap(T, 0, 2, 9),)


def test_gap_counts_every_missing_offset():
    assert Gap(T, 0, 10, 24).count == 15


def test_range_json_is_what_the_kafka_connector_takes():
    plan = plan_ranges(T, {DATA: {0: 3, 1: 1}}, marks((0, 9), (0, 4)))
    assert json.loads(plan.starting_json()) == {T: {"0": 3, "1": 1}}
    assert json.loads(plan.ending_json()) == {T: {"0": 9, "1": 4}}
    assert plan.records == 9


@pytest.mark.parametrize(
    ("stored", "watermarks"),
    [
        ({DATA: {0: 50}}, marks((0, 10))),  # the topic was re-created: the lake is ahead of the log
        ({DATA: {0: 5, 1: 5}}, marks((0, 10))),  # a partition the lake landed no longer exists
    ],
)
def test_positions_beyond_the_log_are_refused(stored, watermarks):
    with pytest.raises(OffsetsAheadError) as raised:
        plan_ranges(T, stored, watermarks)
    assert "re-created" in str(raised.value)
