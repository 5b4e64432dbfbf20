"""Broker and cluster health from the JMX exporter's metrics. Pure: no HTTP, no clock.

What operators must watch (docs/architecture.md, section 6): load per broker, leader re-elections,
out-of-sync partitions and the maximum replication lag (worry when it stays above zero), and the
response time of simple requests with an alarm above 10 s. :func:`reading_from_samples` picks those
values out of one node's latest samples (Prometheus's, conveyor.ops.broker_readings);
:func:`assess_cluster` sums them up per cluster for ``conveyor ops health`` and the dashboard. The
alerts over the same samples are Prometheus rules (conveyor.ops.rules).

Sources, and why: per-broker values come from the brokers themselves (each partition's leader
reports it under-replicated, so a cluster's count is the sum over brokers); offline partitions,
the active controller and unclean elections from the active controller; leader changes from
cluster metadata (KRaft has no leader-election rate metric), counted by the sampler.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: Requests whose p99 is watched: what producers, consumers and every client's bootstrap wait on.
WATCHED_REQUESTS = ("Produce", "FetchConsumer", "Metadata")
#: Per-broker loads compared across brokers for skew.
LOADS = ("bytes_in", "bytes_out", "leaders", "replicas")


# The exporter's sample names (conveyor/runtime/jmx-exporter.yaml) -> our field names. Samples of
# pages printed under Strimzi's rules reach here renamed to these (conveyor.ops.exporter_names).
_VALUES = {
    "kafka_server_replicamanager_underreplicatedpartitions": "under_replicated",
    "kafka_server_replicamanager_underminisrpartitioncount": "under_min_isr",
    "kafka_server_replicamanager_leadercount": "leaders",
    "kafka_server_replicamanager_partitioncount": "replicas",
    "kafka_server_replicamanager_isrshrinkspersec_total": "isr_shrinks",
    "kafka_server_replicamanager_isrexpandspersec_total": "isr_expands",
    "kafka_server_brokertopicmetrics_bytesinpersec_total": "bytes_in",
    "kafka_server_brokertopicmetrics_bytesoutpersec_total": "bytes_out",
    "kafka_controller_kafkacontroller_offlinepartitionscount": "offline_partitions",
    "kafka_controller_kafkacontroller_activecontrollercount": "active_controller",
    "kafka_controller_controllerstats_uncleanleaderelectionspersec_total": "unclean_elections",
    # The offset manager: the log cleaner that compacts __consumer_offsets (over every compacted log
    # of the broker: Kafka has no per-topic dirty ratio metric) and the group coordinator.
    "kafka_log_logcleanermanager_max_dirty_percent": "cleaner_dirty_percent",
    "kafka_log_logcleanermanager_time_since_last_run_ms": "cleaner_idle_ms",
    "kafka_server_group_coordinator_metrics_partition_load_time_max": "coordinator_load_ms",
    "kafka_server_group_coordinator_metrics_offset_commit_rate": "offset_commit_rate",
    "kafka_server_group_coordinator_metrics_offset_commit_count": "offset_commits",
    "kafka_coordinator_group_groupmetadatamanager_numgroups": "groups",
    "kafka_coordinator_group_groupmetadatamanager_numoffsets": "offsets",
}
_MAX_LAG = "kafka_server_replicafetchermanager_maxlag"
_TOTAL_TIME = "kafka_network_requestmetrics_totaltimems"
#: Every metric a reading is made of, by our names.
READ: tuple[str, ...] = (*_VALUES, _MAX_LAG, _TOTAL_TIME)

#: (sample name, labels, value), as flattened from a Prometheus text page.
MetricSample = tuple[str, Mapping[str, str], float]


@dataclass(frozen=True, slots=True)
class BrokerReading:
    """What one node's latest samples said. None: the node does not report it (a dedicated
    controller has no replicas, a broker that is not the active controller has no offline count)."""

    node: str
    at_ms: int
    broker_id: int | None = None
    #: Why there are no figures (its page did not answer the latest scrape); None when it answered.
    error: str | None = None
    #: False for a dedicated controller; None to infer it from the metrics (a page without its role).
    broker: bool | None = None
    under_replicated: float | None = None
    under_min_isr: float | None = None
    leaders: float | None = None
    replicas: float | None = None
    max_follower_lag: float | None = None
    offline_partitions: float | None = None
    active_controller: float | None = None
    # Counters since the node started; rates come from two readings.
    isr_shrinks: float | None = None
    isr_expands: float | None = None
    bytes_in: float | None = None
    bytes_out: float | None = None
    unclean_elections: float | None = None
    #: Max dirty ratio of the compacted logs (percent) and ms since the cleaner last looked for work.
    cleaner_dirty_percent: float | None = None
    cleaner_idle_ms: float | None = None
    #: Longest load of a __consumer_offsets partition by the coordinator in the last 30 s (Kafka's
    #: window; absent when none loaded), offset commits per second (Kafka's rate) and since the node
    #: started, groups and offsets it holds.
    coordinator_load_ms: float | None = None
    offset_commit_rate: float | None = None
    offset_commits: float | None = None
    groups: float | None = None
    offsets: float | None = None
    #: request -> p99 of its total time, milliseconds.
    p99_ms: Mapping[str, float] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return self.error is None

    @property
    def is_broker(self) -> bool:
        return self.broker if self.broker is not None else (self.replicas is not None or not self.up)


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def reading_from_samples(node: str, at_ms: int, samples: Iterable[MetricSample], broker_id: int | None = None,
                         broker: bool | None = None) -> BrokerReading:
    values: dict[str, float] = {}
    p99: dict[str, float] = {}
    max_lag: float | None = None
    for name, labels, raw in samples:
        value = _number(raw)
        if value is None:
            continue
        if name in _VALUES and "topic" not in labels:
            values[_VALUES[name]] = value
        elif name == _MAX_LAG:
            max_lag = value if max_lag is None else max(max_lag, value)
        elif name == _TOTAL_TIME and labels.get("quantile") == "0.99" and labels.get("request") in WATCHED_REQUESTS:
            p99[labels["request"]] = value
    return BrokerReading(node, at_ms, broker_id, None, broker, max_follower_lag=max_lag, p99_ms=p99, **values)


def rate(now: float | None, before: float | None, seconds: float) -> float | None:
    """Per-second increase of a counter; None when unknown or the counter restarted (node restart)."""
    if now is None or before is None or seconds <= 0 or now < before:
        return None
    return (now - before) / seconds


@dataclass(frozen=True, slots=True)
class BrokerHealth:
    reading: BrokerReading
    bytes_in_per_s: float | None = None
    bytes_out_per_s: float | None = None
    isr_shrinks_per_s: float | None = None
    isr_expands_per_s: float | None = None

    @property
    def node(self) -> str:
        return self.reading.node

    def load(self, name: str) -> float | None:
        if name == "bytes_in":
            return self.bytes_in_per_s
        if name == "bytes_out":
            return self.bytes_out_per_s
        return getattr(self.reading, name)


def broker_health(now: BrokerReading, before: BrokerReading | None) -> BrokerHealth:
    if before is None or not now.up or not before.up:
        return BrokerHealth(now)
    seconds = (now.at_ms - before.at_ms) / 1000
    return BrokerHealth(now, rate(now.bytes_in, before.bytes_in, seconds),
                        rate(now.bytes_out, before.bytes_out, seconds),
                        rate(now.isr_shrinks, before.isr_shrinks, seconds),
                        rate(now.isr_expands, before.isr_expands, seconds))


def skew(values: Sequence[float]) -> float | None:
    """Max over mean; None without values or load."""
    if not values:
        return None
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else None


# --- A cluster's state ---

@dataclass(frozen=True, slots=True)
class ClusterHealth:
    """What a cluster's nodes said in one round, summed up. The alerts over these values are
    Prometheus rules (conveyor.ops.rules) over the watcher's metrics (conveyor.ops.metrics)."""

    cluster: str
    at_ms: int
    brokers: tuple[BrokerHealth, ...]
    under_replicated: int
    under_min_isr: int
    offline_partitions: int | None
    #: Leader changes seen in metadata over the recent window, and the window's span in seconds.
    leader_changes: int
    leader_change_span_s: float
    #: Max over mean per load (bytes_in, bytes_out, leaders, replicas) across brokers that answered.
    skew: Mapping[str, float | None]
    #: Active controllers among the nodes that report it; None when none does.
    active_controllers: int | None = None
    #: Unclean leader elections since the active controller started.
    unclean_elections: int = 0
    #: Why the brokers' figures could not be read (no Prometheus, or it did not answer); the counts
    #: above then come from cluster metadata alone.
    figures_error: str | None = None

    @property
    def status(self) -> str:
        """CRITICAL when writes fail or may be lost: a node not answering, partitions offline or
        below min ISR, no active controller, an unclean election; DEGRADED with partitions
        under-replicated; OK otherwise. The one-word answer of ``conveyor ops health``."""
        if (any(not b.reading.up for b in self.brokers) or (self.offline_partitions or 0) > 0
                or self.under_min_isr > 0 or self.active_controllers == 0 or self.unclean_elections > 0):
            return "CRITICAL"
        return "DEGRADED" if self.under_replicated > 0 else "OK"


@dataclass(frozen=True, slots=True)
class MetadataCounts:
    """Cluster metadata's view: what the watcher exports for the rules (it needs no exporter), and
    the fallback of ClusterHealth when no broker's figures are read."""

    under_replicated: int = 0
    offline: int = 0


def assess_cluster(cluster: str, at_ms: int, brokers: Sequence[BrokerHealth], changes: int = 0,
                   change_span_s: float = 0.0, metadata: MetadataCounts | None = None,
                   figures_error: str | None = None) -> ClusterHealth:
    """A cluster's sums over its nodes. ``changes``: the leader changes seen in metadata."""
    up = [b for b in brokers if b.reading.up]
    measured = [b for b in up if b.reading.under_replicated is not None]
    meta = metadata or MetadataCounts()
    urp = int(sum(b.reading.under_replicated or 0 for b in measured)) if measured else meta.under_replicated
    under_isr = int(sum(b.reading.under_min_isr or 0 for b in up))
    # Offline partitions and unclean elections come from the active controller alone.
    offline_values = [b.reading.offline_partitions for b in up if b.reading.offline_partitions is not None]
    offline = int(max(offline_values)) if offline_values else (meta.offline if metadata else None)
    active = [b.reading.active_controller for b in up if b.reading.active_controller is not None]
    unclean = max((b.reading.unclean_elections or 0 for b in up), default=0.0)
    loaded = [b for b in up if b.reading.is_broker]
    ratios: dict[str, float | None] = {}
    for load in LOADS:
        values = [v for v in (b.load(load) for b in loaded) if v is not None]
        ratios[load] = skew(values) if len(values) >= 2 else None
    return ClusterHealth(cluster, at_ms, tuple(brokers), urp, under_isr, offline, changes, change_span_s, ratios,
                         int(sum(active)) if active else None, int(unclean), figures_error)


def leader_moves(before: Mapping[tuple[str, int], int], now: Mapping[tuple[str, int], int]) -> int:
    """Partitions whose leader differs between two metadata snapshots (to or from none included)."""
    return sum(1 for tp, leader in now.items() if tp in before and before[tp] != leader)
