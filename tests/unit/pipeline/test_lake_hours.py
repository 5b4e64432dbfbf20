"""The lake's completeness per hour, as its metrics export it for the dashboard's heat strip."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from conveyor.pipeline.metrics import HOURS_SHOWN, hours_complete

NOW = datetime(2026, 5, 1, 14, tzinfo=timezone.utc)


def test_the_last_day_of_hours_up_to_the_current_one_complete_through_the_last_complete_hour():
    hours = hours_complete(NOW - timedelta(hours=2), NOW)
    assert len(hours) == HOURS_SHOWN and hours[0][0] == NOW - timedelta(hours=23) and hours[-1][0] == NOW
    assert [complete for _, complete in hours[-4:]] == [True, True, False, False]


def test_nothing_complete_yet():
    assert not any(complete for _, complete in hours_complete(None, NOW))
