"""Grafana dashboards as files, over the metric names Conveyor exports. Pure: the dashboards'
documents out (``conveyor ops dashboards`` writes one JSON file each).

Each dashboard picks its Prometheus data source through a ``datasource`` variable, so the files
import unchanged into any Grafana; panels are time series (or a heat strip for the lake's
completeness) with their units, so values show on hover in the operator's units.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conveyor.ops.rules import kafka

_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Panel:
    title: str
    #: (PromQL, legend) per series.
    targets: tuple[tuple[str, str], ...]
    unit: str = "short"
    kind: str = "timeseries"
    description: str = ""


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


# The panels the watcher's dashboard shows too (conveyor.ops.dashboard): one expression for both.
GATEWAY_ACCEPTED = Panel("Events accepted per second", (
    ("sum by (instance, cluster) (rate(conveyor_gateway_events_accepted_total[1m]))", "{{instance}} to {{cluster}}"),),
    "ops")
GATEWAY_P99 = Panel("Request time p99", (
    ("histogram_quantile(0.99, sum by (instance, le) (rate(conveyor_gateway_request_seconds_bucket[1m])))",
     "{{instance}}"),), "s")
REPLICATION_WAITING = Panel("Records waiting per route", (
    ("sum by (route) (conveyor_replicate_lag_records)", "{{route}}"),))
REPLICATION_P99 = Panel("Copy latency p99", (
    ("histogram_quantile(0.99, sum by (route, le) (rate(conveyor_replicate_latency_seconds_bucket[1m])))",
     "{{route}}"),), "s")
LAKE_LOST = Panel("Records lost to retention", (("sum by (topic) (conveyor_lake_lost_records_total)", "{{topic}}"),))
DISPATCH_BACKLOG = Panel("Backlog per topic and group", (
    ("sum by (topic, group) (conveyor_dispatch_backlog)", "{{topic}} / {{group}}"),))
HOST_DISK_BUSY = Panel("Disk busy", (("rate(node_disk_io_time_seconds_total[1m])", "{{instance}} {{device}}"),),
                       "percentunit", description="Near 1 for long: a RAID rebuild or a saturated disk (HostDiskBusy).")
HOST_FILESYSTEM_USED = Panel("Filesystem used", (
    ("1 - node_filesystem_avail_bytes / node_filesystem_size_bytes", "{{instance}} {{mountpoint}}"),), "percentunit")
HOST_NETWORK_BYTES = Panel("Network bytes per second", (
    ("rate(node_network_receive_bytes_total[1m])", "{{instance}} {{device}} in"),
    ("rate(node_network_transmit_bytes_total[1m])", "{{instance}} {{device}} out")), "Bps",
    description="Every interface, those that report no link speed too (the loopback, many virtual NICs).")


DASHBOARDS = (
    Dashboard("conveyor-brokers", "Conveyor: brokers", (
        Panel("Brokers up", (('up{cluster!="",node!=""}', "{{cluster}} {{node}}"),), "bool"),
        Panel("Under-replicated and under-min-ISR partitions", (
            ("conveyor_ops_cluster_under_replicated_partitions", "{{cluster}} under-replicated"),
            ("sum by (cluster) (kafka_server_replicamanager_underminisrpartitioncount)", "{{cluster}} under min ISR"),
            ("conveyor_ops_cluster_offline_partitions", "{{cluster}} offline"))),
        Panel("Request time p99", (('kafka_network_requestmetrics_totaltimems{quantile="0.99",'
                                    'request=~"Produce|FetchConsumer|Metadata"} / 1000', "{{node}} {{request}}"),), "s"),
        Panel("Bytes in and out per broker", (
            (kafka("kafka_server_brokertopicmetrics_bytesinpersec_total",
                   lambda series: f'rate({series}{{topic=""}}[1m])'), "{{node}} in"),
            (kafka("kafka_server_brokertopicmetrics_bytesoutpersec_total",
                   lambda series: f'rate({series}{{topic=""}}[1m])'), "{{node}} out")), "Bps",
            description="Bytes out rising while bytes in stay flat is read amplification."),
        Panel("Leaders per broker", (("kafka_server_replicamanager_leadercount", "{{cluster}} {{node}}"),)),
        Panel("Leader changes and ISR shrinks", (
            ("conveyor_ops_cluster_leader_changes", "{{cluster}} leader changes"),
            (kafka("kafka_server_replicamanager_isrshrinkspersec_total", lambda series: f"rate({series}[1m])"),
             "{{node}} ISR shrinks/s"))),
        Panel("Consumer group lag", (("conveyor_ops_group_lag_records", "{{cluster}} {{group}}"),)),
        Panel("Consumer group status (0 OK .. 5 ERR)", (("conveyor_ops_group_status", "{{cluster}} {{group}}"),)),
    )),
    Dashboard("conveyor-gateway", "Conveyor: gateway", (
        GATEWAY_ACCEPTED,
        Panel("Requests refused per second, by reason", (
            ("sum by (reason) (rate(conveyor_gateway_requests_rejected_total[1m]))", "{{reason}}"),), "reqps",
            description="unavailable and overloaded are answered 503; the others are the clients' (4xx)."),
        GATEWAY_P99,
        Panel("Writing to the failover cluster", (("conveyor_gateway_failed_over", "{{instance}}"),), "bool"),
    )),
    Dashboard("conveyor-replication", "Conveyor: replication", (
        REPLICATION_WAITING,
        REPLICATION_P99,
        Panel("Records copied per second", (("sum by (route) (rate(conveyor_replicate_records_total[1m]))",
                                             "{{route}}"),), "ops"),
        Panel("Offsets lost to source retention", (("sum by (route, topic) (conveyor_replicate_gap_records_total)",
                                                    "{{route}} {{topic}}"),)),
        Panel("Stopped partitions and unreachable clusters", (
            ("sum by (route) (conveyor_replicate_partition_stopped)", "{{route}} stopped"),
            ("conveyor_replicate_cluster_unreachable", "{{route}} cannot reach {{cluster}}"))),
    )),
    Dashboard("conveyor-lake", "Conveyor: lake", (
        Panel("Complete hours (heat strip: seconds since the last complete hour)", (
            ("time() - conveyor_lake_complete_until_timestamp_seconds", "{{topic}}"),), "s", "state-timeline"),
        Panel("Rows landed and quarantined per second", (
            ("sum by (topic) (rate(conveyor_lake_rows_landed_total[5m]))", "{{topic}} landed"),
            ("sum by (topic) (rate(conveyor_lake_rows_quarantined_total[5m]))", "{{topic}} quarantined")), "ops"),
        LAKE_LOST,
        Panel("Run duration", (("conveyor_lake_run_duration_seconds", "last run"),), "s"),
    )),
    Dashboard("conveyor-realtime", "Conveyor: real-time views", (
        Panel("Latency from event time to Redis, p50 / p99", tuple(
            (f"histogram_quantile({q}, sum by (le) (rate(conveyor_realtime_latency_seconds_bucket[5m])))", name)
            for q, name in ((0.5, "p50"), (0.99, "p99"))), "s"),
        Panel("Events applied and rejected per second", (
            ("rate(conveyor_realtime_events_applied_total[1m])", "applied"),
            ("sum by (view, kind) (rate(conveyor_realtime_events_rejected_total[1m]))", "{{view}} rejected: {{kind}}")),
            "ops"),
        Panel("Batches per 5 minutes", (("sum(increase(conveyor_realtime_batches_total[5m]))", "batches"),),
              description="None for 15 minutes is the RealtimeStalled alert."),
        Panel("Batch duration and size", (
            ("conveyor_realtime_batch_duration_seconds", "seconds"),
            ("conveyor_realtime_batch_records", "records")), "short"),
    )),
    Dashboard("conveyor-dispatch", "Conveyor: dispatcher", (
        DISPATCH_BACKLOG,
        Panel("Acked and redelivered per second", (
            ("sum by (group) (rate(conveyor_dispatch_acked_total[1m]))", "{{group}} acked"),
            ("sum by (group) (rate(conveyor_dispatch_redelivered_total[1m]))", "{{group}} redelivered")), "ops"),
        Panel("Clients connected", (("sum by (group) (conveyor_dispatch_clients_connected)", "{{group}}"),)),
        Panel("Dead letters per second", (
            ("sum by (group) (rate(conveyor_dispatch_dead_lettered_total[5m]))", "{{group}} dead-lettered"),
            ("sum by (group) (rate(conveyor_dispatch_dead_letters_unwritable_total[5m]))", "{{group}} unwritable")),
              "ops"),
        Panel("Delivery latency p99", (("histogram_quantile(0.99, sum by (le) "
                                        "(rate(conveyor_dispatch_delivery_latency_seconds_bucket[1m])))", "p99"),), "s"),
    )),
    # node_exporter's names: a remote broker host's node_exporter, or the local runtime's.
    Dashboard("conveyor-hosts", "Conveyor: broker hosts", (
        Panel("Network bytes over link speed", (
            ("rate(node_network_receive_bytes_total[1m]) / on (instance, device) node_network_speed_bytes",
             "{{instance}} {{device}} in"),
            ("rate(node_network_transmit_bytes_total[1m]) / on (instance, device) node_network_speed_bytes",
             "{{instance}} {{device}} out")), "percentunit",
            description="A link near 1 is saturated: replication and consumers wait on it (HostNetworkSaturated)."),
        HOST_NETWORK_BYTES,
        HOST_DISK_BUSY,
        Panel("Disk time per I/O", ((
            "(rate(node_disk_read_time_seconds_total[1m]) + rate(node_disk_write_time_seconds_total[1m])) / "
            "(rate(node_disk_reads_completed_total[1m]) + rate(node_disk_writes_completed_total[1m]))",
            "{{instance}} {{device}}"),), "s", description="Rising alone: a disk going bad (HostDiskSlow)."),
        HOST_FILESYSTEM_USED,
        Panel("CPU steal", (('avg by (instance) (rate(node_cpu_seconds_total{mode="steal"}[1m]))', "{{instance}}"),),
              "percentunit"),
    )),
)


def _panel(index: int, panel: Panel) -> dict[str, Any]:
    return {
        "id": index + 1, "type": panel.kind, "title": panel.title, "description": panel.description,
        "datasource": _DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"tooltip": {"mode": "multi"}, "legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [{"refId": chr(ord("A") + i), "datasource": _DATASOURCE, "expr": expr, "legendFormat": legend}
                    for i, (expr, legend) in enumerate(panel.targets)],
    }


def dashboard_document(dashboard: Dashboard) -> dict[str, Any]:
    return {
        "uid": dashboard.uid, "title": dashboard.title, "tags": ["conveyor"], "timezone": "utc",
        "schemaVersion": 39, "version": 1, "refresh": "10s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus"}]},
        "panels": [_panel(i, p) for i, p in enumerate(dashboard.panels)],
    }
