"""Broker health rules, from tables of cases, and the assessment of whole clusters (no servers)."""

from __future__ import annotations

import pytest

from conveyor.config.policies import HealthPolicy
from conveyor.ops.health import (
    BrokerHealth,
    BrokerReading,
    MetadataCounts,
    Rule,
    Severity,
    assess_cluster,
    broker_down,
    broker_health,
    follower_lag_stays,
    isr_shrinking,
    leader_changes,
    leader_moves,
    no_active_controller,
    offline_partitions,
    rate,
    reading_from_samples,
    request_time,
    skew,
    skewed,
    unclean_elections,
    under_min_isr,
    under_replicated,
)

OK, WARNING, CRITICAL = Severity.OK, Severity.WARNING, Severity.CRITICAL
T0 = 1_700_000_000_000


# --- Each rule on its own ---

@pytest.mark.parametrize("rule, value, expected", [
    pytest.param(broker_down, True, OK, id="down-answering"),
    pytest.param(broker_down, False, CRITICAL, id="down-silent"),
    pytest.param(under_replicated, 0, OK, id="urp-none"),
    pytest.param(under_replicated, 3, WARNING, id="urp-some"),
    pytest.param(under_min_isr, 0, OK, id="min-isr-none"),
    pytest.param(under_min_isr, 1, CRITICAL, id="min-isr-one-blocks-acks-all"),
    pytest.param(offline_partitions, 0, OK, id="offline-none"),
    pytest.param(offline_partitions, 2, CRITICAL, id="offline-some"),
    pytest.param(isr_shrinking, 0.0, OK, id="isr-steady"),
    pytest.param(isr_shrinking, 0.2, WARNING, id="isr-shrinking"),
    pytest.param(unclean_elections, 0, OK, id="unclean-never"),
    pytest.param(unclean_elections, 1, CRITICAL, id="unclean-once-is-loss"),
    pytest.param(leader_changes, 0, OK, id="leaders-stable"),
    pytest.param(leader_changes, 4, WARNING, id="leaders-moved"),
])
def test_single_value_rules(rule, value, expected):
    assert rule(value) is expected


@pytest.mark.parametrize("active, expected", [
    pytest.param([1.0, 0.0, 0.0], OK, id="one-active"),
    pytest.param([0.0, 0.0], CRITICAL, id="none-active"),
    pytest.param([], OK, id="no-controller-answered-is-broker-down-not-this"),
])
def test_no_active_controller(active, expected):
    assert no_active_controller(active) is expected


@pytest.mark.parametrize("p99, expected", [
    pytest.param(5.0, OK, id="fast"),
    pytest.param(1000.0, OK, id="at-warning-is-not-above"),
    pytest.param(1500.0, WARNING, id="above-warning"),
    pytest.param(10_000.0, WARNING, id="at-alarm-is-not-above"),
    pytest.param(12_000.0, CRITICAL, id="mission-alarm-above-10s"),
])
def test_request_time(p99, expected):
    assert request_time(p99, 1000.0, 10_000.0) is expected


@pytest.mark.parametrize("lags, expected", [
    pytest.param([0, 0, 0], OK, id="in-sync"),
    pytest.param([5, 0, 7], OK, id="touched-zero"),
    pytest.param([5, 9, 7], WARNING, id="stays-above-zero"),
    pytest.param([12], OK, id="one-sample-is-no-trend"),
    pytest.param([], OK, id="no-samples"),
])
def test_follower_lag_stays(lags, expected):
    assert follower_lag_stays(lags, 2) is expected


@pytest.mark.parametrize("values, ratio", [
    pytest.param([10, 10, 10], 1.0, id="even"),
    pytest.param([30, 0, 0], 3.0, id="all-on-one"),
    pytest.param([0, 0], None, id="no-load"),
    pytest.param([], None, id="no-brokers"),
])
def test_skew(values, ratio):
    assert skew(values) == ratio


@pytest.mark.parametrize("values, min_mean, expected", [
    pytest.param([14, 5, 5], 3, WARNING, id="leaders-on-one-broker"),
    pytest.param([12, 6, 6], 3, OK, id="at-the-limit-is-not-above"),
    pytest.param([9, 8, 7], 3, OK, id="close-enough"),
    pytest.param([2, 0, 0], 3, OK, id="too-little-load-to-matter"),
    pytest.param([20], 3, OK, id="single-broker-cannot-skew"),
])
def test_skewed(values, min_mean, expected):
    assert skewed(values, 1.5, min_mean) is expected


@pytest.mark.parametrize("now, before, seconds, expected", [
    pytest.param(150.0, 100.0, 10.0, 5.0, id="rate"),
    pytest.param(50.0, 100.0, 10.0, None, id="counter-restarted"),
    pytest.param(150.0, None, 10.0, None, id="no-previous"),
    pytest.param(150.0, 100.0, 0.0, None, id="no-time"),
])
def test_rate(now, before, seconds, expected):
    assert rate(now, before, seconds) == expected


def test_leader_moves_counts_changed_and_lost_leaders_only():
    before = {("a", 0): 1, ("a", 1): 2, ("b", 0): 3}
    now = {("a", 0): 1, ("a", 1): 3, ("b", 0): -1, ("c", 0): 2}
    assert leader_moves(before, now) == 2


# --- Reading a scrape ---

PAGE = [
    ("kafka_server_replicamanager_underreplicatedpartitions", {}, 2.0),
    ("kafka_server_replicamanager_underminisrpartitioncount", {}, 0.0),
    ("kafka_server_replicamanager_leadercount", {}, 11.0),
    ("kafka_server_replicamanager_partitioncount", {}, 33.0),
    ("kafka_server_replicamanager_isrshrinkspersec_total", {}, 4.0),
    ("kafka_server_brokertopicmetrics_bytesinpersec_total", {}, 1000.0),
    ("kafka_server_brokertopicmetrics_bytesinpersec_total", {"topic": "ad-events"}, 900.0),
    ("kafka_server_brokertopicmetrics_bytesoutpersec_total", {}, 3000.0),
    ("kafka_server_replicafetchermanager_maxlag", {"clientid": "Replica"}, 7.0),
    ("kafka_server_replicafetchermanager_maxlag", {"clientid": "Replica-1"}, 9.0),
    ("kafka_network_requestmetrics_totaltimems", {"request": "Produce", "quantile": "0.99"}, 12.0),
    ("kafka_network_requestmetrics_totaltimems", {"request": "Produce", "quantile": "0.50"}, 1.0),
    ("kafka_network_requestmetrics_totaltimems", {"request": "Heartbeat", "quantile": "0.99"}, 99.0),
    ("kafka_network_requestmetrics_requests_total", {"request": "Metadata", "version": "12"}, 3.0),
    ("kafka_network_requestmetrics_requests_total", {"request": "Metadata", "version": "13"}, 4.0),
    ("kafka_controller_kafkacontroller_offlinepartitionscount", {}, float("nan")),
]


def test_reading_picks_broker_totals_not_topic_series():
    r = reading_from_samples("b1", T0, PAGE, broker_id=1)
    assert (r.under_replicated, r.leaders, r.replicas, r.bytes_in, r.bytes_out) == (2, 11, 33, 1000, 3000)
    assert r.max_follower_lag == 9.0  # the worst fetcher
    assert r.p99_ms == {"Produce": 12.0}  # only the watched requests, only p99
    assert r.requests == {"Metadata": 7.0}  # summed over versions
    assert r.offline_partitions is None  # NaN means "not reported"
    assert r.up and r.is_broker


def test_reading_of_a_controller_only_node_is_not_a_broker():
    r = reading_from_samples("c0", T0, [("kafka_controller_kafkacontroller_activecontrollercount", {}, 1.0)])
    assert r.active_controller == 1.0 and not r.is_broker


def test_broker_health_rates_need_two_answers():
    before = reading_from_samples("b1", T0, PAGE)
    after = reading_from_samples("b1", T0 + 10_000, [("kafka_server_brokertopicmetrics_bytesinpersec_total", {},
                                                      6000.0)])
    assert broker_health(after, before).bytes_in_per_s == 500.0
    assert broker_health(after, None).bytes_in_per_s is None
    down = BrokerReading("b1", T0 + 20_000, error="ConnectError")
    assert broker_health(down, after).bytes_in_per_s is None


# --- Whole clusters ---

def broker(node: str, **values) -> BrokerHealth:
    rates = {k: values.pop(k) for k in ("bytes_in_per_s", "bytes_out_per_s", "isr_shrinks_per_s") if k in values}
    return BrokerHealth(BrokerReading(node, T0, **values), **rates)


HEALTHY = dict(under_replicated=0.0, under_min_isr=0.0, leaders=10.0, replicas=30.0, max_follower_lag=0.0,
               p99_ms={"Produce": 5.0, "FetchConsumer": 500.0, "Metadata": 2.0})


def rules(health) -> set[tuple[Rule, Severity, str]]:
    return {(f.rule, f.severity, f.subject) for f in health.findings}


@pytest.mark.parametrize("brokers, kwargs, expected", [
    pytest.param([broker("b1", **HEALTHY), broker("b2", **HEALTHY)], {}, set(), id="healthy"),
    pytest.param([broker("b1", **{**HEALTHY, "under_replicated": 4.0}), broker("b2", error="ConnectError")], {},
                 {(Rule.UNDER_REPLICATED, WARNING, "c"), (Rule.BROKER_DOWN, CRITICAL, "b2")}, id="broker-killed"),
    pytest.param([broker("b1", **{**HEALTHY, "under_min_isr": 1.0})], {},
                 {(Rule.UNDER_MIN_ISR, CRITICAL, "c")}, id="under-min-isr"),
    pytest.param([broker("b1", **HEALTHY, offline_partitions=3.0, active_controller=1.0)], {},
                 {(Rule.OFFLINE, CRITICAL, "c")}, id="offline-from-controller"),
    pytest.param([broker("b1", **HEALTHY, active_controller=0.0)], {},
                 {(Rule.NO_CONTROLLER, CRITICAL, "c")}, id="no-active-controller"),
    pytest.param([broker("b1", **HEALTHY, unclean_elections=1.0)], {},
                 {(Rule.UNCLEAN_ELECTION, CRITICAL, "c")}, id="unclean-election"),
    pytest.param([broker("b1", **HEALTHY, isr_shrinks_per_s=0.5)], {},
                 {(Rule.ISR_SHRINKING, WARNING, "b1")}, id="isr-shrinking"),
    pytest.param([broker("b1", **{**HEALTHY, "p99_ms": {"Produce": 11_000.0, "Metadata": 1_500.0}})], {},
                 {(Rule.REQUEST_SLOW, CRITICAL, "b1"), (Rule.REQUEST_SLOW, WARNING, "b1")}, id="slow-requests"),
    pytest.param([broker("b1", **HEALTHY)], {"follower_lags": {"b1": [3.0, 5.0, 4.0]}},
                 {(Rule.FOLLOWER_LAG, WARNING, "b1")}, id="follower-lag-stays"),
    pytest.param([broker("b1", **HEALTHY)], {"changes": 6, "change_span_s": 50.0},
                 {(Rule.LEADER_CHANGES, WARNING, "c")}, id="leader-changes"),
    pytest.param([broker("b1", **{**HEALTHY, "leaders": 20.0}), broker("b2", **{**HEALTHY, "leaders": 4.0}),
                  broker("b3", **{**HEALTHY, "leaders": 3.0})], {},
                 {(Rule.SKEW, WARNING, "c")}, id="leaders-skewed"),
    pytest.param([broker("b1", **HEALTHY, bytes_in_per_s=9e6), broker("b2", **HEALTHY, bytes_in_per_s=1e6)], {},
                 {(Rule.SKEW, WARNING, "c")}, id="bytes-in-skewed"),
    pytest.param([broker("b1", **HEALTHY, bytes_in_per_s=900.0), broker("b2", **HEALTHY, bytes_in_per_s=10.0)], {},
                 set(), id="tiny-bytes-never-skewed"),
    pytest.param([], {"metadata": MetadataCounts(under_replicated=2, offline=1)},
                 {(Rule.UNDER_REPLICATED, WARNING, "c"), (Rule.OFFLINE, CRITICAL, "c")}, id="metadata-fallback"),
])
def test_assess_cluster(brokers, kwargs, expected):
    assert rules(assess_cluster("c", T0, brokers, **kwargs)) == expected


def test_assessment_sums_urp_over_leaders_and_orders_worst_first():
    health = assess_cluster("c", T0, [broker("b1", **{**HEALTHY, "under_replicated": 2.0}),
                                      broker("b2", **{**HEALTHY, "under_replicated": 3.0}),
                                      broker("b3", error="ConnectError")])
    assert health.under_replicated == 5
    assert health.severity is CRITICAL
    assert [f.rule for f in health.findings] == [Rule.BROKER_DOWN, Rule.UNDER_REPLICATED]
    assert health.skew["leaders"] == 1.0  # the dead broker is left out of the skew


def test_slow_request_finding_names_the_request_and_the_crossed_limit():
    (finding,) = assess_cluster("c", T0, [broker("b1", **{**HEALTHY, "p99_ms": {"Produce": 1_200.0}})],
                                policy=HealthPolicy(p99_warn_ms=1_000.0)).findings
    assert (finding.detail, finding.value, finding.limit) == ("Produce", 1_200.0, 1_000.0)


def test_policy_rejects_a_warning_above_the_alarm():
    with pytest.raises(ValueError):
        HealthPolicy(p99_warn_ms=20_000.0)
