"""When an hour of a topic is complete in the lake. Pure.

An hour is complete when every partition has been landed past the end of the hour plus the allowed
lateness: a run lands everything appended before it listed the partitions' ends, and an event may
reach Kafka up to the allowed lateness after its event time. The daily deadline (yesterday landed by
01:00, docs/architecture.md, section 4) is then a question about one hour: is 23:00 complete?
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from conveyor.pipeline.offsets import Positions, Watermarks

HOUR = timedelta(hours=1)


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def last_complete_hour(
    landed_until: Mapping[int, datetime], partitions: Iterable[int], lateness: timedelta
) -> datetime | None:
    """The start of the latest complete hour, or None when no hour is.

    ``landed_until`` maps a partition to the moment everything appended to it before was landed;
    a partition of ``partitions`` missing from it (added since the last run) completes nothing.
    """
    moments = [landed_until.get(p) for p in partitions]
    if not moments or any(m is None for m in moments):
        return None
    cutoff = min(m for m in moments if m is not None) - lateness
    return floor_hour(cutoff) - HOUR


def landed_until(
    positions: Positions | None, committed_listed_at: datetime | None, marks: Mapping[int, Watermarks], now: datetime
) -> dict[int, datetime]:
    """Per partition, the moment up to which everything appended to it is landed: ``now`` (when
    ``marks`` were listed) where the landed position has reached the end, since an idle topic gets
    no new commit yet is complete; else the moment the last commit listed its ends."""
    if positions is None or committed_listed_at is None:
        return {}
    return {
        p: now if positions[p] >= mark.high else committed_listed_at
        for p, mark in marks.items()
        if p in positions
    }


def is_complete(hour: datetime, last_complete: datetime | None) -> bool:
    return last_complete is not None and floor_hour(hour) <= last_complete
