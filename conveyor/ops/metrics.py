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

from conveyor.ops.watch import OpsState, Watcher


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"conveyor_ops_{name}", doc, labels=labels)


def state_families() -> dict[str, GaugeMetricFamily]:
    """The families of the watcher's state, empty: a scrape fills them, a rules test names them."""
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
        "c_urp": _gauge("cluster_under_replicated_partitions", "Partitions whose ISR is shorter than their "
                        "replicas, by cluster metadata", ["cluster"]),
        "c_offline": _gauge("cluster_offline_partitions", "Partitions without a leader, by cluster metadata",
                            ["cluster"]),
        "c_sampled": _gauge("cluster_sampled", "1 when the cluster's offsets were read in the latest round",
                            ["cluster"]),
        "c_changes": _gauge("cluster_leader_changes", "Leader changes over the recent window", ["cluster"]),
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
        leader_moves = CounterMetricFamily("conveyor_ops_cluster_leader_moves", "Partitions whose leader moved, "
                                           "round to round, by cluster metadata", labels=["cluster"])
        for cw in watcher.clusters:
            for call, n in sorted(cw.calls_total.items()):
                calls.add_metric([cw.cluster, call], n)
            for (group, kind), n in sorted(cw.findings_total.items()):
                findings.add_metric([cw.cluster, group, kind], n)
            sample_failures.add_metric([cw.cluster], cw.failures)
            leader_moves.add_metric([cw.cluster], cw.leader_moves_total)
        yield from (calls, findings, sample_failures, leader_moves)
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
            if c.metadata is not None:
                g["c_urp"].add_metric([name], c.metadata.under_replicated)
                g["c_offline"].add_metric([name], c.metadata.offline)
            for (group, kind), n in sorted(c.moves.items()):
                g["moves"].add_metric([name, group, kind], n)
            g["c_sampled"].add_metric([name], 0 if c.error is not None else 1)
            g["c_changes"].add_metric([name], c.health.leader_changes)
            g["c_seconds"].add_metric([name], c.seconds)
        yield from g.values()


def ops_registry(watcher: Watcher) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(OpsCollector(watcher))
    return registry
