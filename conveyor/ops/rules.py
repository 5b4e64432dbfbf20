"""Prometheus alerting rules over the metrics Conveyor exports, from the platform's ops settings.
Pure: settings in, the rules file's document out (``conveyor ops rules`` writes it).

Operators keep their alerts in Prometheus and route them with Alertmanager; the watcher's own
alerts (docs/ops.md) stay for the rules that need its windows of samples (Burrow's lag rules,
rewinds from the offset history), which reach Alertmanager's receivers through the notifier.
Each rule here names the metric it reads in its expression, with the same thresholds as the
watcher's, so the two never disagree on what is too slow.
"""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.config import Ops
from conveyor.ops.lag import Status


@dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    severity: str
    summary: str
    #: How long the expression must hold before the alert fires (Prometheus's ``for``).
    hold: str = "0s"
    #: What to look at, as the watcher's alerts say it.
    look_at: str = ""

    def document(self) -> dict[str, object]:
        rule: dict[str, object] = {"alert": self.name, "expr": self.expr}
        if self.hold != "0s":
            rule["for"] = self.hold
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {"summary": self.summary, **({"look_at": self.look_at} if self.look_at else {})}
        return rule


def broker_rules(ops: Ops) -> list[AlertRule]:
    return [
        AlertRule("KafkaBrokerDown", "conveyor_ops_broker_up == 0", "critical",
                  "{{ $labels.node }} on {{ $labels.cluster }} does not answer its metrics endpoint", "1m",
                  "whether the process is alive and its server.log; its partitions run on fewer replicas"),
        AlertRule("KafkaUnderReplicatedPartitions", "conveyor_ops_cluster_under_replicated_partitions > 0", "warning",
                  "{{ $value }} partition(s) on {{ $labels.cluster }} have fewer in-sync replicas than replicas",
                  "5m", "a broker down or slow, the followers' lag"),
        AlertRule("KafkaUnderMinIsr", "conveyor_ops_cluster_under_min_isr_partitions > 0", "critical",
                  "{{ $value }} partition(s) on {{ $labels.cluster }} are below min.insync.replicas: acks=all "
                  "writes to them fail", "1m", "bring the missing brokers back first"),
        AlertRule("KafkaOfflinePartitions", "conveyor_ops_cluster_offline_partitions > 0", "critical",
                  "{{ $value }} partition(s) on {{ $labels.cluster }} have no leader", "0s",
                  "the brokers that hold their replicas"),
        AlertRule("KafkaRequestSlow", f"conveyor_ops_broker_request_p99_seconds > {ops.request_p99_warn:g}",
                  "warning", "{{ $labels.request }} requests on {{ $labels.node }} take {{ $value }} s at p99", "5m",
                  "the broker's request queue, disk, network and GC pauses"),
        AlertRule("KafkaRequestVerySlow", f"conveyor_ops_broker_request_p99_seconds > {ops.request_p99_alarm:g}",
                  "critical", "{{ $labels.request }} requests on {{ $labels.node }} take {{ $value }} s at p99",
                  "1m", "the broker's request queue, disk, network and GC pauses"),
        AlertRule("KafkaLoadSkew", f"conveyor_ops_cluster_load_skew > {ops.skew_warn:g}", "warning",
                  "{{ $labels.load }} per broker on {{ $labels.cluster }} is uneven (max over mean {{ $value }})",
                  "30m", "conveyor ops balance plan --cluster {{ $labels.cluster }}"),
    ]


def lag_rules(ops: Ops) -> list[AlertRule]:
    status = "conveyor_ops_group_status"
    rules = [
        AlertRule("ConsumerGroupStalled", f"{status} == {int(Status.STALL)}", "warning",
                  "group {{ $labels.group }} on {{ $labels.cluster }} commits the same offset while records wait",
                  "0s", "the consumer's logs for a record it cannot process"),
        AlertRule("ConsumerGroupStopped", f"{status} == {int(Status.STOP)}", "critical",
                  "group {{ $labels.group }} on {{ $labels.cluster }} stopped committing while records wait",
                  "0s", "the group's members: crashed, hung, or partitions left unassigned"),
        AlertRule("ConsumerGroupRewound", f"{status} == {int(Status.REWIND)}", "critical",
                  "group {{ $labels.group }} on {{ $labels.cluster }} moved its committed offset back", "0s",
                  "who reset or restored the group's offsets; its consumers for duplicates"),
        AlertRule("ConsumerGroupError", f"{status} == {int(Status.ERR)}", "critical",
                  "group {{ $labels.group }} on {{ $labels.cluster }}: a commit was lost or lies outside the log",
                  "0s", "the partitions of conveyor ops lag --group {{ $labels.group }}"),
        AlertRule("ReadAmplification", "conveyor_ops_read_amplification_ratio > 0", "warning",
                  "group {{ $labels.group }} reads {{ $labels.topic }} {{ $value }}x faster than it is written",
                  "10m", "offsets lost or reset by the group: it reads the same records again"),
    ]
    if ops.max_lag_records is not None:
        rules.append(AlertRule("ConsumerGroupLagRecords", f"conveyor_ops_group_lag_records > {ops.max_lag_records}",
                               "warning", "group {{ $labels.group }} is {{ $value }} records behind", "5m"))
    if ops.max_lag_seconds is not None:
        rules.append(AlertRule("ConsumerGroupLagSeconds",
                               f"conveyor_ops_group_seconds_behind > {ops.max_lag_seconds:g}", "warning",
                               "group {{ $labels.group }} is {{ $value }} s behind", "5m"))
    return rules


def replication_rules() -> list[AlertRule]:
    return [
        AlertRule("ReplicationGap", "increase(conveyor_replicate_gap_records_total[15m]) > 0", "critical",
                  "route {{ $labels.route }} lost offsets of {{ $labels.topic }} to the source's retention before "
                  "copying them", "0s",
                  "conveyor replicate status --route {{ $labels.route }} (the gaps, with their offsets)"),
        AlertRule("ReplicationPartitionStopped", "conveyor_replicate_partition_stopped > 0", "critical",
                  "route {{ $labels.route }} stopped {{ $labels.topic }}[{{ $labels.partition }}]: a record the "
                  "destination cannot take", "0s", "max.message.bytes of the destination topic"),
    ]


def lake_rules(ops: Ops) -> list[AlertRule]:
    deadline = ops.lake_deadline
    return [
        AlertRule("LakeHourLate", f"time() - conveyor_lake_complete_until_timestamp_seconds > {deadline:g}", "critical",
                  "{{ $labels.topic }}: the lake is complete only up to {{ $value }} s ago",
                  "0s", "the lake job's runs (conveyor lake status) and the source's lag; with the default "
                  f"deadline of {deadline / 3600:g} h, yesterday has landed by {deadline / 3600:02g}:00"),
        AlertRule("LakeDataLost", "increase(conveyor_lake_lost_records_total[1h]) > 0", "critical",
                  "{{ $labels.topic }}[{{ $labels.partition }}]: records were deleted by retention before they "
                  "landed", "0s", "lake.ops.gaps for the offsets; the topic's retention"),
        AlertRule("LakeRunsFailing", "increase(conveyor_lake_runs_total{result=\"failed\"}[1h]) > 2", "warning",
                  "the lake job failed more than twice in an hour", "0s", "the lake job's output"),
    ]


def offset_manager_rules(ops: Ops) -> list[AlertRule]:
    """The offset manager's health (docs/ops.md): the same thresholds as the watcher's rules in
    conveyor.ops.offset_manager; the lost commit (offset_fetch_empty) needs the groups' windows and
    goes out through the notifier."""
    return [
        AlertRule("OffsetsCompactionStalled", f"conveyor_ops_broker_cleaner_max_dirty_percent > {ops.offsets_dirty_warn:g}",
                  "warning", "the log cleaner on {{ $labels.node }} leaves compacted logs {{ $value }}% dirty: "
                  "__consumer_offsets may not be compacted", f"{ops.offsets_dirty_hold:g}s",
                  "log-cleaner.log, min.cleanable.dirty.ratio and min.compaction.lag.ms of the compacted topics"),
        AlertRule("LogCleanerIdle", f"conveyor_ops_broker_cleaner_idle_seconds > {ops.cleaner_idle_alarm:g}",
                  "critical", "the log cleaner on {{ $labels.node }} has not run for {{ $value }} s", "0s",
                  "log-cleaner.log for the exception that killed its thread; restart the broker"),
        AlertRule("GroupCoordinatorLoadSlow",
                  f"conveyor_ops_broker_coordinator_load_seconds > {ops.coordinator_load_warn:g}", "warning",
                  "the group coordinator on {{ $labels.node }} took {{ $value }} s to load a __consumer_offsets "
                  "partition", "0s", "the size of __consumer_offsets and its compaction"),
    ]


def traffic_rules() -> list[AlertRule]:
    """Broker-side read amplification per topic (conveyor.ops.traffic's rule over Prometheus's
    history): bytes out over the last 10 minutes at least twice the 10 minutes before, at least
    1 MiB/s, while bytes in moved by at most a quarter of their level now."""
    out = "avg_over_time(conveyor_ops_topic_bytes_out_per_second[10m])"
    out_before = "avg_over_time(conveyor_ops_topic_bytes_out_per_second[10m] offset 10m)"
    into = "avg_over_time(conveyor_ops_topic_bytes_in_per_second[10m])"
    into_before = "avg_over_time(conveyor_ops_topic_bytes_in_per_second[10m] offset 10m)"
    return [
        AlertRule("TopicReadAmplification",
                  f"({out} >= 2 * {out_before} and {out} >= 1048576) and abs({into} - {into_before}) <= 0.25 * {into}", "warning",
                  "bytes out of {{ $labels.topic }} on {{ $labels.cluster }} doubled while bytes in stayed flat",
                  "0s", "who reads the topic again: jobs that keep their offsets in their own store"),
    ]


def rules_document(ops: Ops) -> dict[str, object]:
    groups = (("conveyor-brokers", broker_rules(ops)), ("conveyor-offset-manager", offset_manager_rules(ops)),
              ("conveyor-traffic", traffic_rules()), ("conveyor-lag", lag_rules(ops)),
              ("conveyor-replication", replication_rules()), ("conveyor-lake", lake_rules(ops)))
    return {"groups": [{"name": name, "rules": [r.document() for r in rules]} for name, rules in groups]}
