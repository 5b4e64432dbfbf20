"""Which offsets a lake run reads, and which ones retention took before they were read. Pure.

A table's current snapshot names the next offset of every partition it has landed (the offsets are
committed with the data), so the table is the checkpoint. Several tables land one range (a topic's
rows and its quarantine, committed one after the other): the run reads from the lowest of their
positions, and each table keeps only the rows at or above its own, so a run killed between two
commits redoes exactly what is missing from each.

A position below the partition's earliest offset means retention deleted data nobody landed: that
is a gap, never a silent skip.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from conveyor.pipeline.errors import OffsetsAheadError

#: Per partition: the next offset a table will land.
Positions = Mapping[int, int]


@dataclass(frozen=True)
class Watermarks:
    """A partition's offsets now: earliest still in the log, and the end (exclusive) a reader sees."""

    low: int
    high: int


@dataclass(frozen=True)
class Gap:
    """Offsets ``first`` to ``last`` (inclusive) of a partition were deleted before they landed."""

    topic: str
    partition: int
    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class PartitionRange:
    partition: int
    #: First offset to read (past any gap).
    start: int
    #: End of the read, exclusive: the partition's end when the run listed it.
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class RangePlan:
    topic: str
    ranges: tuple[PartitionRange, ...]
    gaps: tuple[Gap, ...]
    #: Per table: per partition, the lowest offset that table still needs (rows below it landed).
    floors: Mapping[str, Positions] = field(default_factory=dict)

    @property
    def records(self) -> int:
        """Offsets in the plan (transaction markers and compacted records among them are never rows)."""
        return sum(r.size for r in self.ranges)

    @property
    def end_positions(self) -> dict[int, int]:
        """What every table's commit stores: the next offset after this run, per partition."""
        return {r.partition: r.end for r in self.ranges}

    def starting_json(self) -> str:
        return json.dumps({self.topic: {str(r.partition): r.start for r in self.ranges}})

    def ending_json(self) -> str:
        return json.dumps({self.topic: {str(r.partition): r.end for r in self.ranges}})

    def needs_filter(self, table: str) -> bool:
        """True when ``table`` already landed part of the range and must skip those rows."""
        floors = self.floors.get(table, {})
        return any(floors.get(r.partition, r.start) > r.start for r in self.ranges)


def _next_offset(stored: Positions | None, partition: int, marks: Watermarks) -> int:
    if stored is None:
        return marks.low  # the table has never landed anything: start at the earliest offset
    # A partition the last commit did not know was added since: all of it is unread.
    return stored.get(partition, 0)


def plan_ranges(
    topic: str, stored: Mapping[str, Positions | None], marks: Mapping[int, Watermarks]
) -> RangePlan:
    """The range a run reads: from the lowest position of the ``stored`` tables (table -> its
    positions, None for a table never committed) up to the partitions' current ends."""
    committed = {name: positions for name, positions in stored.items() if positions is not None}
    for positions in committed.values():
        for partition, offset in positions.items():
            mark = marks.get(partition)
            end = mark.high if mark is not None else 0
            if mark is None or offset > mark.high:
                raise OffsetsAheadError(topic, partition, offset, end)

    ranges, gaps = [], []
    floors: dict[str, dict[int, int]] = {name: {} for name in stored}
    for partition in sorted(marks):
        mark = marks[partition]
        positions = [_next_offset(p, partition, mark) for p in committed.values()] or [mark.low]
        next_offset = min(positions)
        if next_offset < mark.low:
            gaps.append(Gap(topic, partition, next_offset, mark.low - 1))
        start = max(next_offset, mark.low)
        ranges.append(PartitionRange(partition, start, mark.high))
        for name, table_positions in stored.items():
            own = start if table_positions is None else _next_offset(table_positions, partition, mark)
            floors[name][partition] = max(own, start)
    return RangePlan(topic, tuple(ranges), tuple(gaps), floors)
