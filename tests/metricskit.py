"""Every metric name Conveyor's components export, as a scrape shows them (counters with _total,
histograms with _bucket, _sum and _count): what rules and dashboards may name."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry

from conveyor.dispatch.metrics import NodeMetrics
from conveyor.gateway.metrics import GatewayMetrics
from conveyor.ops.exporter_names import MISSING, RENAMED, SAME
from conveyor.ops.metrics import state_families
from conveyor.ops.throttle.controller import ThrottleMetrics
from conveyor.pipeline.metrics import LakeMetrics
from conveyor.pipeline.realtime.metrics import RealtimeMetrics
from conveyor.replicate.metrics import ReplicateMetrics

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
#: The watcher's counters (built on each scrape, beside its state's gauges).
_OPS_COUNTERS = ("conveyor_ops_rounds", "conveyor_ops_round_errors", "conveyor_ops_admin_calls",
                 "conveyor_ops_offset_findings", "conveyor_ops_sample_failures", "conveyor_ops_cluster_leader_moves")


def _names(registry: CollectorRegistry) -> set[str]:
    return {family.name + suffix for family in registry.collect() for suffix in _SUFFIXES[family.type]}


def exported_metric_names() -> set[str]:
    registries = [GatewayMetrics("dc1").registry, ReplicateMetrics().registry, NodeMetrics().registry,
                  LakeMetrics(timedelta(0)).registry, RealtimeMetrics().registry, ThrottleMetrics().registry]
    names = set().union(*(_names(r) for r in registries))
    names |= {family.name + suffix for family in state_families().values() for suffix in _SUFFIXES[family.type]}
    return names | {f"{name}_total" for name in _OPS_COUNTERS}


def exported_label_names() -> dict[str, set[str]]:
    """Per exported metric name, the label names its series carry (the registry's own bookkeeping:
    a labelled metric with no series yet shows no labels on a scrape)."""
    registries = [GatewayMetrics("dc1").registry, ReplicateMetrics().registry, NodeMetrics().registry,
                  LakeMetrics(timedelta(0)).registry, RealtimeMetrics().registry, ThrottleMetrics().registry]
    labels: dict[str, set[str]] = {}
    for registry in registries:
        for name, collector in registry._names_to_collectors.items():  # noqa: SLF001 (no public view)
            extra = {"le"} if name.endswith("_bucket") else set()
            labels[name] = set(getattr(collector, "_labelnames", ())) | extra
    for family in state_families().values():
        for suffix in _SUFFIXES[family.type]:
            labels[family.name + suffix] = set(family._labelnames)  # noqa: SLF001
    return labels


#: node_exporter's metric names the host rules and dashboards read, with their labels (as 1.5.0
#: serves them with the local runtime's collectors: tests/integration/ops/test_host_watch.py checks
#: it against the real one).
_FILESYSTEM = {"device", "fstype", "mountpoint"}
NODE_EXPORTER_LABELS: dict[str, set[str]] = {
    "node_network_receive_bytes_total": {"device"}, "node_network_transmit_bytes_total": {"device"},
    "node_network_speed_bytes": {"device"},
    "node_disk_reads_completed_total": {"device"}, "node_disk_writes_completed_total": {"device"},
    "node_disk_read_time_seconds_total": {"device"}, "node_disk_write_time_seconds_total": {"device"},
    "node_disk_io_time_seconds_total": {"device"},
    "node_filesystem_size_bytes": _FILESYSTEM, "node_filesystem_avail_bytes": _FILESYSTEM,
    "node_cpu_seconds_total": {"cpu", "mode"},
}

#: Labels Prometheus gives every series of a Kafka node's page: `conveyor up`'s configuration (and a
#: user's Prometheus, per docs/ops.md) labels each node's target with its cluster and node.
_NODE_TARGET = {"cluster", "node"}
#: The brokers' JMX exporter names the broker rules and dashboards read, under both rule sets
#: (conveyor.ops.exporter_names), with their labels; and Prometheus's own `up` of each target.
KAFKA_EXPORTER_LABELS: dict[str, set[str]] = {
    "up": _NODE_TARGET,
    **{name: _NODE_TARGET for name in (*SAME, *RENAMED, *RENAMED.values(), *MISSING)},
    **{name: _NODE_TARGET | {"topic"} for name in (*RENAMED, *RENAMED.values()) if "brokertopicmetrics" in name},
    "kafka_log_log_size": _NODE_TARGET | {"topic", "partition"},
    "kafka_network_requestmetrics_totaltimems": _NODE_TARGET | {"request", "quantile"},
    "kafka_server_replicafetchermanager_maxlag": _NODE_TARGET | {"clientid"},
}
