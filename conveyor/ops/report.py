"""The watcher's state as JSON: what the dashboard draws and `conveyor ops lag` / `ops health` print. Pure.

One shape for every reader, so the CLI shows the same thing whether it sampled by itself or asked a
running watch service (``GET /api/state``). Partitions are listed only for groups that need a look
(or all of them for one group on request): at 20,000 partitions the whole list is for machines,
and the metrics carry it.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from collections.abc import Mapping
from typing import Any

from conveyor.ops.alertmanager import ManagedAlert
from conveyor.ops.health import BrokerHealth, ClusterHealth
from conveyor.ops.lag import PartitionStatus, Status
from conveyor.ops.dashboard import PanelView
from conveyor.ops.commit_log import CommitLog
from conveyor.ops.tracker import GroupReport, RewindEvidence
from conveyor.ops.watch import ClusterReport, OpsState

#: Partitions listed per group when not all are asked for: the worst ones.
PROBLEM_PARTITIONS = 20


def _num(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) or math.isinf(value) else round(value, 3)


#: The labels that say what an alert is about, most specific first.
SUBJECT_LABELS = ("group", "node", "route", "topic", "mountpoint", "device", "instance")


def alert_json(alert: ManagedAlert) -> dict[str, Any]:
    """An alert from Alertmanager; ``subject``: what it is about, from its labels."""
    labels = alert.labels
    subject = next((labels[k] for k in SUBJECT_LABELS if labels.get(k)), labels.get("cluster", ""))
    return {"severity": alert.severity.upper(), "rule": alert.name, "cluster": labels.get("cluster", ""),
            "subject": subject, "message": alert.summary, "look_at": alert.look_at, "since": alert.starts_at,
            "labels": dict(labels)}


def partition_json(p: PartitionStatus) -> dict[str, Any]:
    return {"topic": p.topic, "partition": p.partition, "status": p.status.name, "reason": p.reason.value,
            "committed": p.committed, "end": p.end, "log_start": p.log_start, "lag": p.lag,
            "seconds_behind": _num(p.seconds_behind), "message": p.message}


def _offsets_json(offsets: Mapping[tuple[str, int], int | None]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p, "committed": o} for (t, p), o in sorted(offsets.items())]


def evidence_json(e: RewindEvidence) -> dict[str, Any]:
    """A move back with the group's committed offsets in the samples before and after it."""
    f = e.finding
    return {"group": e.group, "kind": f.kind.name, "topic": f.topic, "partition": f.partition,
            "from_offset": f.from_offset, "to_offset": f.to_offset, "records": f.records,
            "before_ms": e.before_ms, "after_ms": e.after_ms,
            "before": _offsets_json(e.before), "after": _offsets_json(e.after),
            "commit_log": _commit_log_json(e.commit_log) if e.commit_log else None,
            "commit_log_error": e.commit_log_error, "found": e.found}


def _commit_log_json(found: CommitLog) -> dict[str, Any]:
    return {"offsets_partition": found.partition, "coordinator": found.coordinator, "truncated": found.truncated,
            "commits": [asdict(c) for c in found.commits]}


def group_json(report: GroupReport, all_partitions: bool = False) -> dict[str, Any]:
    status = report.status
    behind = [p.seconds_behind for p in status.partitions if p.seconds_behind is not None]
    listed = status.partitions if all_partitions else status.problems[:PROBLEM_PARTITIONS]
    return {
        "cluster": report.cluster, "group": report.group, "state": report.state, "status": status.status.name,
        "total_lag": status.total_lag, "max_seconds_behind": _num(max(behind, default=None)),
        "partitions_tracked": len(status.partitions), "partitions_not_ok": len(status.problems),
        "complete": _num(status.complete), "message": status.message, "error": report.error,
        "kept_in": report.kept_in, "rewinds": [evidence_json(e) for e in report.evidence],
        "partitions": [partition_json(p) for p in listed],
        "findings": [f.message for f in report.findings.offsets],
        "amplification": [{"topic": a.topic, "ratio": _num(a.ratio), "message": a.message}
                          for a in report.findings.amplification],
        "history": [[at, lag] for at, lag in report.history],
    }


def broker_json(b: BrokerHealth) -> dict[str, Any]:
    r = b.reading
    return {
        "node": r.node, "broker_id": r.broker_id, "up": r.up, "error": r.error, "is_broker": r.is_broker,
        "leaders": _num(r.leaders), "replicas": _num(r.replicas), "under_replicated": _num(r.under_replicated),
        "under_min_isr": _num(r.under_min_isr), "max_follower_lag": _num(r.max_follower_lag),
        "bytes_in_per_s": _num(b.bytes_in_per_s), "bytes_out_per_s": _num(b.bytes_out_per_s),
        "isr_shrinks_per_s": _num(b.isr_shrinks_per_s), "isr_expands_per_s": _num(b.isr_expands_per_s),
        "p99_ms": {k: _num(v) for k, v in r.p99_ms.items()},
        "offset_manager": {"cleaner_max_dirty_percent": _num(r.cleaner_dirty_percent),
                           "cleaner_idle_ms": _num(r.cleaner_idle_ms), "coordinator_load_ms": _num(r.coordinator_load_ms),
                           "offset_commits_per_s": _num(r.offset_commit_rate), "groups": _num(r.groups),
                           "offsets": _num(r.offsets)},
    }


def health_json(h: ClusterHealth) -> dict[str, Any]:
    return {
        "status": h.status, "under_replicated": h.under_replicated, "under_min_isr": h.under_min_isr,
        "offline_partitions": h.offline_partitions, "active_controllers": h.active_controllers,
        "unclean_elections": h.unclean_elections, "leader_changes": h.leader_changes,
        "leader_change_span_s": _num(h.leader_change_span_s), "skew": {k: _num(v) for k, v in h.skew.items()},
        "brokers": [broker_json(b) for b in h.brokers], "figures_error": h.figures_error,
    }


def cluster_json(c: ClusterReport, group: str | None = None, all_partitions: bool = False) -> dict[str, Any]:
    groups = [g for g in c.groups if group is None or g.group == group]
    return {
        "name": c.cluster, "at_ms": c.at_ms, "error": c.error, "seconds": _num(c.seconds), "calls": dict(c.calls),
        "partitions_watched": c.partitions, "health": health_json(c.health),
        "groups": [group_json(g, all_partitions) for g in groups],
        "status_counts": {s.name: sum(1 for g in c.groups if g.status.status is s) for s in Status},
        "rewinds": [evidence_json(e) for e in c.rewinds if group is None or e.group == group],
    }


def panel_json(p: PanelView) -> dict[str, Any]:
    return {
        "name": p.name, "title": p.title, "more": p.more, "errors": list(p.errors),
        "series": [{"name": s.name, "unit": s.unit, "value": _num(s.value), "at_ms": s.at_ms,
                    "history": [[at, _num(v)] for at, v in s.history],
                    "strip": [[hour, _num(v)] for hour, v in s.strip]} for s in p.series],
    }


def state_json(state: OpsState, group: str | None = None, cluster: str | None = None,
               all_partitions: bool = False) -> dict[str, Any]:
    clusters = [c for c in state.clusters if cluster is None or c.cluster == cluster]
    return {
        "platform": state.platform, "at_ms": state.at_ms, "interval": state.interval,
        "alerts": [alert_json(a) for a in state.alerts
                   if (cluster is None or a.labels.get("cluster") == cluster)
                   and (group is None or a.labels.get("group") == group)],
        "alerts_error": state.alerts_error,
        "clusters": [cluster_json(c, group, all_partitions) for c in clusters],
        "panels": [panel_json(p) for p in state.panels],
    }
