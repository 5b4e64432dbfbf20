"""The offset manager's rules and broker-side amplification per topic, from tables of cases (no servers)."""

from __future__ import annotations

import pytest

from conveyor.config.policies import OffsetManagerPolicy
from conveyor.ops.alerts import health_alert, lag_alert
from conveyor.ops.health import BrokerReading, Rule, Severity, reading_from_samples
from conveyor.ops.lag import PartitionStatus, Reason, Status, GroupStatus
from conveyor.ops.offset_manager import (
    assess_offset_manager,
    cleaner_idle,
    compaction_stalled,
    coordinator_load_slow,
)
from conveyor.ops.rewind import GroupFindings
from conveyor.ops.tracker import GroupReport
from conveyor.ops.traffic import TrafficPolicy, assess_traffic, out_rising_in_flat, topic_rates

OK, WARNING, CRITICAL = Severity.OK, Severity.WARNING, Severity.CRITICAL
T0 = 1_700_000_000_000
MIB = 1_048_576.0


@pytest.mark.parametrize("dirty, expected", [
    pytest.param([95, 96, 97], WARNING, id="high-across-the-window"),
    pytest.param([40, 95, 96, 97], WARNING, id="only-the-last-samples-count"),
    pytest.param([95, 50, 97], OK, id="cleaned-in-between"),
    pytest.param([95, 96], OK, id="too-few-samples"),
    pytest.param([80, 80, 80], OK, id="at-the-threshold"),
    pytest.param([], OK, id="no-samples"),
])
def test_compaction_stalled(dirty, expected):
    assert compaction_stalled(dirty, 80.0, 3) is expected


@pytest.mark.parametrize("rule, value, limit, expected", [
    pytest.param(cleaner_idle, 20 * 60_000, 15 * 60_000, CRITICAL, id="cleaner-dead"),
    pytest.param(cleaner_idle, 15_000, 15 * 60_000, OK, id="cleaner-looking"),
    pytest.param(coordinator_load_slow, 12_000, 10_000, WARNING, id="load-slow"),
    pytest.param(coordinator_load_slow, 10_000, 10_000, OK, id="load-at-limit"),
])
def test_cleaner_and_coordinator(rule, value, limit, expected):
    assert rule(value, limit) is expected


def test_offset_manager_readings_from_the_exporter():
    reading = reading_from_samples("broker-1", T0, [
        ("kafka_log_logcleanermanager_max_dirty_percent", {}, 97.0),
        ("kafka_log_logcleanermanager_time_since_last_run_ms", {}, 1500.0),
        ("kafka_server_group_coordinator_metrics_partition_load_time_max", {}, float("nan")),  # no load in 30 s
        ("kafka_server_group_coordinator_metrics_offset_commit_rate", {}, 12.5),
        ("kafka_server_group_coordinator_metrics_offset_commit_count", {}, 640.0),
        ("kafka_coordinator_group_groupmetadatamanager_numgroups", {}, 4.0),
        ("kafka_server_brokertopicmetrics_bytesinpersec_total", {"topic": "ads"}, 100.0),
        ("kafka_server_brokertopicmetrics_bytesoutpersec_total", {"topic": "ads"}, 300.0),
    ])
    assert (reading.cleaner_dirty_percent, reading.cleaner_idle_ms, reading.coordinator_load_ms,
            reading.offset_commit_rate, reading.offset_commits, reading.groups) == (97.0, 1500.0, None, 12.5, 640.0, 4.0)
    assert reading.topic_bytes == {"ads": (100.0, 300.0)}


def _reading(node: str, at: int = T0, **values) -> BrokerReading:
    return BrokerReading(node, at, **values)


def test_assess_offset_manager_per_node():
    policy = OffsetManagerPolicy(dirty_percent_warn=80, dirty_samples=2, cleaner_idle_alarm_ms=60_000,
                                 coordinator_load_warn_ms=5_000)
    recent = {
        "broker-1": [_reading("broker-1", cleaner_dirty_percent=90), _reading("broker-1", cleaner_dirty_percent=95)],
        "broker-2": [_reading("broker-2", cleaner_dirty_percent=20, cleaner_idle_ms=120_000,
                              coordinator_load_ms=7_000)],
        "broker-3": [_reading("broker-3", cleaner_dirty_percent=99), _reading("broker-3", error="refused")],
    }
    found = {(f.rule, f.subject, f.severity, f.value) for f in assess_offset_manager("central", recent, policy)}
    assert found == {(Rule.COMPACTION_STALLED, "broker-1", WARNING, 95), (Rule.CLEANER_IDLE, "broker-2", CRITICAL, 120_000),
                     (Rule.COORDINATOR_LOAD_SLOW, "broker-2", WARNING, 7_000)}
    texts = {f.rule: health_alert(f).message for f in assess_offset_manager("central", recent, policy)}
    assert "95% dirty (above 80%)" in texts[Rule.COMPACTION_STALLED]
    assert "120 s" in texts[Rule.CLEANER_IDLE] and "7.0 s" in texts[Rule.COORDINATOR_LOAD_SLOW]


def test_a_lost_commit_is_the_offset_managers_alert():
    lost = PartitionStatus(topic="ads", partition=0, status=Status.ERR, reason=Reason.COMMIT_LOST, at_ms=T0,
                           committed=40, since_ms=T0 - 5000)
    report = GroupReport("central", "mailer", "EMPTY", GroupStatus("mailer", Status.ERR, (lost,), 0, None, 0.0),
                         GroupFindings((), ()), ())
    alert = lag_alert(report)
    assert (alert.rule, alert.severity) == ("offset_fetch_empty", CRITICAL)
    assert "offset manager" in alert.look_at


POLICY = TrafficPolicy(samples=4, rise=2.0, flat=0.25, min_out_per_s=MIB)


@pytest.mark.parametrize("ins, outs, expected", [
    pytest.param([MIB] * 4, [MIB, MIB, 3 * MIB, 3 * MIB], True, id="out-tripled-in-flat"),
    pytest.param([MIB, MIB, 1.2 * MIB, 1.1 * MIB], [MIB, MIB, 2 * MIB, 2.5 * MIB], True, id="in-within-flat"),
    pytest.param([MIB, MIB, 3 * MIB, 3 * MIB], [MIB, MIB, 3 * MIB, 3 * MIB], False, id="in-rose-too"),
    pytest.param([MIB] * 4, [MIB, MIB, 1.5 * MIB, 1.5 * MIB], False, id="out-rose-little"),
    pytest.param([0.0] * 4, [0.0, 0.0, 2 * MIB, 2 * MIB], True, id="nothing-written-read-again"),
    pytest.param([1000.0] * 4, [1000.0, 1000.0, 9000.0, 9000.0], False, id="too-small-to-matter"),
    pytest.param([MIB] * 3, [MIB, 3 * MIB, 3 * MIB], False, id="too-few-samples"),
    pytest.param([MIB] * 4, [3 * MIB, 3 * MIB, MIB, MIB], False, id="out-falling"),
])
def test_out_rising_in_flat(ins, outs, expected):
    assert out_rising_in_flat(ins, outs, POLICY) is expected


def test_topic_rates_sum_brokers_and_skip_restarts():
    before = [_reading("b1", T0, topic_bytes={"ads": (0.0, 0.0)}), _reading("b2", T0, topic_bytes={"ads": (500.0, 500.0)})]
    now = [_reading("b1", T0 + 2000, topic_bytes={"ads": (200.0, 600.0)}),
           _reading("b2", T0 + 2000, topic_bytes={"ads": (100.0, 100.0)}),  # restarted: counters reset
           _reading("b3", T0 + 2000, topic_bytes={"ads": (50.0, 50.0)})]   # no previous reading
    pairs = [(now[0], before[0]), (now[1], before[1]), (now[2], None)]
    assert topic_rates(pairs) == {"ads": (100.0, 300.0)}


def test_assess_traffic_names_what_explains_it():
    history = [{"ads": (MIB, MIB), "clicks": (MIB, MIB)}] * 2 + [{"ads": (MIB, 4 * MIB), "clicks": (MIB, 4 * MIB)}] * 2
    found = {f.subject: f for f in assess_traffic("central", history, {"clicks": ["search"]}, POLICY)}
    assert set(found) == {"ads", "clicks"}
    assert found["ads"].rule is Rule.TOPIC_AMPLIFICATION and found["ads"].value == 4 * MIB
    assert "no consumer group's commits explain it" in health_alert(found["ads"]).message
    assert "group(s) search" in health_alert(found["clicks"]).message
