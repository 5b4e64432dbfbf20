"""The tracker: snapshots from the sampler into lag windows per group (no servers)."""

from __future__ import annotations

from conveyor.ops.lag import Reason, Status
from conveyor.ops.tracker import GroupOffsets, OffsetSnapshot, OffsetTracker, PartitionMeta

T0 = 1_700_000_000_000
META = PartitionMeta(1, (1, 2, 3), (1, 2, 3))


def snap(i: int, groups: list[GroupOffsets], ends: dict[tuple[str, int], int],
         partitions: list[tuple[str, int]] | None = None) -> OffsetSnapshot:
    parts = partitions if partitions is not None else list(ends)
    return OffsetSnapshot("central", T0 + i * 5_000, tuple(groups), dict.fromkeys(parts, META), ends,
                          dict.fromkeys(ends, 0))


def status_of(tracker: OffsetTracker, group: str, now: int | None = None):
    return next(r for r in tracker.evaluate(now) if r.group == group)


def test_every_partition_of_a_committed_topic_is_judged_and_total_lag_kept():
    tracker = OffsetTracker("central", window=5)
    ends = {("t", 0): 100, ("t", 1): 50, ("u", 0): 9}
    tracker.push(snap(0, [GroupOffsets("g", "STABLE", {("t", 0): 60})], ends))
    report = status_of(tracker, "g")
    by_partition = {(p.topic, p.partition): p for p in report.status.partitions}
    assert set(by_partition) == {("t", 0), ("t", 1)}  # u: never committed by g
    assert by_partition[("t", 1)].reason is Reason.NO_COMMIT  # records there, no commit: a reset is coming
    assert report.history == ((T0, 40),)
    assert tracker.topics() == {"t"}


def test_a_commit_that_disappears_is_commit_lost_then_dropped_after_a_window():
    tracker = OffsetTracker("central", window=3)
    ends = {("t", 0): 100}
    tracker.push(snap(0, [GroupOffsets("g", "STABLE", {("t", 0): 90})], ends))
    tracker.push(snap(1, [GroupOffsets("g", "EMPTY", {})], ends))
    lost = status_of(tracker, "g").status.partitions[0]
    assert (lost.status, lost.reason, lost.committed) == (Status.ERR, Reason.COMMIT_LOST, 90)
    tracker.push(snap(2, [GroupOffsets("g", "EMPTY", {})], ends))
    assert status_of(tracker, "g").status.status is Status.ERR  # the loss stays visible for the window
    tracker.push(snap(3, [GroupOffsets("g", "EMPTY", {})], ends))
    assert [r.group for r in tracker.evaluate()] == []  # a whole window without a commit: dropped


def test_a_group_no_longer_listed_and_a_deleted_topic_are_dropped():
    tracker = OffsetTracker("central")
    ends = {("t", 0): 10, ("u", 0): 10}
    tracker.push(snap(0, [GroupOffsets("g", "STABLE", {("t", 0): 5, ("u", 0): 5}),
                          GroupOffsets("h", "STABLE", {("t", 0): 5})], ends))
    tracker.push(snap(1, [GroupOffsets("g", "STABLE", {("t", 0): 6})], {("t", 0): 10}, partitions=[("t", 0)]))
    reports = tracker.evaluate()
    assert [r.group for r in reports] == ["g"]
    assert [(p.topic, p.partition) for p in reports[0].status.partitions] == [("t", 0)]


def test_a_failed_offset_fetch_adds_no_sample_and_keeps_the_error():
    tracker = OffsetTracker("central")
    ends = {("t", 0): 10}
    tracker.push(snap(0, [GroupOffsets("g", "STABLE", {("t", 0): 5})], ends))
    tracker.push(snap(1, [GroupOffsets("g", "STABLE", None, "COORDINATOR_LOAD_IN_PROGRESS")], ends))
    report = status_of(tracker, "g", now=T0 + 5_000)
    assert report.error == "COORDINATOR_LOAD_IN_PROGRESS"
    assert report.status.partitions[0].committed == 5 and len(report.history) == 1


def test_a_partition_without_an_end_offset_gets_no_sample():
    tracker = OffsetTracker("central")
    tracker.push(snap(0, [GroupOffsets("g", "STABLE", {("t", 0): 5, ("t", 1): 5})], {("t", 0): 9, ("t", 1): 9}))
    tracker.push(snap(1, [GroupOffsets("g", "STABLE", {("t", 0): 6, ("t", 1): 6})], {("t", 0): 9},
                      partitions=[("t", 0), ("t", 1)]))
    windows = tracker.groups["g"].windows
    assert (len(windows[("t", 0)]), len(windows[("t", 1)])) == (2, 1)


def test_excluded_groups_and_groups_without_commits_are_not_reported():
    tracker = OffsetTracker("central", exclude_groups=["test-read-.*"])
    ends = {("t", 0): 10}
    tracker.push(snap(0, [GroupOffsets("test-read-1a2b", "STABLE", {("t", 0): 1}),
                          GroupOffsets("fresh", "STABLE", {}), GroupOffsets("g", "STABLE", {("t", 0): 10})], ends))
    assert [r.group for r in tracker.evaluate()] == ["g"]


def test_windows_evaluate_with_burrow_rules_and_rewinds_become_findings():
    tracker = OffsetTracker("central", window=5)
    for i, (committed, end) in enumerate([(100, 110), (200, 210), (300, 310), (150, 320)]):
        tracker.push(snap(i, [GroupOffsets("g", "STABLE", {("t", 0): committed})], {("t", 0): end}))
    report = status_of(tracker, "g")
    assert report.status.status is Status.REWIND
    (finding,) = report.findings.offsets
    assert (finding.from_offset, finding.to_offset, finding.records) == (300, 150, 150)


def test_groups_named_for_a_scheduled_reader_are_judged_against_its_schedule_the_others_as_streams():
    tracker = OffsetTracker("central", window=5)
    for i in range(6):  # every 5 s: the offsets stand still, the ends grow
        ends = {("t", 0): 100 + 10 * i}
        tracker.push(snap(i, [GroupOffsets("conveyor.lake.t", "EMPTY", {("t", 0): 50}),
                              GroupOffsets("mailer", "STABLE", {("t", 0): 50})], ends))
    reports = {r.group: r.status for r in tracker.evaluate(T0 + 40_000, schedules={"conveyor.lake.": 600_000})}
    assert (reports["conveyor.lake.t"].status, reports["conveyor.lake.t"].partitions[0].reason) == (
        Status.OK, Reason.BETWEEN_RUNS)
    assert reports["mailer"].status is Status.STOP
    missed = {r.group: r.status for r in tracker.evaluate(T0 + 40_000, schedules={"conveyor.lake.": 15_000})}
    assert missed["conveyor.lake.t"].partitions[0].reason is Reason.RUNS_MISSED
