"""Completeness of hours and the audit's reconciliation, from tables of cases."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from conveyor.pipeline.audit import HourAudit, reconcile
from conveyor.pipeline.completeness import is_complete, landed_until, last_complete_hour
from conveyor.pipeline.offsets import Watermarks

H = timedelta(hours=1)
M = timedelta(minutes=1)


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2025, 3, 1, hour, minute, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("case", "landed_until", "partitions", "lateness", "expected"),
    [
        ("landed to 10:25, 10 minutes late: 09:00-10:00 is complete", {0: at(10, 25)}, [0], 10 * M, at(9)),
        ("landed to 10:05, 10 minutes late: 10:00 is not reached yet", {0: at(10, 5)}, [0], 10 * M, at(8)),
        ("exactly on the boundary counts", {0: at(10, 10)}, [0], 10 * M, at(9)),
        ("the slowest partition decides", {0: at(12, 30), 1: at(10, 30)}, [0, 1], 0 * M, at(9)),
        ("a partition never landed completes nothing", {0: at(12, 30)}, [0, 1], 0 * M, None),
        ("no partition known", {}, [], 0 * M, None),
    ],
)
def test_last_complete_hour(case, landed_until, partitions, lateness, expected):
    assert last_complete_hour(landed_until, partitions, lateness) == expected, case


def test_an_idle_partition_landed_to_its_end_is_complete_up_to_now():
    marks = {0: Watermarks(0, 10), 1: Watermarks(0, 7), 2: Watermarks(0, 3)}
    until = landed_until({0: 10, 1: 5}, at(9, 30), marks, now=at(12, 40))
    # 0 is at its end (nothing new since the commit), 1 has 2 offsets pending, 2 is new.
    assert until == {0: at(12, 40), 1: at(9, 30)}
    assert last_complete_hour(until, marks, 0 * M) is None  # partition 2 was never landed
    assert landed_until(None, None, marks, at(12)) == {}


def test_yesterday_is_complete_once_its_last_hour_is():
    last = last_complete_hour({0: at(0, 0) + 24 * H + 11 * M}, [0], 10 * M)  # next day, 00:11
    assert is_complete(at(23), last) and not is_complete(at(23) + 24 * H, last)
    assert not is_complete(at(0), None)


def test_reconcile_counts_lost_duplicated_and_unaudited_events_per_hour():
    produced = {("t", at(8)): 10, ("t", at(9)): 10, ("t", at(10)): 5, ("u", at(8)): 3}
    landed = {("t", at(8)): (10, 10), ("t", at(9)): (9, 8), ("t", at(10)): (2, 2), ("t", at(11)): (4, 4)}
    hours = reconcile(produced, landed, {"t": at(9), "u": None})
    assert [(h.topic, h.hour) for h in hours] == [
        ("t", at(8)), ("t", at(9)), ("t", at(10)), ("t", at(11)), ("u", at(8))
    ]
    by_key = {(h.topic, h.hour): h for h in hours}
    assert by_key[("t", at(8))] == HourAudit("t", at(8), 10, 10, 10, True)
    assert not by_key[("t", at(8))].failed
    nine = by_key[("t", at(9))]
    assert (nine.lost, nine.duplicates, nine.unaudited, nine.failed) == (2, 1, 0, True)
    ten = by_key[("t", at(10))]
    assert (ten.lost, ten.complete, ten.failed) == (3, False, False)  # still landing: pending, not failed
    eleven = by_key[("t", at(11))]
    assert (eleven.produced, eleven.unaudited, eleven.failed) == (0, 4, False)
    u = by_key[("u", at(8))]
    assert (u.landed, u.lost, u.complete) == (0, 3, False)


def test_a_topic_delivered_at_least_once_keeps_its_copies_and_warns_on_a_loss():
    produced = {("logs", at(8)): 10, ("logs", at(9)): 10, ("t", at(8)): 10}
    landed = {("logs", at(8)): (12, 10), ("logs", at(9)): (7, 7), ("t", at(8)): (12, 10)}
    hours = {h.topic + h.hour.strftime("%H"): h for h in reconcile(produced, landed, {"logs": at(9), "t": at(9)},
                                                                    relaxed=["logs"])}
    copies, loss, exact = hours["logs08"], hours["logs09"], hours["t08"]
    assert (copies.duplicates, copies.failed, copies.warned) == (2, False, False)
    assert (loss.lost, loss.failed, loss.warned) == (3, False, True)
    assert (exact.duplicates, exact.failed, exact.warned) == (2, True, False)


def test_copies_the_lake_dropped_are_read_from_de_dup_commits_and_are_not_lost():
    from conveyor.pipeline.audit import dropped_copies
    from conveyor.pipeline.tables import OFFSETS_PROPERTY

    hour = datetime(2026, 11, 26, 14, tzinfo=timezone.utc)
    append = {OFFSETS_PROPERTY: "{}", "partitions.event_time_hour=2026-11-26-14": "added-records=10"}
    de_dup = {"partitions.event_time_hour=2026-11-26-14": "added-data-files=1,added-records=7,deleted-records=9",
              "partitions.event_time_hour=2026-11-23-02": "added-records=0,deleted-records=1"}
    erased = {"partitions.event_time_hour=2026-11-26-14": "deleted-records=4"}  # an owner's delete, not after an append
    history = [(erased, de_dup), (de_dup, append), (append, None)]
    assert dropped_copies(history) == {hour: 2, datetime(2026, 11, 23, 2, tzinfo=timezone.utc): 1}
    # Two acceptances of one event (a retry through the other data centre), one row, one copy dropped.
    audit = HourAudit("t", hour, produced=2, landed=1, distinct=1, complete=True, copies=1)
    assert (audit.lost, audit.duplicates, audit.failed) == (0, 0, False)
    assert HourAudit("t", hour, produced=2, landed=1, distinct=1, complete=True).lost == 1
