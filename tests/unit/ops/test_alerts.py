"""Alert rules from tables: severity and wording per lag status, offset finding and health rule."""

from __future__ import annotations

import pytest

from conveyor.ops.alerts import (
    Alert,
    group_alerts,
    health_alert,
    lag_alert,
    offset_alerts,
    sampling_alert,
    sort_alerts,
)
from conveyor.ops.health import HealthFinding, Rule, Severity
from conveyor.ops.lag import PartitionWindow, Sample, Status, evaluate_group
from conveyor.ops.rewind import FindingKind, OffsetFinding, scan_group
from conveyor.ops.tracker import GroupReport

T0 = 1_700_000_000_000
S = 10_000  # ms between samples


def report(rows_by_partition: dict[int, list[tuple]], group: str = "g", state: str = "STABLE") -> GroupReport:
    """rows: (committed, end[, commit_ms]) per sample, one sample every 10 s; a commit time tells a
    consumer that re-commits the same offset (STALL) from one that stopped committing (STOP)."""
    windows = [PartitionWindow.of("t", p, [Sample(T0 + i * S, row[0], row[1], row[2] if len(row) > 2 else None)
                                           for i, row in enumerate(rows)])
               for p, rows in rows_by_partition.items()]
    last = max(len(rows) for rows in rows_by_partition.values()) - 1
    return GroupReport("central", group, state, evaluate_group(group, windows, now_ms=T0 + last * S),
                       scan_group(group, windows), ())


STEADY = [(100, 100), (200, 200), (300, 300)]
SLOW = [(100, 150), (150, 260), (200, 380), (250, 500)]
STALLED = [(100, 150, T0 - 1000), (100, 160, T0 + S - 1000), (100, 170, T0 + 2 * S - 1000)]
STOPPED = [(100, 150), (200, 250), (200, 300), (200, 350), (200, 400), (200, 450)]
REWOUND = [(500, 520), (600, 620), (300, 700)]
BEYOND_END = [(100, 100), (200, 150)]


@pytest.mark.parametrize("rows, status, severity, rule", [
    pytest.param(SLOW, Status.WARN, Severity.WARNING, "lag_warn", id="warn"),
    pytest.param(STALLED, Status.STALL, Severity.WARNING, "lag_stall", id="stall"),
    pytest.param(STOPPED, Status.STOP, Severity.CRITICAL, "lag_stop", id="stop"),
    pytest.param(REWOUND, Status.REWIND, Severity.CRITICAL, "lag_rewind", id="rewind"),
    pytest.param(BEYOND_END, Status.ERR, Severity.CRITICAL, "lag_err", id="err"),
])
def test_lag_alert_per_status(rows, status, severity, rule):
    r = report({0: rows})
    assert r.status.status is status
    alert = lag_alert(r)
    assert (alert.severity, alert.rule, alert.cluster, alert.subject) == (severity, rule, "central", "g")
    assert alert.message.startswith("central: group g ") and "t[0]" in alert.message
    assert alert.look_at


def test_ok_group_raises_no_alert():
    assert lag_alert(report({0: STEADY})) is None
    assert group_alerts(report({0: STEADY})) == []


def test_stop_alert_says_when_commits_stopped_and_how_to_look():
    alert = lag_alert(report({0: STOPPED}, group="mailer", state="EMPTY"))
    assert alert.since_ms == T0 + 1 * S  # the first sample that showed the last commit
    assert "group state EMPTY" in alert.message and "--group mailer" in alert.look_at


def finding(kind: FindingKind, partition: int = 0, records: int = 100, at: int = 0, group: str = "g") -> OffsetFinding:
    return OffsetFinding(kind, group, "t", partition, T0 + at * S, 500, 400, records)


@pytest.mark.parametrize("kind, severity", [
    pytest.param(FindingKind.REWIND, Severity.WARNING, id="rewind-duplicates"),
    pytest.param(FindingKind.RESET_EARLIEST, Severity.WARNING, id="reset-earliest-duplicates"),
    pytest.param(FindingKind.RESET_LATEST, Severity.CRITICAL, id="reset-latest-loses"),
    pytest.param(FindingKind.BEHIND_LOG_START, Severity.CRITICAL, id="behind-log-start-loses"),
])
def test_offset_alert_severity(kind, severity):
    (alert,) = offset_alerts("central", [finding(kind)])
    assert (alert.severity, alert.rule, alert.subject) == (severity, f"offset_{kind.name.lower()}", "g")
    assert alert.message.startswith("central: group g on t[0]")


def test_offset_alerts_sum_partitions_per_group_and_kind():
    alerts = offset_alerts("central", [finding(FindingKind.REWIND, 2, 30, at=2), finding(FindingKind.REWIND, 1, 70, at=1),
                                       finding(FindingKind.RESET_LATEST, 0), finding(FindingKind.REWIND, 0, group="h")])
    assert [(a.subject, a.rule) for a in alerts] == [("g", "offset_reset_latest"), ("g", "offset_rewind"),
                                                     ("h", "offset_rewind")]
    rewind = alerts[1]
    assert "t[1]" in rewind.message.split("In all")[0]  # the earliest one in full
    assert "2 such moves on 2 partition(s), 100 records" in rewind.message
    assert rewind.since_ms == T0 + S


def test_a_rewind_raises_the_finding_alert_not_a_second_status_alert():
    alerts = group_alerts(report({0: REWOUND}))
    assert [a.rule for a in alerts] == ["offset_rewind"]
    assert "moved back 300 records (600 -> 300)" in alerts[0].message


def test_read_amplification_becomes_a_warning():
    rows = [(i * 1000, i * 1000 + 10) for i in range(5)]  # reads 1,000/interval, writes 1,000 too: not amplified
    assert not [a for a in group_alerts(report({0: rows})) if a.rule == "read_amplification"]
    reread = [(1000, 1100), (2000, 1110), (1000, 1120), (2000, 1130), (1000, 1140), (2000, 1150)]
    alerts = [a for a in group_alerts(report({0: reread})) if a.rule == "read_amplification"]
    assert alerts and alerts[0].severity is Severity.WARNING and "read again" in alerts[0].message


@pytest.mark.parametrize("rule, subject, value, limit, detail, words", [
    pytest.param(Rule.BROKER_DOWN, "central-broker-2", 0.0, None, "ConnectError: refused",
                 ["central-broker-2 on central does not answer", "ConnectError"], id="broker-down"),
    pytest.param(Rule.UNDER_REPLICATED, "central", 7.0, None, "", ["7 partition(s) on central have fewer"],
                 id="under-replicated"),
    pytest.param(Rule.UNDER_MIN_ISR, "central", 2.0, None, "", ["below min.insync.replicas", "NOT_ENOUGH_REPLICAS"],
                 id="under-min-isr"),
    pytest.param(Rule.OFFLINE, "central", 1.0, None, "", ["no leader"], id="offline"),
    pytest.param(Rule.NO_CONTROLLER, "central", 0.0, None, "", ["no active controller on central"],
                 id="no-controller"),
    pytest.param(Rule.ISR_SHRINKING, "central-broker-1", 0.25, None, "", ["shrinking on central-broker-1 (0.25/s)"],
                 id="isr-shrinking"),
    pytest.param(Rule.UNCLEAN_ELECTION, "central", 1.0, None, "", ["unclean leader election", "lost"],
                 id="unclean"),
    pytest.param(Rule.LEADER_CHANGES, "central", 12.0, None, "45", ["12 partition leader change(s)", "last 45 s"],
                 id="leader-changes"),
    pytest.param(Rule.REQUEST_SLOW, "central-broker-1", 12_500.0, 10_000.0, "Produce",
                 ["Produce requests on central-broker-1 take 12.5 s at p99 (above 10 s)"], id="request-slow"),
    pytest.param(Rule.FOLLOWER_LAG, "central-broker-3", 420.0, 0.0, "10",
                 ["across the last 10 samples (now 420 records)"], id="follower-lag"),
    pytest.param(Rule.SKEW, "central", 2.4, 1.5, "leaders", ["leaders per broker on central is uneven",
                                                              "2.40 (above 1.5)"], id="skew"),
])
def test_health_alert_text(rule, subject, value, limit, detail, words):
    alert = health_alert(HealthFinding(rule, Severity.WARNING, "central", subject, value, limit, detail))
    assert alert.rule == rule.value and alert.cluster == "central" and alert.look_at
    for word in words:
        assert word in alert.message


def test_every_health_rule_has_text():
    for rule in Rule:
        assert health_alert(HealthFinding(rule, Severity.WARNING, "c", "c", 1.0, 1.0, "x")).message


def test_findings_that_share_a_node_get_distinct_subjects():
    produce = health_alert(HealthFinding(Rule.REQUEST_SLOW, Severity.WARNING, "c", "b1", 2e3, 1e3, "Produce"))
    metadata = health_alert(HealthFinding(Rule.REQUEST_SLOW, Severity.WARNING, "c", "b1", 2e3, 1e3, "Metadata"))
    assert produce.subject == "b1 Produce" and metadata.subject == "b1 Metadata"


def test_sampling_failure_is_critical():
    alert = sampling_alert("central", "sampling cluster central failed: _TRANSPORT")
    assert alert.severity is Severity.CRITICAL and alert.rule == "sampling_failed"


def test_alerts_sort_worst_first_then_stable():
    a = Alert(Severity.WARNING, "lag_warn", "dc1", "g", "m", "l")
    b = Alert(Severity.CRITICAL, "under_min_isr", "dc2", "dc2", "m", "l")
    c = Alert(Severity.WARNING, "lag_warn", "dc1", "f", "m", "l")
    assert sort_alerts([a, b, c]) == (b, c, a)


def test_a_replication_gap_is_one_critical_alert_per_route_for_a_day():
    from conveyor.ops.alerts import GAP_ALERT_MS, replication_gap_alert
    from conveyor.replicate.plan import Gap

    now = 10 * GAP_ALERT_MS
    gaps = [Gap("clicks", 1, 10, 24, found_ms=now - 5_000), Gap("clicks", 0, 0, 4, found_ms=now - 1_000),
            Gap("views", 2, 7, 7, found_ms=now - GAP_ALERT_MS - 1)]
    alert = replication_gap_alert("dc1-central", "dc1", "central", gaps, now)
    assert (alert.severity, alert.rule, alert.cluster, alert.subject, alert.since_ms) == (
        Severity.CRITICAL, "replication_gap", "central", "route dc1-central", now - 5_000)
    assert alert.message == ("retention on dc1 deleted 20 records before route dc1-central copied them: "
                             "clicks[0] 0..4, clicks[1] 10..24")
    assert "conveyor replicate status --route dc1-central" in alert.look_at
    assert replication_gap_alert("dc1-central", "dc1", "central", gaps[2:], now) is None  # older than a day
    many = [Gap("t", p, 0, 0, found_ms=now) for p in range(7)]
    assert replication_gap_alert("r", "dc1", "central", many, now).message.endswith("t[4] 0..0 and 2 more")
    # Only topics delivered at least once lost records: a warning; an exact one among them: critical.
    assert replication_gap_alert("r", "dc1", "central", gaps, now, relaxed={"clicks"}).severity == Severity.WARNING
    assert replication_gap_alert("r", "dc1", "central", [*gaps[:2], Gap("views", 0, 1, 1, found_ms=now)], now,
                                 relaxed={"clicks"}).severity == Severity.CRITICAL
