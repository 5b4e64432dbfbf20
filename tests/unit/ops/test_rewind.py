"""Rewind, reset, loss and read-amplification findings, from tables of cases."""

from __future__ import annotations

import math

import pytest

from conveyor.config.policies import RewindPolicy
from conveyor.ops.lag import NO_OFFSET, PartitionWindow
from conveyor.ops.rewind import (
    AmplificationCause,
    FindingKind,
    OffsetFinding,
    Traffic,
    amplification,
    amplification_cause,
    find_read_amplification,
    is_at_end,
    is_reset_to_earliest,
    is_skip,
    offset_findings,
    reset_slack,
    scan_group,
    topic_amplification,
    window_traffic,
)

T0 = 1_700_000_000_000
POLICY = RewindPolicy()


def ms(seconds: float) -> int:
    return T0 + int(seconds * 1000)


def window(rows: list[tuple], topic: str = "t", partition: int = 0) -> PartitionWindow:
    """rows: (second, committed, end[, log_start]); None commits allowed."""
    w = PartitionWindow(topic, partition)
    for second, committed, end, *rest in rows:
        w.add(ms(second), committed, end, None, rest[0] if rest else None)
    return w


def steady(start: int, step: int, count: int = 5, lag: int = 50, first_second: int = 0) -> list[tuple]:
    """A healthy consumer: ``step`` records per 10 s, ``lag`` behind a 0-based log."""
    return [(first_second + 10 * i, start + step * i, start + step * i + lag, 0) for i in range(count)]


# --- Rules over plain numbers ---

@pytest.mark.parametrize("moved, policy, expected", [
    pytest.param(10_000, POLICY, 100.0, id="ratio-of-distance"),
    pytest.param(10, RewindPolicy(reset_slack_records=50), 50, id="records-floor"),
])
def test_reset_slack(moved, policy, expected):
    assert reset_slack(moved, policy) == expected


@pytest.mark.parametrize("to_offset, log_start, moved, expected", [
    pytest.param(0, 0, 5000, True, id="exactly-at-log-start"),
    pytest.param(40, 0, 5000, True, id="read-on-a-little-after-reset"),
    pytest.param(60, 0, 5000, False, id="too-far-from-log-start"),
    pytest.param(100, 300, 5000, True, id="log-start-moved-past-it"),
    pytest.param(0, NO_OFFSET, 5000, False, id="unknown-log-start"),
])
def test_is_reset_to_earliest(to_offset, log_start, moved, expected):
    assert is_reset_to_earliest(to_offset, log_start, moved, POLICY) is expected


@pytest.mark.parametrize("to_offset, end, moved, expected", [
    pytest.param(9000, 9000, 8000, True, id="at-end"),
    pytest.param(8950, 9000, 8000, True, id="within-slack"),
    pytest.param(8000, 9000, 8000, False, id="still-lagging"),
])
def test_is_at_end(to_offset, end, moved, expected):
    assert is_at_end(to_offset, end, moved, POLICY) is expected


@pytest.mark.parametrize("backlog, rate, usual, lost, out_of_range, expected", [
    pytest.param(5, 1.0, None, True, False, True, id="after-lost-commit-any-backlog"),
    pytest.param(5, 1.0, None, False, True, True, id="after-out-of-range-any-backlog"),
    pytest.param(0, 1.0, None, True, False, False, id="nothing-to-skip"),
    pytest.param(50_000, 5.0, 0.01, False, False, True, id="much-faster-than-usual"),
    pytest.param(50_000, 5.0, 1.0, False, False, False, id="only-5x-faster"),
    pytest.param(500, 5.0, 0.01, False, False, False, id="backlog-below-min-skip"),
    pytest.param(50_000, 5.0, None, False, False, False, id="no-pace-to-compare"),
])
def test_is_skip(backlog, rate, usual, lost, out_of_range, expected):
    assert is_skip(backlog, rate, usual, lost, out_of_range, POLICY) is expected


@pytest.mark.parametrize("read, written, expected", [
    pytest.param(400.0, 100.0, 4.0, id="4x"),
    pytest.param(50.0, 0.0, math.inf, id="nothing-written"),
    pytest.param(0.0, 0.0, 0.0, id="idle"),
])
def test_amplification(read, written, expected):
    assert amplification(read, written) == expected


@pytest.mark.parametrize("reread, drained, expected", [
    pytest.param(900, 100, AmplificationCause.REREAD, id="mostly-reread"),
    pytest.param(100, 900, AmplificationCause.BACKLOG, id="mostly-backlog"),
    pytest.param(0, 0, AmplificationCause.BACKLOG, id="no-reread-at-all"),
])
def test_amplification_cause(reread, drained, expected):
    assert amplification_cause(reread, drained) is expected


# --- Offset findings from windows ---

F = FindingKind
OFFSET_CASES = {
    "healthy-consumer": (steady(1000, 100), []),
    "caught-up-consumer-is-not-a-skip": ([(10 * i, 100 * i, 100 * i, 0) for i in range(8)], []),
    "rewind": (
        [(10, 1000, 1100, 0), (20, 1500, 1600, 0), (30, 800, 1700, 0)],
        [(F.REWIND, ms(30), 1500, 800, 700, False)]),
    "rewind-unknown-log-start": (
        [(10, 5000, 5000), (20, 0, 5100)],
        [(F.REWIND, ms(20), 5000, 0, 5000, False)]),
    "reset-to-earliest": (
        [(10, 5000, 5000, 0), (20, 6000, 6000, 0), (30, 20, 6100, 0)],
        [(F.RESET_EARLIEST, ms(30), 6000, 20, 5980, False)]),
    "reset-to-earliest-after-lost-commit": (
        [(10, 6000, 6000, 300), (20, None, 6100, 300), (30, 300, 6200, 300)],
        [(F.RESET_EARLIEST, ms(30), 6000, 300, 5700, True)]),
    "two-rewinds-in-order": (
        [(10, 1000, 2000, 0), (20, 900, 2000, 0), (30, 1500, 2000, 0), (40, 1200, 2000, 0)],
        [(F.REWIND, ms(20), 1000, 900, 100, False), (F.REWIND, ms(40), 1500, 1200, 300, False)]),
    "reset-to-latest-after-lost-commit": (
        [(10, 1000, 5000, 0), (20, None, 7000, 0), (30, 9000, 9000, 0)],
        [(F.RESET_LATEST, ms(30), 1000, 9000, 8000, True)]),
    "reset-to-latest-after-falling-behind-log-start": (
        [(10, 100, 5000, 0), (20, 100, 5000, 500), (30, 5000, 5000, 500)],
        [(F.BEHIND_LOG_START, ms(20), 100, 500, 400, False), (F.RESET_LATEST, ms(30), 100, 5000, 4900, False)]),
    "reset-to-latest-by-pace": (
        steady(1000, 100, lag=50_000) + [(50, 60_000, 60_000, 0)],
        [(F.RESET_LATEST, ms(50), 1400, 60_000, 58_600, False)]),
    "burst-at-tail-is-not-a-skip": (steady(1000, 100, lag=0) + [(50, 60_000, 60_000, 0)], []),
    "big-catch-up-without-pace-is-not-a-skip": (
        [(10, 1000, 60_000, 0), (20, 1000, 60_000, 0), (30, 60_000, 60_000, 0)], []),
    "small-jump-is-not-a-skip": (steady(1000, 10) + [(50, 1600, 1600, 0)], []),
    "behind-log-start-reported-once": (
        [(10, 100, 900, 200), (20, 150, 950, 300)],
        [(F.BEHIND_LOG_START, ms(10), 100, 200, 100, False)]),
    "single-sample": ([(10, 5, 10, 0)], []),
    "no-commits": ([(10, None, 10, 0), (20, None, 20, 0)], []),
}


@pytest.mark.parametrize("rows, expected", [pytest.param(*c, id=name) for name, c in OFFSET_CASES.items()])
def test_offset_findings(rows, expected):
    found = offset_findings("g", window(rows))
    assert [(f.kind, f.at_ms, f.from_offset, f.to_offset, f.records, f.after_lost_commit) for f in found] == expected


def test_every_finding_kind_is_covered_by_the_table():
    kinds = {row[0] for _, expected in OFFSET_CASES.values() for row in expected}
    assert kinds == set(FindingKind)


@pytest.mark.parametrize("kind, loses, says", [
    pytest.param(F.REWIND, False, "moved back 700 records (1,500 -> 800)", id="rewind"),
    pytest.param(F.RESET_EARLIEST, False, "reset to the earliest offset", id="earliest"),
    pytest.param(F.RESET_LATEST, True, "up to 700 records were skipped", id="latest"),
    pytest.param(F.BEHIND_LOG_START, True, "retention deleted 700 records", id="behind-log-start"),
])
def test_finding_messages_say_what_and_where_to_look(kind, loses, says):
    finding = OffsetFinding(kind, "billing", "clicks", 3, ms(0), 1500, 800, 700)
    assert finding.loses_data is loses
    assert finding.message.startswith("group billing on clicks[3] at 2023-11-14 22:13:20 UTC: ")
    assert says in finding.message
    lost = OffsetFinding(kind, "billing", "clicks", 3, ms(0), 1500, 800, 700, after_lost_commit=True)
    assert "offset fetches answered none" in lost.message


def test_group_offset_findings_cover_every_partition():
    windows = [window(steady(0, 100), partition=0),
               window([(10, 5000, 5000), (20, 4000, 5000)], partition=1),
               window([(10, 7000, 7000), (20, 1, 7100)], topic="u", partition=2)]
    found = scan_group("g", windows).offsets
    assert [(f.topic, f.partition, f.kind) for f in found] == [("t", 1, F.REWIND), ("u", 2, F.REWIND)]


# --- Read amplification ---

# read = written + drained + reread unless records were skipped: what the group read beyond the
# writes either shrank its lag or was read a second time.
@pytest.mark.parametrize("rows, expected", [
    pytest.param(steady(1000, 100, count=3), Traffic(200, 200, 0, 0, 20_000), id="keeping-pace"),
    pytest.param([(0, 0, 100), (10, 100, 100), (20, 0, 110), (30, 100, 120)], Traffic(200, 20, 100, 80, 30_000),
                 id="rewound-and-read-again"),
    pytest.param([(0, 0, 5000), (10, 2000, 5100), (20, 4000, 5200)], Traffic(4000, 200, 0, 3800, 20_000),
                 id="draining-backlog"),
    pytest.param([(0, 0, 100), (10, None, 150), (20, 100, 200)], Traffic(100, 100, 0, 0, 20_000),
                 id="across-a-lost-commit"),
    pytest.param(steady(1000, 100, lag=50_000) + [(50, 60_000, 60_000, 0)], Traffic(400, 9_000, 0, 50_000, 50_000),
                 id="skip-is-not-reading"),
    pytest.param([(0, 5, 10)], None, id="single-sample"),
])
def test_window_traffic(rows, expected):
    w = window(rows)
    assert window_traffic(w, offset_findings("g", w)) == expected


def test_window_traffic_without_findings_counts_a_skip_as_read():
    traffic = window_traffic(window(steady(1000, 100, lag=50_000) + [(50, 60_000, 60_000, 0)]))
    assert traffic is not None and traffic.read == 59_000


@pytest.mark.parametrize("read, written, policy, found", [
    pytest.param(400.0, 100.0, POLICY, True, id="4x-incident"),
    pytest.param(250.0, 100.0, POLICY, False, id="2.5x-below-threshold"),
    pytest.param(250.0, 100.0, RewindPolicy(amplification_threshold=2.0), True, id="configurable-threshold"),
    pytest.param(50.0, 0.0, POLICY, True, id="nothing-written"),
    pytest.param(0.5, 0.0, POLICY, False, id="read-too-small-to-matter"),
    pytest.param(0.0, 0.0, POLICY, False, id="idle"),
])
def test_find_read_amplification_from_rates(read, written, policy, found):
    result = find_read_amplification("g", "clicks", read, written, "bytes", policy)
    assert (result is not None) is found
    if result is not None:
        assert (result.cause, result.unit, result.reread) == (AmplificationCause.UNKNOWN, "bytes", None)
        assert "rewind findings" in result.message


def test_rate_finding_messages():
    four = find_read_amplification("g", "clicks", 400.0, 100.0)
    assert four is not None and four.message.startswith(
        "group g reads clicks 4.0x as fast as it is written (400.0 records/s read vs 100.0 written)")
    idle = find_read_amplification("g", "clicks", 50.0, 0.0)
    assert idle is not None and "(50.0 records/s read) while nothing is written to it" in idle.message


def rereading(partition: int, topic: str = "t") -> PartitionWindow:
    """The incident: offsets keep getting lost, so the group reads the same 1,000 records over and over."""
    rows = [(10 * i, 1000 * (i % 2), 1000 + 10 * i, 0) for i in range(10)]
    return window(rows, topic=topic, partition=partition)


def test_read_amplification_from_windows_finds_rereading():
    found = scan_group("batch", [rereading(0), rereading(1), window(steady(0, 100), "u", 0)]).amplification
    assert len(found) == 1
    f = found[0]
    assert (f.topic, f.cause, f.unit) == ("t", AmplificationCause.REREAD, "records")
    assert f.ratio > 50 and f.reread == 2 * 4000
    assert f.read_per_s == pytest.approx(2 * 5000 / 90) and f.written_per_s == pytest.approx(2 * 90 / 90)
    assert "one offsets folder shared by several jobs caused the 4x read incident" in f.message


def test_read_amplification_from_windows_tells_backlog_apart():
    found = scan_group("late", [window([(0, 0, 5000), (10, 2000, 5100), (20, 4000, 5200)])]).amplification
    assert [(f.cause, f.drained) for f in found] == [(AmplificationCause.BACKLOG, 3800)]
    assert "draining a backlog (3,800 records in the window)" in found[0].message


def test_no_read_amplification_for_a_consumer_keeping_pace():
    assert scan_group("g", [window(steady(0, 100)), window([(0, 1, 1)])]).amplification == ()


def test_topic_amplification_sums_partition_rates():
    traffics = [Traffic(read=4000, written=1000, reread=3000, drained=0, span_ms=10_000)] * 2
    found = topic_amplification("g", "t", traffics)
    assert found is not None
    assert (found.read_per_s, found.written_per_s, found.ratio, found.reread) == (800.0, 200.0, 4.0, 6000)
    assert found.cause is AmplificationCause.REREAD
    assert topic_amplification("g", "t", [Traffic(1000, 1000, 0, 0, 10_000)]) is None


@pytest.mark.parametrize("kwargs", [
    pytest.param({"reset_slack_ratio": 1.0}, id="slack-ratio"),
    pytest.param({"reset_slack_records": -1}, id="slack-records"),
    pytest.param({"amplification_threshold": 1.0}, id="threshold"),
    pytest.param({"skip_rate_factor": 0.5}, id="skip-factor"),
])
def test_policy_refuses_nonsense(kwargs):
    with pytest.raises(ValueError):
        RewindPolicy(**kwargs)
