"""Lag rules and evaluation, from tables of cases (the shape of Burrow's caching_test.go).

Times in the tables are seconds from T0; offsets are plain ints. Burrow's own cases are
translated to sampling: a Burrow commit with lag L becomes a sample with end = committed + L.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from conveyor.ops.lag import (
    NO_OFFSET,
    LagPolicy,
    LagTimeMethod,
    PartitionWindow,
    Reason,
    Sample,
    Status,
    commit_span,
    current_run,
    evaluate_group,
    evaluate_partition,
    first_backward,
    lag_always_nonzero,
    lag_not_decreasing,
    offsets_rewind,
    offsets_stalled,
    offsets_stopped,
    recent_lag_zero,
    seconds_behind,
)

T0 = 1_700_000_000_000


def ms(seconds: float) -> int:
    return T0 + int(seconds * 1000)


def window(rows: list[tuple], size: int = 10, topic: str = "t", partition: int = 0) -> PartitionWindow:
    """rows: (second, committed, end[, commit_second[, log_start]]); None commits allowed."""
    w = PartitionWindow(topic, partition, size)
    for row in rows:
        second, committed, end, *rest = row
        commit_s = rest[0] if rest else None
        log_start = rest[1] if len(rest) > 1 else None
        w.add(ms(second), committed, end, None if commit_s is None else ms(commit_s), log_start)
    return w


def burrow(commits: list[int], lags: list[int], times: list[int], commit_times: bool = False) -> list[tuple]:
    return [(t, c, c + lag, t if commit_times else None) for c, lag, t in zip(commits, lags, times)]


STEPS = [100, 200, 300, 400, 500]


# --- Each rule on its own ---

@pytest.mark.parametrize("lags, expected", [
    pytest.param([0, 50, 100], False, id="zero-at-start"),
    pytest.param([50, 0, 150], False, id="zero-in-middle"),
    pytest.param([50, 100, 150], True, id="always-lagging"),
    pytest.param([-5, 10], False, id="negative-counts-as-caught-up"),
    pytest.param([7], True, id="single-sample"),
])
def test_lag_always_nonzero(lags, expected):
    assert lag_always_nonzero(lags) is expected


@pytest.mark.parametrize("committed, expected", [
    pytest.param([1000, 2000, 3000], False, id="advancing"),
    pytest.param([1000, 1000, 1000], False, id="flat"),
    pytest.param([1000, 2000, 1999, 3000], True, id="one-back-by-one"),
    pytest.param([5], False, id="single"),
    pytest.param([], False, id="empty"),
])
def test_offsets_rewind(committed, expected):
    assert offsets_rewind(committed) is expected


@pytest.mark.parametrize("first, last, now, expected", [
    pytest.param(100, 500, 600, False, id="burrow-0-recent-commit"),
    pytest.param(100, 500, 900, False, id="burrow-1-equal-is-not-greater"),
    pytest.param(100, 500, 1000, True, id="burrow-2-longer-than-span"),
    pytest.param(100, 100, 100, False, id="just-committed-single"),
    pytest.param(100, 100, 101, True, id="no-span-at-all"),
])
def test_offsets_stopped(first, last, now, expected):
    assert offsets_stopped(first, last, now) is expected


@pytest.mark.parametrize("committed, expected", [
    pytest.param([1000, 1000, 1000], True, id="flat"),
    pytest.param([1000, 1000, 1001], False, id="moved-at-end"),
    pytest.param([1000], False, id="single-sample-says-nothing"),
])
def test_offsets_stalled(committed, expected):
    assert offsets_stalled(committed) is expected


@pytest.mark.parametrize("lags, expected", [
    pytest.param([100, 150, 200], True, id="growing"),
    pytest.param([100, 100, 100], True, id="flat"),
    pytest.param([100, 150, 120, 200], False, id="dipped-once"),
    pytest.param([300, 200, 100], False, id="shrinking"),
    pytest.param([100], False, id="single-sample-says-nothing"),
])
def test_lag_not_decreasing(lags, expected):
    assert lag_not_decreasing(lags) is expected


@pytest.mark.parametrize("committed, ends, expected", [
    pytest.param(1000, [1000, 1050], True, id="caught-up-then-new-data"),
    pytest.param(1000, [990, 1050], True, id="end-below-commit"),
    pytest.param(1000, [1001, 1050], False, id="never-caught-up"),
])
def test_recent_lag_zero(committed, ends, expected):
    assert recent_lag_zero(committed, ends) is expected


@pytest.mark.parametrize("committed, expected", [
    pytest.param([1, 2, 3], 2, id="moved-last"),
    pytest.param([1, 2, 2, 2], 1, id="trailing-run"),
    pytest.param([2, 2, 2], 0, id="whole-window"),
    pytest.param([2], 0, id="single"),
])
def test_current_run(committed, expected):
    assert current_run(committed) == expected


@pytest.mark.parametrize("at, commit_ms, run, expected", [
    pytest.param([10, 20, 30], [NO_OFFSET] * 3, 1, (10, 20), id="inferred-from-samples"),
    pytest.param([10, 20, 30], [5, 15, 25], 2, (5, 25), id="commit-timestamps-win"),
    pytest.param([10, 20, 30], [NO_OFFSET, 15, 25], 2, (10, 25), id="mixed"),
])
def test_commit_span(at, commit_ms, run, expected):
    assert commit_span(at, commit_ms, run) == expected


def test_first_backward_gives_the_time_of_the_first_drop():
    assert first_backward([10, 20, 30, 40], [5, 9, 3, 1]) == 30
    assert first_backward([10, 20], [5, 9]) is None


@pytest.mark.parametrize("committed, at, ends, now, expected", [
    pytest.param(200, [0, 10_000], [100, 200], 10_000, (0.0, LagTimeMethod.CAUGHT_UP), id="caught-up"),
    pytest.param(150, [0, 10_000, 20_000], [0, 100, 200], 20_000, (5.0, LagTimeMethod.INTERPOLATED),
                 id="interpolated-between-samples"),
    pytest.param(100, [0, 10_000, 20_000], [0, 100, 200], 20_000, (10.0, LagTimeMethod.INTERPOLATED),
                 id="end-equal-to-commit"),
    pytest.param(100, [0, 10_000, 20_000], [0, 100, 200], 25_000, (15.0, LagTimeMethod.INTERPOLATED),
                 id="now-after-last-sample"),
    pytest.param(500, [0, 10_000], [1000, 2000], 10_000, (15.0, LagTimeMethod.EXTRAPOLATED),
                 id="older-than-window-uses-produce-rate"),
    pytest.param(500, [0, 10_000], [1000, 1000], 10_000, (10.0, LagTimeMethod.AT_LEAST),
                 id="no-production-gives-lower-bound"),
    pytest.param(500, [0], [1000], 0, (None, LagTimeMethod.UNKNOWN), id="single-sample-no-rate"),
])
def test_seconds_behind(committed, at, ends, now, expected):
    assert seconds_behind(committed, at, ends, now) == expected


# --- Partition status from whole windows ---

@dataclass
class Case:
    rows: list[tuple]
    status: Status
    reason: Reason
    now: float | None = None
    policy: LagPolicy = field(default_factory=LagPolicy)
    size: int = 10
    #: A phrase the human message must contain.
    says: str = ""


CASES = {
    # Burrow's table, translated.
    "burrow-0-zero-lag-once-is-ok": Case(
        burrow([1000, 2000, 3000, 4000, 5000], [0, 50, 100, 150, 200], STEPS), Status.OK, Reason.PROGRESSING,
        now=600, says="shrinking or caught up"),
    "burrow-1-stop-needs-strictly-longer": Case(
        burrow([1000, 2000, 3000, 4000, 5000], [0, 50, 100, 150, 200], STEPS), Status.OK, Reason.PROGRESSING,
        now=900),
    "burrow-2-stop-even-with-zero-lag-earlier": Case(
        burrow([1000, 2000, 3000, 4000, 5000], [0, 50, 100, 150, 200], STEPS), Status.STOP, Reason.COMMITS_STOPPED,
        now=1000, says="no new committed offset for 500.0 s"),
    "burrow-3-stop-always-lagging": Case(
        burrow([1000, 2000, 3000, 4000, 5000], [50, 100, 150, 200, 250], STEPS), Status.STOP,
        Reason.COMMITS_STOPPED, now=1000),
    "burrow-4-same-offset-zero-lag-once-is-ok": Case(
        burrow([1000] * 5, [0, 50, 100, 150, 200], STEPS, commit_times=True), Status.OK, Reason.PROGRESSING, now=600),
    "burrow-5-stall": Case(
        burrow([1000] * 5, [100, 150, 200, 250, 300], STEPS, commit_times=True), Status.STALL,
        Reason.OFFSET_NOT_MOVING, now=600, says="keeps committing offset 1,000"),
    "burrow-6-stall-flat-lag": Case(
        burrow([1000] * 5, [100] * 5, STEPS, commit_times=True), Status.STALL, Reason.OFFSET_NOT_MOVING, now=600),
    "burrow-7-rewind": Case(
        burrow([1000, 2000, 3000, 2000, 4000], [100, 150, 200, 1250, 300], STEPS), Status.REWIND,
        Reason.OFFSET_WENT_BACK, now=600, says="went backwards 200.0 s ago"),
    "burrow-8-no-current-lag-is-ok": Case(
        burrow([1000, 2000, 3000, 4000, 5000], [50, 100, 150, 200, 0], STEPS), Status.OK, Reason.CAUGHT_UP,
        now=1000, says="caught up"),
    "burrow-9-stop-although-lag-was-zero": Case(
        [(s, 100 + s, 100 + s, s) for s in range(9)] + [(9, 109, 1040, 9)], Status.STOP, Reason.COMMITS_STOPPED,
        now=30),
    "burrow-10-recently-caught-up-is-not-stop": Case(
        [(s, 100 + s, 100 + s, s) for s in range(8)] + [(8, 107, 107, 7), (9, 107, 108, 7)], Status.OK,
        Reason.PROGRESSING, now=30, says="lag 1 record,"),
    "burrow-11-missing-commits-at-start": Case(
        [(50, None, 900), (80, None, 950)] + burrow([1000, 2000, 3000], [0, 50, 100], [100, 200, 300]),
        Status.OK, Reason.PROGRESSING),
    # Burrow's WARN and friends.
    "lag-growing-while-moving": Case(
        burrow([1000, 2000, 3000, 4000], [100, 150, 200, 250], STEPS[:4]), Status.WARN, Reason.LAG_NOT_DECREASING,
        says="not shrinking"),
    "lag-flat-while-moving": Case(
        burrow([1000, 2000, 3000, 4000], [100] * 4, STEPS[:4]), Status.WARN, Reason.LAG_NOT_DECREASING),
    "lag-dipped-once-is-ok": Case(
        burrow([1000, 2000, 3000, 4000], [100, 150, 120, 200], STEPS[:4]), Status.OK, Reason.PROGRESSING),
    "lag-shrinking": Case(
        burrow([1000, 2000, 3000], [500, 400, 300], STEPS[:3]), Status.OK, Reason.PROGRESSING),
    "caught-up": Case([(s, 10 * s, 10 * s) for s in range(10)], Status.OK, Reason.CAUGHT_UP),
    # Without commit timestamps a flat offset cannot be told from a stopped consumer.
    "same-offset-without-commit-times-is-stop": Case(
        burrow([1000] * 5, [100, 150, 200, 250, 300], STEPS), Status.STOP, Reason.COMMITS_STOPPED),
    "commit-timestamps-not-advancing-is-stop": Case(
        [(s, 1000, 1100 + s, 5) for s in (100, 200, 300)], Status.STOP, Reason.COMMITS_STOPPED),
    # Beyond Burrow: rewinds are never hidden behind an earlier zero lag.
    "rewind-after-caught-up": Case(
        [(10, 1000, 1000), (20, 1000, 1000), (30, 500, 1000)], Status.REWIND, Reason.OFFSET_WENT_BACK),
    "rewind-caught-up-again": Case(
        [(10, 1000, 1000), (20, 500, 1000), (30, 1000, 1000)], Status.REWIND, Reason.OFFSET_WENT_BACK),
    "rewind-slides-out-of-window": Case(
        [(10, 1000, 1000), (20, 500, 1000), (30, 1000, 1000), (40, 1100, 1100)], Status.OK, Reason.CAUGHT_UP, size=2),
    # Missing or impossible data.
    "empty-window": Case([], Status.ERR, Reason.NO_SAMPLES, says="no samples"),
    "stale-samples": Case(
        [(10, 100, 100), (20, 110, 110)], Status.ERR, Reason.STALE_SAMPLES, now=200,
        policy=LagPolicy(max_sample_age_ms=60_000), says="180.0 s old"),
    "fresh-samples-with-age-limit": Case(
        [(10, 100, 100), (20, 110, 110)], Status.OK, Reason.CAUGHT_UP, now=50,
        policy=LagPolicy(max_sample_age_ms=60_000)),
    "no-commit-with-records": Case(
        [(10, None, 500), (20, None, 600)], Status.ERR, Reason.NO_COMMIT, says="auto.offset.reset"),
    "no-commit-empty-partition": Case([(10, None, 0), (20, None, 0)], Status.OK, Reason.EMPTY_PARTITION),
    "no-commit-everything-expired": Case(
        [(10, None, 700, None, 700)], Status.OK, Reason.EMPTY_PARTITION),
    "commit-lost-latest": Case(
        [(10, 1000, 1000), (20, 2000, 2000), (30, None, 2500)], Status.ERR, Reason.COMMIT_LOST,
        says="(last 2,000) disappeared 0.0 s ago"),
    "commit-lost-in-between": Case(
        [(10, 1000, 1000), (20, None, 1500), (30, 0, 2000)], Status.ERR, Reason.COMMIT_LOST,
        says="(last 1,000) disappeared 10.0 s ago"),
    "beyond-end": Case(
        [(10, 1000, 1000), (20, 1200, 900)], Status.ERR, Reason.BEYOND_END, says="truncated"),
    "behind-log-start": Case(
        [(10, 100, 1000, None, 0), (20, 100, 1100, None, 300)], Status.ERR, Reason.BEHIND_LOG_START,
        says="retention deleted"),
    # Few samples.
    "single-sample-with-lag": Case([(10, 100, 500)], Status.OK, Reason.FEW_SAMPLES, says="too few samples"),
    "single-sample-caught-up": Case([(10, 500, 500)], Status.OK, Reason.CAUGHT_UP),
    "two-samples-below-min-samples": Case(
        [(10, 100, 200), (20, 150, 300)], Status.OK, Reason.FEW_SAMPLES, policy=LagPolicy(min_samples=3)),
    # Thresholds turn OK into WARN, never hide anything worse.
    "records-threshold": Case(
        burrow([1000, 2000, 3000], [5000, 4000, 3000], STEPS[:3]), Status.WARN, Reason.LAG_OVER_RECORDS,
        policy=LagPolicy(max_lag_records=2000), says="above the records threshold"),
    "records-threshold-not-reached": Case(
        burrow([1000, 2000, 3000], [5000, 4000, 3000], STEPS[:3]), Status.OK, Reason.PROGRESSING,
        policy=LagPolicy(max_lag_records=3000)),
    "seconds-threshold": Case(
        [(0, 0, 2000), (100, 1000, 2500), (200, 2000, 3000)], Status.WARN, Reason.LAG_OVER_SECONDS,
        policy=LagPolicy(max_lag_seconds=60), says="about 200.0 s behind"),
    "seconds-threshold-not-reached": Case(
        [(0, 0, 2000), (100, 1000, 2500), (200, 2000, 3000)], Status.OK, Reason.PROGRESSING,
        policy=LagPolicy(max_lag_seconds=200)),
    "threshold-on-single-sample": Case(
        [(10, 100, 5000)], Status.WARN, Reason.LAG_OVER_RECORDS, policy=LagPolicy(max_lag_records=100)),
    # A reader on a schedule (the lake): its offset stands still between runs.
    "scheduled-between-runs": Case(
        [(0, 1000, 1500), (30, 1000, 1800), (60, 1000, 2100), (90, 1000, 2400)], Status.OK, Reason.BETWEEN_RUNS,
        policy=LagPolicy(schedule_ms=60_000), says="read on a schedule"),
    "scheduled-runs-missed": Case(
        [(0, 1000, 1500), (30, 2000, 2100), (60, 2000, 2400), (90, 2000, 2700)], Status.STOP, Reason.RUNS_MISSED,
        policy=LagPolicy(schedule_ms=40_000), now=115, says="has not moved for 85.0 s"),
    "scheduled-held-longer-than-the-window": Case(
        [(0, 500, 600), (30, 1000, 1500), (60, 1000, 1800), (90, 1000, 2100), (120, 1000, 2400), (150, 1000, 2700)],
        Status.STOP, Reason.RUNS_MISSED, policy=LagPolicy(schedule_ms=50_000), size=3,
        says="has not moved for 120.0 s"),
    "scheduled-caught-up": Case(
        [(0, 1000, 1000), (100, 1000, 1000), (200, 1000, 1000)], Status.OK, Reason.CAUGHT_UP,
        policy=LagPolicy(schedule_ms=10_000)),
    "threshold-does-not-hide-stall": Case(
        burrow([1000] * 5, [100] * 5, STEPS, commit_times=True), Status.STALL, Reason.OFFSET_NOT_MOVING, now=600,
        policy=LagPolicy(max_lag_records=10)),
}


@pytest.mark.parametrize("case", [pytest.param(c, id=name) for name, c in CASES.items()])
def test_partition_status(case: Case):
    w = window(case.rows, size=case.size)
    result = evaluate_partition(w, case.policy, None if case.now is None else ms(case.now))
    assert (result.status, result.reason) == (case.status, case.reason), result.message
    assert result.message.startswith(f"t[0] {case.status.name}: ")
    assert case.says in result.message


def test_every_status_and_reason_is_covered_by_the_table():
    seen = {(c.status, c.reason) for c in CASES.values()}
    assert {s for s, _ in seen} == set(Status)
    assert {r for _, r in seen} == set(Reason)


def test_partition_status_carries_lag_and_time():
    rows = [(0, 0, 1000), (100, 500, 2000), (200, 1500, 3000)]
    result = evaluate_partition(window(rows))
    assert (result.committed, result.end, result.lag) == (1500, 3000, 1500)
    assert result.seconds_behind == pytest.approx(150.0)
    assert result.lag_time is LagTimeMethod.INTERPOLATED
    assert result.complete == 1.0


def test_partial_window_reports_completeness_and_lost_commit_keeps_last_offset():
    partial = evaluate_partition(window([(10, None, 900), (20, 1000, 1000)]))
    assert partial.complete == 0.5
    lost = evaluate_partition(window([(10, 1000, 1000), (20, None, 1000)]))
    assert (lost.committed, lost.lag, lost.since_ms) == (1000, None, ms(20))


def test_now_before_the_latest_sample_is_refused():
    with pytest.raises(ValueError, match="before the latest sample"):
        evaluate_partition(window([(10, 1, 1)]), now_ms=ms(5))


# --- Group status ---

def test_severity_order_is_explicit():
    assert sorted(Status) == [Status.OK, Status.WARN, Status.STALL, Status.STOP, Status.REWIND, Status.ERR]


def test_group_takes_the_worst_partition_and_sums_lag():
    windows = [
        window([(10, 100, 100), (20, 200, 200)], partition=0),                      # OK, lag 0
        window(burrow([1000, 2000, 3000], [100, 150, 200], STEPS[:3]), partition=1),  # WARN, lag 200
        window([(100, 1000, 1500, 100), (200, 1000, 1600, 200)], partition=2),        # STALL, lag 600
        window([(100, None, 50), (200, 10, 60)], partition=3),                        # OK partial, lag 50
    ]
    group = evaluate_group("g", windows, now_ms=ms(300))
    assert group.status is Status.STALL
    assert group.total_lag == 850
    assert group.max_lag is not None and group.max_lag.partition == 2
    assert group.complete == 0.75
    assert [p.partition for p in group.problems] == [2, 1]
    assert "2 of 4 partitions need a look, worst: t[2] STALL" in group.message


def test_group_with_an_error_partition_is_err():
    group = evaluate_group("g", [window([(10, 5, 5)]), window([(10, 9, 5)], partition=1)])
    assert group.status is Status.ERR
    assert group.problems[0].reason is Reason.BEYOND_END


def test_group_all_ok_message_has_no_problems():
    group = evaluate_group("g", [window([(10, 5, 5)])])
    assert (group.status, group.problems, group.message) == (Status.OK, (), "group g OK: total lag 0 records")


def test_group_without_partitions_is_err():
    group = evaluate_group("g", [])
    assert (group.status, group.max_lag, group.partitions) == (Status.ERR, None, ())
    assert "no partitions tracked" in group.message


# --- The window ---

def test_window_keeps_the_newest_samples_in_order():
    w = window([(s, s, s + 1) for s in range(15)], size=10)
    assert len(w) == 10
    assert [s.at_ms for s in w.samples()] == [ms(s) for s in range(5, 15)]
    assert list(w.columns().committed) == list(range(5, 15))


def test_window_round_trips_samples_with_missing_values():
    samples = [Sample(ms(1), None, 10), Sample(ms(2), 7, 12, ms(1.5), 3)]
    w = PartitionWindow.of("t", 4, samples)
    assert w.samples() == samples
    assert list(w.columns().commit_ms) == [NO_OFFSET, ms(1.5)]


@pytest.mark.parametrize("second, committed, end, match", [
    pytest.param(10, 1, 1, "not after the last one", id="same-time"),
    pytest.param(5, 1, 1, "not after the last one", id="older"),
    pytest.param(20, -3, 1, "committed must not be negative", id="negative-commit"),
    pytest.param(20, 1, -1, "end must not be negative", id="negative-end"),
])
def test_window_refuses_bad_samples(second, committed, end, match):
    w = window([(10, 1, 1)])
    with pytest.raises(ValueError, match=match):
        w.add(ms(second), committed, end)
    assert len(w) == 1


@pytest.mark.parametrize("kwargs, match", [
    pytest.param({"min_samples": 1}, "min_samples", id="min-samples"),
    pytest.param({"max_lag_records": -1}, "max_lag_records", id="negative-records"),
    pytest.param({"max_lag_seconds": -0.5}, "max_lag_seconds", id="negative-seconds"),
])
def test_policy_refuses_nonsense(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LagPolicy(**kwargs)


def test_window_size_must_be_positive():
    with pytest.raises(ValueError, match="window size"):
        PartitionWindow("t", 0, size=0)
