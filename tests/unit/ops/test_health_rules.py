"""A cluster's state from its nodes' scrapes, from tables of cases (no servers). The alerts over
these values are Prometheus rules, tested in test_rules.py and test_watcher_rules.py."""

from __future__ import annotations

import pytest

from conveyor.ops.health import (
    BrokerHealth,
    BrokerReading,
    MetadataCounts,
    assess_cluster,
    broker_health,
    leader_moves,
    rate,
    reading_from_samples,
    skew,
)

T0 = 1_700_000_000_000


@pytest.mark.parametrize("values, ratio", [
    pytest.param([10, 10, 10], 1.0, id="even"),
    pytest.param([30, 0, 0], 3.0, id="all-on-one"),
    pytest.param([0, 0], None, id="no-load"),
    pytest.param([], None, id="no-brokers"),
])
def test_skew(values, ratio):
    assert skew(values) == ratio


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
    ("kafka_controller_kafkacontroller_offlinepartitionscount", {}, float("nan")),
]


def test_reading_picks_broker_totals_not_topic_series():
    r = reading_from_samples("b1", T0, PAGE, broker_id=1)
    assert (r.under_replicated, r.leaders, r.replicas, r.bytes_in, r.bytes_out) == (2, 11, 33, 1000, 3000)
    assert r.max_follower_lag == 9.0  # the worst fetcher
    assert r.p99_ms == {"Produce": 12.0}  # only the watched requests, only p99
    assert r.offline_partitions is None  # NaN means "not reported"
    assert r.up and r.is_broker


def test_reading_of_a_controller_only_node_is_not_a_broker():
    r = reading_from_samples("c0", T0, [("kafka_controller_kafkacontroller_activecontrollercount", {}, 1.0)])
    assert r.active_controller == 1.0 and not r.is_broker


def test_offset_manager_readings_from_the_exporter():
    reading = reading_from_samples("broker-1", T0, [
        ("kafka_log_logcleanermanager_max_dirty_percent", {}, 97.0),
        ("kafka_log_logcleanermanager_time_since_last_run_ms", {}, 1500.0),
        ("kafka_server_group_coordinator_metrics_partition_load_time_max", {}, float("nan")),  # no load in 30 s
        ("kafka_server_group_coordinator_metrics_offset_commit_rate", {}, 12.5),
        ("kafka_server_group_coordinator_metrics_offset_commit_count", {}, 640.0),
        ("kafka_coordinator_group_groupmetadatamanager_numgroups", {}, 4.0),
    ])
    assert (reading.cleaner_dirty_percent, reading.cleaner_idle_ms, reading.coordinator_load_ms,
            reading.offset_commit_rate, reading.offset_commits, reading.groups) == (97.0, 1500.0, None, 12.5, 640.0, 4.0)


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


@pytest.mark.parametrize("brokers, kwargs, expected", [
    pytest.param([broker("b1", **HEALTHY), broker("b2", **HEALTHY)], {}, "OK", id="healthy"),
    pytest.param([broker("b1", **{**HEALTHY, "under_replicated": 4.0}), broker("b2", error="ConnectError")], {},
                 "CRITICAL", id="broker-killed"),
    pytest.param([broker("b1", **{**HEALTHY, "under_replicated": 4.0})], {}, "DEGRADED", id="under-replicated"),
    pytest.param([broker("b1", **{**HEALTHY, "under_min_isr": 1.0})], {}, "CRITICAL", id="under-min-isr"),
    pytest.param([broker("b1", **HEALTHY, offline_partitions=3.0, active_controller=1.0)], {}, "CRITICAL",
                 id="offline-from-controller"),
    pytest.param([broker("b1", **HEALTHY, active_controller=0.0)], {}, "CRITICAL", id="no-active-controller"),
    pytest.param([broker("b1", **HEALTHY, unclean_elections=1.0)], {}, "CRITICAL", id="unclean-election"),
    pytest.param([broker("b1", **HEALTHY)], {"changes": 6, "change_span_s": 50.0}, "OK", id="leader-changes-warn-only"),
    pytest.param([], {"metadata": MetadataCounts(under_replicated=2, offline=1)}, "CRITICAL", id="metadata-fallback"),
])
def test_cluster_status(brokers, kwargs, expected):
    assert assess_cluster("c", T0, brokers, **kwargs).status == expected


def test_assessment_sums_urp_over_leaders_and_takes_the_controllers_counts():
    health = assess_cluster("c", T0, [broker("b1", **{**HEALTHY, "under_replicated": 2.0}),
                                      broker("b2", **{**HEALTHY, "under_replicated": 3.0}, active_controller=0.0),
                                      broker("b3", **HEALTHY, active_controller=1.0, unclean_elections=2.0,
                                             offline_partitions=0.0),
                                      broker("b4", error="ConnectError")])
    assert (health.under_replicated, health.active_controllers, health.unclean_elections) == (5, 1, 2)
    assert health.offline_partitions == 0
    assert health.skew["leaders"] == 1.0  # the dead broker is left out of the skew


@pytest.mark.parametrize("brokers, load, ratio", [
    pytest.param([broker("b1", **{**HEALTHY, "leaders": 20.0}), broker("b2", **{**HEALTHY, "leaders": 4.0}),
                  broker("b3", **{**HEALTHY, "leaders": 3.0})], "leaders", 2.222, id="leaders"),
    pytest.param([broker("b1", **HEALTHY, bytes_in_per_s=9e6), broker("b2", **HEALTHY, bytes_in_per_s=1e6)],
                 "bytes_in", 1.8, id="bytes-in"),
    pytest.param([broker("b1", **HEALTHY, bytes_in_per_s=9e6)], "bytes_in", None, id="one-broker-has-no-skew"),
])
def test_skew_per_load(brokers, load, ratio):
    found = assess_cluster("c", T0, brokers).skew[load]
    assert (round(found, 3) if found is not None else None) == ratio
