"""The watcher's Prometheus metrics (names in docs/ops.md), built from its latest state on scrape.

They are how its judgments reach an alert: the rules of conveyor.ops.rules read them (a group's
status, its offsets moved back or lost, a cluster it could not sample), and Alertmanager routes
what fires.

A collector rather than long-lived Gauges: a group, partition or node that disappears leaves the
page with its state instead of lingering with a stale value.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from conveyor.ops.health import LOADS
from conveyor.ops.watch import OpsState, Watcher


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"conveyor_ops_{name}", doc, labels=labels)


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    """A broker's own counter since it started, passed on: Prometheus' rate() makes it a rate, over
    whatever window a rule or panel wants, where a rate between the watcher's rounds would fix it."""
    return CounterMetricFamily(f"conveyor_ops_{name}", doc, labels=labels)


class QuantileFamily(Metric):
    """A summary of the quantiles a broker computed over its own recent requests (Kafka's
    reservoir): no sum or count go with them, and they cannot be added up across brokers."""

    def __init__(self, name: str, doc: str, labels: list[str]) -> None:
        super().__init__(f"conveyor_ops_{name}", doc, "summary")
        self._labelnames = (*labels, "quantile")

    def add_metric(self, values: list[str], value: float) -> None:
        """``values``: the labels', the quantile's last."""
        self.samples.append(Sample(self.name, dict(zip(self._labelnames, values)), value))


Family = GaugeMetricFamily | CounterMetricFamily | QuantileFamily


def state_families() -> dict[str, Family]:
    """The families of the watcher's state, empty: a scrape fills them, a rules test names them."""
    node, topic = ["cluster", "node"], ["cluster", "node", "topic"]
    return {
        "group_status": _gauge("group_status", "Worst partition status: 0 OK, 1 WARN, 2 STALL, 3 STOP, "
                               "4 REWIND, 5 ERR", ["cluster", "group"]),
        "group_lag": _gauge("group_lag_records", "Total lag of the group", ["cluster", "group"]),
        "group_behind": _gauge("group_seconds_behind", "Most seconds behind of the group's partitions",
                               ["cluster", "group"]),
        "part_lag": _gauge("partition_lag_records", "Lag per partition", ["cluster", "group", "topic", "partition"]),
        "part_status": _gauge("partition_status", "Status per partition (as group_status)",
                              ["cluster", "group", "topic", "partition"]),
        "part_behind": _gauge("partition_seconds_behind", "Seconds behind per partition",
                              ["cluster", "group", "topic", "partition"]),
        "lost": _gauge("group_lost_commit_partitions", "Partitions whose committed offset an offset fetch stopped "
                       "answering (the offset manager lost it) in the last 15 minutes", ["cluster", "group"]),
        "moves": _gauge("offset_moves", "Moves of the group's committed offsets seen in the last 15 minutes, by "
                        "kind: rewind, reset_earliest, reset_latest, behind_log_start", ["cluster", "group", "kind"]),
        "amplification": _gauge("read_amplification_ratio", "Read rate over write rate, when above the threshold",
                                ["cluster", "group", "topic"]),
        "up": _gauge("broker_up", "1 when the node's metrics endpoint answered", node),
        "urp": _gauge("broker_under_replicated_partitions", "Under-replicated partitions led by the broker", node),
        "min_isr": _gauge("broker_under_min_isr_partitions", "Partitions below min ISR led by the broker", node),
        "leaders": _gauge("broker_leaders", "Partition leaders on the broker", node),
        "replicas": _gauge("broker_replicas", "Replicas on the broker", node),
        "bytes_in": _counter("broker_in_bytes", "Bytes in from producers since the broker started", node),
        "bytes_out": _counter("broker_out_bytes", "Bytes out to consumers since the broker started", node),
        "shrinks": _counter("broker_isr_shrinks", "ISR shrinks since the broker started", node),
        "expands": _counter("broker_isr_expands", "ISR expands since the broker started", node),
        "follower": _gauge("broker_max_follower_lag_records", "Max lag of the broker's follower fetchers", node),
        "dirty": _gauge("broker_cleaner_max_dirty_ratio", "Max dirty ratio (0..1) of the broker's compacted logs "
                        "(__consumer_offsets among them)", node),
        "cleaner_idle": _gauge("broker_cleaner_idle_seconds", "Seconds since the log cleaner last ran", node),
        "load": _gauge("broker_coordinator_load_seconds", "Longest __consumer_offsets partition load by the group "
                       "coordinator in the last 30 s", node),
        "unclean": _counter("broker_unclean_leader_elections", "Unclean leader elections since the node's "
                            "controller started (the active controller reports them)", node),
        "commits": _counter("broker_offset_commits", "Offset commits handled by the group coordinator since the "
                            "broker started", node),
        "groups": _gauge("broker_groups", "Groups the broker's coordinator holds", node),
        "t_in": _counter("topic_in_bytes", "Bytes in per topic on the broker since it started", topic),
        "t_out": _counter("topic_out_bytes", "Bytes out per topic on the broker since it started", topic),
        "request_time": QuantileFamily("broker_request_time_seconds", "Request total time, the broker's own "
                                       "quantiles over its recent requests", ["cluster", "node", "request"]),
        "c_urp": _gauge("cluster_under_replicated_partitions", "Under-replicated partitions", ["cluster"]),
        "c_min_isr": _gauge("cluster_under_min_isr_partitions", "Partitions below min ISR", ["cluster"]),
        "c_offline": _gauge("cluster_offline_partitions", "Partitions without a leader", ["cluster"]),
        "c_sampled": _gauge("cluster_sampled", "1 when the cluster's offsets were read in the latest round",
                            ["cluster"]),
        "c_controllers": _gauge("cluster_active_controllers", "Active controllers among the nodes that report it",
                                ["cluster"]),
        "c_changes": _gauge("cluster_leader_changes", "Leader changes over the recent window", ["cluster"]),
        "c_skew": _gauge("cluster_load_skew_ratio", "Max over mean per broker", ["cluster", "load"]),
        "c_seconds": _gauge("round_seconds", "Duration of the cluster's latest round", ["cluster"]),
    }


class OpsCollector(Collector):
    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def collect(self) -> Iterator[Metric]:
        watcher = self.watcher
        cycles = CounterMetricFamily("conveyor_ops_rounds", "Watcher rounds completed", labels=[])
        cycles.add_metric([], watcher.cycles)
        failed = CounterMetricFamily("conveyor_ops_round_errors", "Watcher rounds that failed unexpectedly", labels=[])
        failed.add_metric([], watcher.cycle_errors)
        yield from (cycles, failed)
        calls = CounterMetricFamily("conveyor_ops_admin_calls", "Admin API calls made by the sampler",
                                    labels=["cluster", "call"])
        findings = CounterMetricFamily("conveyor_ops_offset_findings", "Distinct rewinds, resets and positions "
                                       "behind the log start seen", labels=["cluster", "group", "kind"])
        sample_failures = CounterMetricFamily("conveyor_ops_sample_failures", "Rounds in which a cluster could "
                                              "not be sampled", labels=["cluster"])
        for cw in watcher.clusters:
            for call, n in sorted(cw.calls_total.items()):
                calls.add_metric([cw.cluster, call], n)
            for (group, kind), n in sorted(cw.findings_total.items()):
                findings.add_metric([cw.cluster, group, kind], n)
            sample_failures.add_metric([cw.cluster], cw.failures)
        yield from (calls, findings, sample_failures)
        state = watcher.state
        if state is not None:
            yield from self._state(state)

    def _state(self, state: OpsState) -> Iterator[Metric]:
        g = state_families()
        for c in state.clusters:
            name = c.cluster
            for report in c.groups:
                status = report.status
                g["group_status"].add_metric([name, report.group], int(status.status))
                g["group_lag"].add_metric([name, report.group], status.total_lag)
                behind = [p.seconds_behind for p in status.partitions if p.seconds_behind is not None]
                if behind:
                    g["group_behind"].add_metric([name, report.group], max(behind))
                for p in status.partitions:
                    labels = [name, report.group, p.topic, str(p.partition)]
                    g["part_status"].add_metric(labels, int(p.status))
                    if p.lag is not None:
                        g["part_lag"].add_metric(labels, p.lag)
                    if p.seconds_behind is not None:
                        g["part_behind"].add_metric(labels, p.seconds_behind)
                g["lost"].add_metric([name, report.group], c.lost.get(report.group, 0))
                for a in report.findings.amplification:
                    g["amplification"].add_metric([name, report.group, a.topic], a.ratio)
            for b in c.health.brokers:
                r, labels = b.reading, [name, b.node]
                g["up"].add_metric(labels, 1 if r.up else 0)
                dirty = None if r.cleaner_dirty_percent is None else r.cleaner_dirty_percent / 100
                for key, value in (("urp", r.under_replicated), ("min_isr", r.under_min_isr), ("leaders", r.leaders),
                                   ("replicas", r.replicas), ("bytes_in", r.bytes_in), ("bytes_out", r.bytes_out),
                                   ("shrinks", r.isr_shrinks), ("expands", r.isr_expands),
                                   ("follower", r.max_follower_lag), ("dirty", dirty),
                                   ("commits", r.offset_commits), ("groups", r.groups),
                                   ("unclean", r.unclean_elections),
                                   ("cleaner_idle", None if r.cleaner_idle_ms is None else r.cleaner_idle_ms / 1000),
                                   ("load", None if r.coordinator_load_ms is None else r.coordinator_load_ms / 1000)):
                    if value is not None:
                        g[key].add_metric(labels, value)
                for request, ms in sorted(r.p99_ms.items()):
                    g["request_time"].add_metric([*labels, request, "0.99"], ms / 1000)
                for topic, (bytes_in, bytes_out) in sorted(r.topic_bytes.items()):
                    g["t_in"].add_metric([*labels, topic], bytes_in)
                    g["t_out"].add_metric([*labels, topic], bytes_out)
            h = c.health
            g["c_urp"].add_metric([name], h.under_replicated)
            g["c_min_isr"].add_metric([name], h.under_min_isr)
            if h.offline_partitions is not None:
                g["c_offline"].add_metric([name], h.offline_partitions)
            for (group, kind), n in sorted(c.moves.items()):
                g["moves"].add_metric([name, group, kind], n)
            g["c_sampled"].add_metric([name], 0 if c.error is not None else 1)
            if h.active_controllers is not None:
                g["c_controllers"].add_metric([name], h.active_controllers)
            g["c_changes"].add_metric([name], h.leader_changes)
            for load in LOADS:
                skew = h.skew.get(load)
                if skew is not None:
                    g["c_skew"].add_metric([name, load], skew)
            g["c_seconds"].add_metric([name], c.seconds)
        yield from g.values()


def ops_registry(watcher: Watcher) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(OpsCollector(watcher))
    return registry
