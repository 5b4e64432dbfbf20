"""The same brokers scraped under Conveyor's JMX exporter rules and under Strimzi's kafka-metrics.yaml
read the same: one broker state printed as each exporter prints it, held as Prometheus holds a
scrape (each series under its printed name, labelled with its target's cluster and node), selected
as the readers' queries select, through the real health, load and produce-rate readers (docs/ops.md,
"Broker exporter rules")."""

from __future__ import annotations

import math
import re
from string import Template

import pytest

from conveyor.ops import health
from conveyor.ops.advise_live import MESSAGES_IN
from prometheus_client.parser import text_string_to_metric_families

from conveyor.ops.balance import loads
from conveyor.ops.balance.loads import BYTES_IN, BYTES_OUT, SIZE, BrokerLoad, PartitionLoad, broker_loads, partition_loads
from conveyor.ops.broker_readings import Target, either_name, names_regex, readings_from_samples
from conveyor.ops.exporter_names import MISSING, RENAMED, SAME, canonical_labels, canonical_name
from conveyor.ops.health import BrokerReading, ClusterHealth, assess_cluster, broker_health
from conveyor.ops.prometheus import Sample

T0 = 1_700_000_000_000
_MGMT = "Attribute exposed for management"

# The gauges Conveyor reads that both rule sets print alike, to the letter.
_GAUGES = f"""\
# HELP kafka_server_replicamanager_underreplicatedpartitions {_MGMT} kafka.server:name=UnderReplicatedPartitions,type=ReplicaManager,attribute=Value
# TYPE kafka_server_replicamanager_underreplicatedpartitions gauge
kafka_server_replicamanager_underreplicatedpartitions $urp
# HELP kafka_server_replicamanager_underminisrpartitioncount {_MGMT} kafka.server:name=UnderMinIsrPartitionCount,type=ReplicaManager,attribute=Value
# TYPE kafka_server_replicamanager_underminisrpartitioncount gauge
kafka_server_replicamanager_underminisrpartitioncount $min_isr
# HELP kafka_server_replicamanager_leadercount {_MGMT} kafka.server:name=LeaderCount,type=ReplicaManager,attribute=Value
# TYPE kafka_server_replicamanager_leadercount gauge
kafka_server_replicamanager_leadercount $leaders
# HELP kafka_server_replicamanager_partitioncount {_MGMT} kafka.server:name=PartitionCount,type=ReplicaManager,attribute=Value
# TYPE kafka_server_replicamanager_partitioncount gauge
kafka_server_replicamanager_partitioncount $replicas
# HELP kafka_controller_kafkacontroller_offlinepartitionscount {_MGMT} kafka.controller:name=OfflinePartitionsCount,type=KafkaController,attribute=Value
# TYPE kafka_controller_kafkacontroller_offlinepartitionscount gauge
kafka_controller_kafkacontroller_offlinepartitionscount $offline
# HELP kafka_controller_kafkacontroller_activecontrollercount {_MGMT} kafka.controller:name=ActiveControllerCount,type=KafkaController,attribute=Value
# TYPE kafka_controller_kafkacontroller_activecontrollercount gauge
kafka_controller_kafkacontroller_activecontrollercount $active
# HELP kafka_log_logcleanermanager_max_dirty_percent {_MGMT} kafka.log:name=max-dirty-percent,type=LogCleanerManager,attribute=Value
# TYPE kafka_log_logcleanermanager_max_dirty_percent gauge
kafka_log_logcleanermanager_max_dirty_percent $dirty
# HELP kafka_log_logcleanermanager_time_since_last_run_ms {_MGMT} kafka.log:name=time-since-last-run-ms,type=LogCleanerManager,attribute=Value
# TYPE kafka_log_logcleanermanager_time_since_last_run_ms gauge
kafka_log_logcleanermanager_time_since_last_run_ms $idle
# HELP kafka_log_log_size {_MGMT} kafka.log:name=Size,type=Log,attribute=Value
# TYPE kafka_log_log_size gauge
kafka_log_log_size{{partition="0",topic="ad-events"}} $size_ads0
kafka_log_log_size{{partition="1",topic="ad-events"}} $size_ads1
kafka_log_log_size{{partition="0",topic="clicks"}} $size_clicks0
"""

# As the JMX exporter 1.x agent prints a broker under conveyor/runtime/jmx-exporter.yaml: meters keep
# "PerSec", label names are lowercased. It also carries what Strimzi's rules leave out (request
# times and counts, the group coordinator), read by the watcher when present.
CONVEYOR = Template(f"""\
# HELP jmx_scrape_error Non-zero if this scrape failed.
# TYPE jmx_scrape_error gauge
jmx_scrape_error 0.0
{_GAUGES}# HELP kafka_server_replicamanager_isrshrinkspersec_total {_MGMT} kafka.server:name=IsrShrinksPerSec,type=ReplicaManager,attribute=Count
# TYPE kafka_server_replicamanager_isrshrinkspersec_total counter
kafka_server_replicamanager_isrshrinkspersec_total $shrinks
# HELP kafka_server_replicamanager_isrexpandspersec_total {_MGMT} kafka.server:name=IsrExpandsPerSec,type=ReplicaManager,attribute=Count
# TYPE kafka_server_replicamanager_isrexpandspersec_total counter
kafka_server_replicamanager_isrexpandspersec_total $expands
# HELP kafka_server_brokertopicmetrics_bytesinpersec_total {_MGMT} kafka.server:name=BytesInPerSec,type=BrokerTopicMetrics,attribute=Count
# TYPE kafka_server_brokertopicmetrics_bytesinpersec_total counter
kafka_server_brokertopicmetrics_bytesinpersec_total $in_all
kafka_server_brokertopicmetrics_bytesinpersec_total{{topic="ad-events"}} $in_ads
kafka_server_brokertopicmetrics_bytesinpersec_total{{topic="clicks"}} $in_clicks
# HELP kafka_server_brokertopicmetrics_bytesoutpersec_total {_MGMT} kafka.server:name=BytesOutPerSec,type=BrokerTopicMetrics,attribute=Count
# TYPE kafka_server_brokertopicmetrics_bytesoutpersec_total counter
kafka_server_brokertopicmetrics_bytesoutpersec_total $out_all
kafka_server_brokertopicmetrics_bytesoutpersec_total{{topic="ad-events"}} $out_ads
kafka_server_brokertopicmetrics_bytesoutpersec_total{{topic="clicks"}} $out_clicks
# HELP kafka_server_brokertopicmetrics_messagesinpersec_total {_MGMT} kafka.server:name=MessagesInPerSec,type=BrokerTopicMetrics,attribute=Count
# TYPE kafka_server_brokertopicmetrics_messagesinpersec_total counter
kafka_server_brokertopicmetrics_messagesinpersec_total $msgs_all
kafka_server_brokertopicmetrics_messagesinpersec_total{{topic="ad-events"}} $msgs_ads
kafka_server_brokertopicmetrics_messagesinpersec_total{{topic="clicks"}} $msgs_clicks
# HELP kafka_server_brokertopicmetrics_replicationbytesinpersec_total {_MGMT} kafka.server:name=ReplicationBytesInPerSec,type=BrokerTopicMetrics,attribute=Count
# TYPE kafka_server_brokertopicmetrics_replicationbytesinpersec_total counter
kafka_server_brokertopicmetrics_replicationbytesinpersec_total 5.0E7
# HELP kafka_server_replicafetchermanager_maxlag {_MGMT} kafka.server:name=MaxLag,type=ReplicaFetcherManager,attribute=Value
# TYPE kafka_server_replicafetchermanager_maxlag gauge
kafka_server_replicafetchermanager_maxlag{{clientid="Replica"}} $max_lag
# HELP kafka_controller_controllerstats_uncleanleaderelectionspersec_total {_MGMT} kafka.controller:name=UncleanLeaderElectionsPerSec,type=ControllerStats,attribute=Count
# TYPE kafka_controller_controllerstats_uncleanleaderelectionspersec_total counter
kafka_controller_controllerstats_uncleanleaderelectionspersec_total $unclean
# HELP kafka_network_requestmetrics_totaltimems {_MGMT} kafka.network:name=TotalTimeMs,type=RequestMetrics,attribute=99thPercentile
# TYPE kafka_network_requestmetrics_totaltimems gauge
kafka_network_requestmetrics_totaltimems{{quantile="0.99",request="Produce"}} 4.0
kafka_network_requestmetrics_totaltimems{{quantile="0.99",request="Metadata"}} 1.0
# HELP kafka_server_group_coordinator_metrics_partition_load_time_max The max time it took to load the partitions in the last 30sec. kafka.server:name=null,type=group-coordinator-metrics,attribute=partition-load-time-max
# TYPE kafka_server_group_coordinator_metrics_partition_load_time_max gauge
kafka_server_group_coordinator_metrics_partition_load_time_max 12.0
# HELP kafka_coordinator_group_groupmetadatamanager_numgroups {_MGMT} kafka.coordinator.group:name=NumGroups,type=GroupMetadataManager,attribute=Value
# TYPE kafka_coordinator_group_groupmetadatamanager_numgroups gauge
kafka_coordinator_group_groupmetadatamanager_numgroups 7.0
""")

# The same broker as the agent prints it under Strimzi's kafka-metrics.yaml: "PerSec" stripped from
# meters, label names as the MBean spells them (clientId), RequestMetrics and the coordinators not
# exported at all, idle percent under its own "_percent" rule.
STRIMZI = Template(f"""\
# HELP jmx_scrape_error Non-zero if this scrape failed.
# TYPE jmx_scrape_error gauge
jmx_scrape_error 0.0
# HELP kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent {_MGMT} kafka.server:name=RequestHandlerAvgIdlePercent,type=KafkaRequestHandlerPool,attribute=MeanRate
# TYPE kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent gauge
kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent 0.93
{_GAUGES}# HELP kafka_server_replicamanager_isrshrinks_total {_MGMT} kafka.server:name=IsrShrinksPerSec,type=ReplicaManager,attribute=Count
# TYPE kafka_server_replicamanager_isrshrinks_total counter
kafka_server_replicamanager_isrshrinks_total $shrinks
# HELP kafka_server_replicamanager_isrexpands_total {_MGMT} kafka.server:name=IsrExpandsPerSec,type=ReplicaManager,attribute=Count
# TYPE kafka_server_replicamanager_isrexpands_total counter
kafka_server_replicamanager_isrexpands_total $expands
# HELP kafka_server_brokertopicmetrics_bytesin_total {_MGMT} kafka.server:name=BytesInPerSec,type=BrokerTopicMetrics,attribute=Count
# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total $in_all
kafka_server_brokertopicmetrics_bytesin_total{{topic="ad-events"}} $in_ads
kafka_server_brokertopicmetrics_bytesin_total{{topic="clicks"}} $in_clicks
# HELP kafka_server_brokertopicmetrics_bytesout_total {_MGMT} kafka.server:name=BytesOutPerSec,type=BrokerTopicMetrics,attribute=Count
# TYPE kafka_server_brokertopicmetrics_bytesout_total counter
kafka_server_brokertopicmetrics_bytesout_total $out_all
kafka_server_brokertopicmetrics_bytesout_total{{topic="ad-events"}} $out_ads
kafka_server_brokertopicmetrics_bytesout_total{{topic="clicks"}} $out_clicks
# HELP kafka_server_brokertopicmetrics_messagesin_total {_MGMT} kafka.server:name=MessagesInPerSec,type=BrokerTopicMetrics,attribute=Count
# TYPE kafka_server_brokertopicmetrics_messagesin_total counter
kafka_server_brokertopicmetrics_messagesin_total $msgs_all
kafka_server_brokertopicmetrics_messagesin_total{{topic="ad-events"}} $msgs_ads
kafka_server_brokertopicmetrics_messagesin_total{{topic="clicks"}} $msgs_clicks
# HELP kafka_server_brokertopicmetrics_replicationbytesin_total {_MGMT} kafka.server:name=ReplicationBytesInPerSec,type=BrokerTopicMetrics,attribute=Count
# TYPE kafka_server_brokertopicmetrics_replicationbytesin_total counter
kafka_server_brokertopicmetrics_replicationbytesin_total 5.0E7
# HELP kafka_server_replicafetchermanager_maxlag {_MGMT} kafka.server:name=MaxLag,type=ReplicaFetcherManager,attribute=Value
# TYPE kafka_server_replicafetchermanager_maxlag gauge
kafka_server_replicafetchermanager_maxlag{{clientId="Replica"}} $max_lag
# HELP kafka_controller_controllerstats_uncleanleaderelections_total {_MGMT} kafka.controller:name=UncleanLeaderElectionsPerSec,type=ControllerStats,attribute=Count
# TYPE kafka_controller_controllerstats_uncleanleaderelections_total counter
kafka_controller_controllerstats_uncleanleaderelections_total $unclean
""")

# Two brokers, two scrapes 10 s apart: b1 leads most, its ISRs shrank, a partition is under-replicated
# and one under min ISR; b1 is also the active controller. Counters print as the agent prints doubles.
STATES = {
    "b1": ({"urp": "2.0", "min_isr": "1.0", "leaders": "20.0", "replicas": "40.0", "shrinks": "3.0",
            "expands": "1.0", "in_all": "1.0E8", "in_ads": "8.0E7", "in_clicks": "2.0E7", "out_all": "2.0E8",
            "out_ads": "1.5E8", "out_clicks": "5.0E7", "msgs_all": "100000.0", "msgs_ads": "80000.0",
            "msgs_clicks": "20000.0", "max_lag": "12.0", "offline": "0.0", "active": "1.0", "unclean": "0.0",
            "dirty": "35.0", "idle": "4200.0", "size_ads0": "5.24288E8", "size_ads1": "4.0E8",
            "size_clicks0": "1.0E8"},
           {"urp": "2.0", "min_isr": "1.0", "leaders": "20.0", "replicas": "40.0", "shrinks": "8.0",
            "expands": "2.0", "in_all": "2.0E8", "in_ads": "1.7E8", "in_clicks": "3.0E7", "out_all": "3.0E8",
            "out_ads": "2.3E8", "out_clicks": "7.0E7", "msgs_all": "150000.0", "msgs_ads": "120000.0",
            "msgs_clicks": "30000.0", "max_lag": "9.0", "offline": "0.0", "active": "1.0", "unclean": "0.0",
            "dirty": "36.0", "idle": "5100.0", "size_ads0": "5.5E8", "size_ads1": "4.2E8",
            "size_clicks0": "1.1E8"}),
    "b2": ({"urp": "0.0", "min_isr": "0.0", "leaders": "4.0", "replicas": "40.0", "shrinks": "0.0",
            "expands": "0.0", "in_all": "1.0E7", "in_ads": "0.0", "in_clicks": "1.0E7", "out_all": "1.0E7",
            "out_ads": "0.0", "out_clicks": "1.0E7", "msgs_all": "10000.0", "msgs_ads": "0.0",
            "msgs_clicks": "10000.0", "max_lag": "0.0", "offline": "NaN", "active": "0.0", "unclean": "0.0",
            "dirty": "10.0", "idle": "3000.0", "size_ads0": "5.2E8", "size_ads1": "4.0E8",
            "size_clicks0": "1.0E8"},
           {"urp": "0.0", "min_isr": "0.0", "leaders": "4.0", "replicas": "40.0", "shrinks": "0.0",
            "expands": "0.0", "in_all": "2.0E7", "in_ads": "0.0", "in_clicks": "2.0E7", "out_all": "2.0E7",
            "out_ads": "0.0", "out_clicks": "2.0E7", "msgs_all": "12000.0", "msgs_ads": "0.0",
            "msgs_clicks": "12000.0", "max_lag": "0.0", "offline": "NaN", "active": "0.0", "unclean": "0.0",
            "dirty": "10.0", "idle": "4000.0", "size_ads0": "5.5E8", "size_ads1": "4.2E8",
            "size_clicks0": "1.1E8"}),
}
EXPORTERS = {"conveyor": CONVEYOR, "strimzi": STRIMZI}


def scraped(exporter: str, node: str, which: int) -> list[Sample]:
    """The node's first (0) or second (1) scrape, as Prometheus holds it."""
    text = EXPORTERS[exporter].substitute(STATES[node][which])
    return [Sample({"__name__": s.name, **s.labels, "cluster": "central", "node": node},
                   None if math.isnan(s.value) else s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]


def selected(samples: list[Sample], names: str) -> list[Sample]:
    """What ``{__name__=~"names"}`` selects: the regex anchored at both ends."""
    return [s for s in samples if re.fullmatch(names, s.labels["__name__"])]


def rates(exporter: str, node: str, name: str) -> list[Sample]:
    """What ``rate()`` of metric ``name`` (either rule set's name) over the two scrapes gives:
    per series its increase over the 10 s between them, without ``__name__``."""
    def key(sample: Sample) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(sample.labels.items()))

    before = {key(s): s.value for s in selected(scraped(exporter, node, 0), either_name(name))}
    return [Sample({k: v for k, v in s.labels.items() if k != "__name__"}, (s.value - before[key(s)]) / 10)
            for s in selected(scraped(exporter, node, 1), either_name(name)) if s.value is not None]


def readings(exporter: str, node: str) -> tuple[BrokerReading, BrokerReading]:
    target, up = Target(node, f"http://{node}/metrics", int(node[1:])), [Sample({"node": node}, 1.0)]
    return tuple(readings_from_samples([target], T0 + 10_000 * which, up,
                                       selected(scraped(exporter, node, which), names_regex()))[0]
                 for which in (0, 1))


#: What Strimzi's rules export too, so what must read the same from both.
SHARED = ("under_replicated", "under_min_isr", "leaders", "replicas", "max_follower_lag", "offline_partitions",
          "active_controller", "isr_shrinks", "isr_expands", "bytes_in", "bytes_out", "unclean_elections",
          "cleaner_dirty_percent", "cleaner_idle_ms")


def shared(reading: BrokerReading) -> dict[str, object]:
    return {name: getattr(reading, name) for name in SHARED}


def test_a_broker_reads_the_same_from_either_exporter() -> None:
    conveyor, strimzi = readings("conveyor", "b1")[1], readings("strimzi", "b1")[1]
    assert shared(strimzi) == shared(conveyor) == {
        "under_replicated": 2.0, "under_min_isr": 1.0, "leaders": 20.0, "replicas": 40.0, "max_follower_lag": 9.0,
        "offline_partitions": 0.0, "active_controller": 1.0, "isr_shrinks": 8.0, "isr_expands": 2.0,
        "bytes_in": 2e8, "bytes_out": 3e8, "unclean_elections": 0.0, "cleaner_dirty_percent": 36.0,
        "cleaner_idle_ms": 5100.0}
    assert strimzi.is_broker and conveyor.is_broker


def test_what_strimzis_rules_do_not_export_stays_unknown() -> None:
    conveyor, strimzi = readings("conveyor", "b1")[1], readings("strimzi", "b1")[1]
    assert (conveyor.p99_ms, conveyor.coordinator_load_ms, conveyor.groups) == ({"Produce": 4.0, "Metadata": 1.0}, 12.0, 7.0)
    assert (strimzi.p99_ms, strimzi.coordinator_load_ms, strimzi.groups) == ({}, None, None)


def cluster(exporter: str) -> ClusterHealth:
    nodes = [readings(exporter, node) for node in STATES]
    return assess_cluster("central", T0 + 10_000, [broker_health(after, before) for before, after in nodes])


def test_the_cluster_health_is_the_same_from_either_exporter() -> None:
    conveyor, strimzi = cluster("conveyor"), cluster("strimzi")
    assert (strimzi.status, strimzi.active_controllers, strimzi.unclean_elections) == (
        conveyor.status, conveyor.active_controllers, conveyor.unclean_elections)
    assert strimzi.status == "CRITICAL"  # a partition below min ISR
    assert (strimzi.under_replicated, strimzi.under_min_isr, strimzi.offline_partitions) == (2, 1, 0)
    assert strimzi.skew == conveyor.skew and strimzi.skew["bytes_in"] is not None
    rates = [(b.bytes_in_per_s, b.bytes_out_per_s, b.isr_shrinks_per_s, b.isr_expands_per_s)
             for b in strimzi.brokers]
    assert rates == [(b.bytes_in_per_s, b.bytes_out_per_s, b.isr_shrinks_per_s, b.isr_expands_per_s)
                     for b in conveyor.brokers] == [(1e7, 1e7, 0.5, 0.1), (1e6, 1e6, 0.0, 0.0)]


@pytest.mark.parametrize("node", list(STATES))
def test_partition_loads_are_the_same_from_either_exporter(node: str) -> None:
    def measured(exporter: str) -> tuple[list[BrokerLoad], dict[tuple[str, int], PartitionLoad]]:
        sizes = selected(scraped(exporter, node, 1), either_name(SIZE))
        brokers = broker_loads({node: int(node[1:])}, rates(exporter, node, BYTES_IN), rates(exporter, node, BYTES_OUT),
                               sizes)
        leaders = {("ad-events", 0): 1, ("ad-events", 1): 1, ("clicks", 0): 2}
        return brokers, partition_loads(leaders, brokers)

    (conveyor_brokers, conveyor_loads), (strimzi_brokers, strimzi_loads) = measured("conveyor"), measured("strimzi")
    assert strimzi_brokers == conveyor_brokers
    [strimzi] = strimzi_brokers
    assert strimzi.bytes_in and strimzi.bytes_out and len(strimzi.sizes) == 3
    assert strimzi_loads == conveyor_loads


def test_produce_rates_per_topic_are_the_same_from_either_exporter() -> None:
    def produced(exporter: str) -> dict[str, float]:
        return {s.labels["topic"]: s.value for s in rates(exporter, "b1", MESSAGES_IN) if "topic" in s.labels}

    assert produced("strimzi") == produced("conveyor") == {"ad-events": 4000.0, "clicks": 1000.0}


# --- The table ---

def test_every_metric_a_reader_reads_is_in_the_table_once() -> None:
    read = {*health.READ, loads.SIZE, loads.BYTES_IN, loads.BYTES_OUT, MESSAGES_IN}
    table = [*SAME, *RENAMED, *MISSING]
    assert len(table) == len(set(table))
    assert set(table) == read


@pytest.mark.parametrize("theirs, ours", [
    pytest.param("kafka_server_brokertopicmetrics_bytesin_total", "kafka_server_brokertopicmetrics_bytesinpersec_total",
                 id="sample"),
    pytest.param("kafka_server_brokertopicmetrics_bytesin", "kafka_server_brokertopicmetrics_bytesinpersec",
                 id="counter-family"),
    pytest.param("kafka_controller_controllerstats_uncleanleaderelections_total",
                 "kafka_controller_controllerstats_uncleanleaderelectionspersec_total", id="controller-meter"),
    pytest.param("kafka_server_brokertopicmetrics_bytesinpersec_total",
                 "kafka_server_brokertopicmetrics_bytesinpersec_total", id="ours-already"),
    pytest.param("kafka_server_replicamanager_leadercount", "kafka_server_replicamanager_leadercount",
                 id="gauge-named-alike"),
    pytest.param("kafka_server_brokertopicmetrics_replicationbytesin_total",
                 "kafka_server_brokertopicmetrics_replicationbytesin_total", id="not-read-left-alone"),
    pytest.param("conveyor_gateway_events_total", "conveyor_gateway_events_total", id="component"),
])
def test_canonical_name(theirs: str, ours: str) -> None:
    assert canonical_name(theirs) == ours


def test_strimzis_label_names_are_made_ours_only_where_they_differ() -> None:
    lag = "kafka_server_replicafetchermanager_maxlag"
    assert canonical_labels(lag, {"clientId": "Replica"}) == {"clientid": "Replica"}
    assert canonical_labels(lag, {"clientid": "Replica"}) == {"clientid": "Replica"}
    assert canonical_labels("kafka_log_log_size", {"topic": "t", "partition": "0"}) == {"topic": "t", "partition": "0"}
    assert canonical_labels("x", {"clientId": "Replica"}) == {"clientId": "Replica"}


def test_a_strimzi_page_has_our_family_names_and_types_once_named_ours() -> None:
    def families(exporter: str) -> dict[str, str]:
        text = EXPORTERS[exporter].substitute(STATES["b1"][0])
        return {canonical_name(f.name): f.type for f in text_string_to_metric_families(text)
                if f.name.startswith("kafka_")}

    read = {name.removesuffix("_total") for name in (*SAME, *RENAMED)}
    conveyor, strimzi = families("conveyor"), families("strimzi")
    assert strimzi["kafka_server_replicamanager_isrshrinkspersec"] == "counter"
    assert {n: t for n, t in strimzi.items() if n in read} == {n: t for n, t in conveyor.items() if n in read}
    assert read <= strimzi.keys()
