"""Prometheus alerting rules over the metrics Conveyor's parts export and the brokers' own JMX
exporters, from the platform's ops settings. Pure: settings in, the rules file's document out
(``conveyor ops rules`` writes it).

Every alert of the platform is a rule here, and Alertmanager routes what fires. The brokers' rules
read the exporters' series as Prometheus scrapes them, under either exporter rule set's names
(:func:`kafka`). What PromQL cannot judge by itself (Burrow's lag rules over a window of samples,
offsets moved back, a commit lost, counts from cluster metadata) the watcher judges and exports as
a metric (conveyor.ops.metrics) that a rule reads. Each rule
names what is wrong and what to look at (its ``look_at`` annotation).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from conveyor.config import Ops
from conveyor.ops.exporter_names import RENAMED
from conveyor.ops.health import WATCHED_REQUESTS
from conveyor.ops.lag import Status


@dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    severity: str
    summary: str
    #: How long the expression must hold before the alert fires (Prometheus's ``for``).
    hold: str = "0s"
    #: What to look at first.
    look_at: str = ""

    def document(self) -> dict[str, object]:
        rule: dict[str, object] = {"alert": self.name, "expr": self.expr}
        if self.hold != "0s":
            rule["for"] = self.hold
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {"summary": self.summary, **({"look_at": self.look_at} if self.look_at else {})}
        return rule


def duration(seconds: float) -> str:
    """Seconds as Prometheus's duration syntax, which takes no fractions ("1500ms", not "1.5s")."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def kafka(name: str, form: Callable[[str], str] = lambda series: series) -> str:
    """``form`` of a broker metric (by our exporter rules' name) as either rule set names it: ours,
    or Strimzi's where it differs (conveyor.ops.exporter_names). A node prints one of the two."""
    theirs = RENAMED.get(name)
    return f"({form(name)} or {form(theirs)})" if theirs else form(name)


#: Every Kafka node Prometheus scrapes: its targets carry the cluster and node labels.
NODES = 'cluster!="",node!=""'
#: Leaders or replicas per broker (mean) below which their skew says nothing.
SKEW_MIN_COUNT = 3


def skew_expr(ops: Ops) -> str:
    """Load skew (max over mean across a cluster's brokers) above ``ops.skew_warn`` where the load
    is large enough to matter: bytes per broker (mean) of at least ``ops.skew_min_bytes`` per
    second, or SKEW_MIN_COUNT leaders or replicas."""
    def bytes_rate(name: str) -> str:
        # The broker's total: the series without a topic label.
        return kafka(name, lambda series: f'rate({series}{{topic=""}}[5m])')
    loads = {"bytes_in": (bytes_rate("kafka_server_brokertopicmetrics_bytesinpersec_total"), ops.skew_min_bytes),
             "bytes_out": (bytes_rate("kafka_server_brokertopicmetrics_bytesoutpersec_total"), ops.skew_min_bytes),
             "leaders": ("kafka_server_replicamanager_leadercount", SKEW_MIN_COUNT),
             "replicas": ("kafka_server_replicamanager_partitioncount", SKEW_MIN_COUNT)}
    return " or ".join(f'label_replace(max by (cluster) ({series}) / avg by (cluster) ({series}) > {ops.skew_warn:g} '
                       f'and avg by (cluster) ({series}) >= {minimum:g}, "load", "{load}", "", "")'
                       for load, (series, minimum) in loads.items())


def broker_rules(ops: Ops) -> list[AlertRule]:
    """Over the series Prometheus scrapes from every node's JMX exporter (labelled cluster and
    node), and the watcher's counts from cluster metadata."""
    # The brokers' own p99 (Kafka's reservoir per broker), in ms: a quantile per node, compared as it is.
    p99 = f'kafka_network_requestmetrics_totaltimems{{quantile="0.99",request=~"{"|".join(WATCHED_REQUESTS)}"}} / 1000'
    # Follower lag worries when it stays above zero: a fetcher behind for the whole window.
    window = duration(ops.window * ops.interval)
    return [
        AlertRule("KafkaBrokerDown", f"up{{{NODES}}} == 0", "critical",
                  "{{ $labels.node }} on {{ $labels.cluster }} does not answer Prometheus's scrape of its metrics "
                  "endpoint", duration(ops.broker_down_hold),
                  "whether the process is alive and its server.log; its partitions run on fewer replicas"),
        AlertRule("KafkaUnderReplicatedPartitions", "conveyor_ops_cluster_under_replicated_partitions > 0", "warning",
                  "{{ $value }} partition(s) on {{ $labels.cluster }} have fewer in-sync replicas than replicas",
                  "5m", "a broker down or slow, the followers' lag"),
        AlertRule("KafkaUnderMinIsr", "sum by (cluster) (kafka_server_replicamanager_underminisrpartitioncount) > 0",
                  "critical", "{{ $value }} partition(s) on {{ $labels.cluster }} are below min.insync.replicas: "
                  "acks=all writes to them fail", "1m", "bring the missing brokers back first"),
        AlertRule("KafkaOfflinePartitions", "conveyor_ops_cluster_offline_partitions > 0", "critical",
                  "{{ $value }} partition(s) on {{ $labels.cluster }} have no leader", "0s",
                  "the brokers that hold their replicas"),
        AlertRule("KafkaRequestSlow", f"{p99} > {ops.request_p99_warn:g}",
                  "warning", "{{ $labels.request }} requests on {{ $labels.node }} take {{ $value }} s at p99", "5m",
                  "the broker's request queue, disk, network and GC pauses"),
        AlertRule("KafkaRequestVerySlow", f"{p99} > {ops.request_p99_alarm:g}",
                  "critical", "{{ $labels.request }} requests on {{ $labels.node }} take {{ $value }} s at p99",
                  "1m", "the broker's request queue, disk, network and GC pauses"),
        AlertRule("KafkaLoadSkew", skew_expr(ops), "warning",
                  "{{ $labels.load }} per broker on {{ $labels.cluster }} is uneven (max over mean "
                  '{{ $value | printf "%.2f" }})',
                  "30m", "conveyor balance plan --cluster {{ $labels.cluster }}: load on few brokers makes them "
                  "the bottleneck of every client"),
        AlertRule("KafkaNoActiveController",
                  "sum by (cluster) (kafka_controller_kafkacontroller_activecontrollercount) == 0", "critical",
                  "no active controller on {{ $labels.cluster }}: no leader election or topic change can happen",
                  "0s", "the controller quorum (kafka_server_raft_* metrics) and the controllers' logs"),
        AlertRule("KafkaUncleanLeaderElection",
                  f"max by (cluster) {kafka('kafka_controller_controllerstats_uncleanleaderelectionspersec_total')} > 0",
                  "critical", "{{ $value }} unclean leader election(s) on {{ $labels.cluster }} since its controller "
                  "started: acknowledged records were lost", "0s",
                  "which partitions (the controller's log); compare what producers sent with what landed "
                  "(conveyor verify); unclean.leader.election.enable"),
        AlertRule("KafkaIsrShrinking",
                  kafka("kafka_server_replicamanager_isrshrinkspersec_total", lambda series: f"rate({series}[5m])")
                  + " > 0", "warning", "in-sync replica sets shrank on {{ $labels.node }} in the last 5 minutes", "0s",
                  "the followers' network, disk and GC pauses, a broker going down, replica.lag.time.max.ms"),
        # From the watcher's counter, not its window's gauge: the gauge is back to 0 a few rounds
        # after a move, and a scrape between those rounds would miss it.
        AlertRule("KafkaLeaderChanges", "increase(conveyor_ops_cluster_leader_moves_total[5m]) > 0", "warning",
                  "partition leaders moved on {{ $labels.cluster }} in the last 5 minutes", "0s",
                  "brokers restarting or fenced (session timeouts), leaders flapping between brokers; with acks=1 "
                  "every change loses what the followers had not copied"),
        AlertRule("KafkaFollowerLagging",
                  f"max by (cluster, node) (min_over_time(kafka_server_replicafetchermanager_maxlag[{window}])) > 0",
                  "warning", f"followers of {{{{ $labels.node }}}} stayed behind for {window} (at least "
                  "{{ $value }} records)", "0s",
                  "the leader's and followers' network and disk, replica fetcher threads, replication throttles "
                  "left set"),
    ]


#: Moves of a committed offset (conveyor_ops_offset_moves's kind): alert, severity, what it means,
#: what to look at. Moving back re-delivers records; moving forward past records skips them.
OFFSET_MOVES = {
    "rewind": ("ConsumerOffsetsRewound", "warning", "moved its committed offset back: records are delivered again",
               "consumers of the group for duplicates; offset resets and restores in its history "
               "(conveyor ops lag --group {{ $labels.group }})"),
    "reset_earliest": ("ConsumerOffsetsResetEarliest", "warning",
                       "reset its committed offset to the log start: it reads everything again",
                       "the consumers' logs for 'offset out of range' and why the commit was lost"),
    "reset_latest": ("ConsumerOffsetsResetLatest", "critical",
                     "reset its committed offset to the end: the records between were skipped",
                     "the skipped offsets (conveyor ops lag --group {{ $labels.group }}): re-process them while "
                     "retention keeps them"),
    "behind_log_start": ("ConsumerBehindLogStart", "critical",
                         "committed an offset retention has deleted past: records were lost before it read them",
                         "the topic's retention against the group's throughput"),
}


def offset_move_rules() -> list[AlertRule]:
    return [AlertRule(name, f'conveyor_ops_offset_moves{{kind="{kind}"}} > 0', severity,
                      f"group {{{{ $labels.group }}}} on {{{{ $labels.cluster }}}} {meaning} "
                      "({{ $value }} move(s) in the last 15 minutes)", "0s", look_at)
            for kind, (name, severity, meaning, look_at) in OFFSET_MOVES.items()]


def lag_rules(ops: Ops) -> list[AlertRule]:
    status = "conveyor_ops_group_status"
    lost = "conveyor_ops_group_lost_commit_partitions"
    rules = [
        AlertRule("ConsumerGroupLagging", f"{status} == {int(Status.WARN)}", "warning",
                  "group {{ $labels.group }} on {{ $labels.cluster }} falls behind: its lag is not shrinking",
                  "0s", "the group's throughput against the produce rate: add consumers up to the partition count, "
                  "or put the dispatcher in front of a slow consumer"),
        AlertRule("ConsumerGroupStalled", f"{status} == {int(Status.STALL)}", "warning",
                  "group {{ $labels.group }} on {{ $labels.cluster }} commits the same offset while records wait",
                  "0s", "the consumer's logs for a record it cannot process"),
        AlertRule("ConsumerGroupStopped", f"{status} == {int(Status.STOP)}", "critical",
                  "group {{ $labels.group }} on {{ $labels.cluster }} stopped committing while records wait",
                  "0s", "the group's members: crashed, hung, or partitions left unassigned"),
        # The offset-move rules below say the amount and the kind; this one only where none does.
        AlertRule("ConsumerGroupRewound", f"{status} == {int(Status.REWIND)} unless on (cluster, group) "
                  "conveyor_ops_offset_moves > 0", "critical",
                  "group {{ $labels.group }} on {{ $labels.cluster }} moved its committed offset back", "0s",
                  "who reset or restored the group's offsets; its consumers for duplicates"),
        AlertRule("ConsumerGroupError", f"{status} == {int(Status.ERR)} unless on (cluster, group) {lost} > 0",
                  "critical", "group {{ $labels.group }} on {{ $labels.cluster }}: its committed offset lies outside "
                  "the log, or its offsets could not be read", "0s",
                  "the partitions of conveyor ops lag --group {{ $labels.group }}; the group's auto.offset.reset "
                  "decides whether the coming reset re-reads or skips"),
        AlertRule("ConsumerGroupOffsetsLost", f"{lost} > 0", "critical",
                  "an offset fetch for group {{ $labels.group }} on {{ $labels.cluster }} answered no offset on "
                  "{{ $value }} partition(s) it had committed", "0s",
                  "the offset manager: OffsetsCompactionStalled and GroupCoordinatorLoadSlow, the group's "
                  "offsets.retention.minutes, and who deleted its offsets"),
        *offset_move_rules(),
        AlertRule("ClusterNotSampled", "conveyor_ops_cluster_sampled == 0", "critical",
                  "the watcher cannot read the offsets of {{ $labels.cluster }}: consumer lag on it is not judged",
                  "0s", "the cluster's bootstrap servers and the watcher's client settings"),
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


def by_delivery(rule: AlertRule, relaxed: Sequence[str]) -> list[AlertRule]:
    """``rule``, whose ``expr`` has a ``{topics}`` selector, for the exact topics, and its warning
    twin for the topics delivered at least once (``relaxed``): a loss there warns, never pages."""
    if not relaxed:
        return [replace(rule, expr=rule.expr.format(topics=""))]
    # PromQL's strings take backslashes doubled; a topic name's only regex character is the dot.
    names = "|".join(name.replace(".", "\\\\.") for name in relaxed)
    return [replace(rule, expr=rule.expr.format(topics=f'{{topic!~"{names}"}}')),
            replace(rule, name=f"{rule.name}AtLeastOnce", severity="warning",
                    expr=rule.expr.format(topics=f'{{topic=~"{names}"}}'))]


def replication_rules(relaxed: Sequence[str] = ()) -> list[AlertRule]:
    return [
        *by_delivery(AlertRule(
            "ReplicationGap", "increase(conveyor_replicate_gap_records_total{topics}[15m]) > 0", "critical",
            "route {{ $labels.route }} lost offsets of {{ $labels.topic }} to the source's retention before "
            "copying them", "0s",
            "conveyor replicate status --route {{ $labels.route }} (the gaps, with their offsets)"), relaxed),
        AlertRule("ReplicationClusterUnreachable", "conveyor_replicate_cluster_unreachable == 1", "critical",
                  "route {{ $labels.route }} cannot reach {{ $labels.cluster }}", "5m",
                  "the cluster's brokers and the replicator's credentials; it resumes by itself"),
        AlertRule("ReplicationPartitionStopped", "conveyor_replicate_partition_stopped > 0", "critical",
                  "route {{ $labels.route }} stopped {{ $labels.topic }}[{{ $labels.partition }}]: a record the "
                  "destination cannot take", "0s", "max.message.bytes of the destination topic"),
    ]


def gateway_rules(ops: Ops) -> list[AlertRule]:
    refused = 'sum by (instance) (rate(conveyor_gateway_requests_rejected_total{reason=~"unavailable|overloaded"}[5m]))'
    answered = "sum by (instance) (rate(conveyor_gateway_request_seconds_count[5m]))"
    p99 = "histogram_quantile(0.99, sum by (instance, le) (rate(conveyor_gateway_request_seconds_bucket[5m])))"
    return [
        AlertRule("GatewayUnavailable",
                  'sum by (instance, topic) (increase(conveyor_gateway_requests_rejected_total{reason="unavailable"}[5m])) > 0',
                  "critical", "gateway {{ $labels.instance }} refused {{ $value }} request(s) of {{ $labels.topic }}: "
                  "no cluster acknowledged them", "0s",
                  "the gateway's /healthz, its data centre's cluster and its failover cluster"),
        AlertRule("GatewayErrorRatio", f"{refused} / {answered} > {ops.gateway_error_ratio:g}", "warning",
                  "gateway {{ $labels.instance }} answers 503 to a share of {{ $value }} of its requests", "5m",
                  "overloaded (max_concurrent_requests, the bulkhead lanes) or unavailable clusters"),
        AlertRule("GatewaySlow", f"{p99} > {ops.gateway_p99_warn:g}", "warning",
                  "gateway {{ $labels.instance }} answers in {{ $value }} s at p99", "5m",
                  "the produce latency of its cluster (acks=all waits for the in-sync replicas)"),
        AlertRule("GatewayFailedOver", "conveyor_gateway_failed_over == 1", "warning",
                  "gateway {{ $labels.instance }} writes to its failover cluster", "0s",
                  "its data centre's cluster: it fails back by itself once that cluster answers"),
    ]


def dispatch_rules(ops: Ops) -> list[AlertRule]:
    def per_pair(series: str) -> str:
        return f"sum by (topic, group) ({series})"

    backlog = per_pair("conveyor_dispatch_backlog")
    return [
        AlertRule("DispatchBacklogGrowing", f"{backlog} > {per_pair('conveyor_dispatch_backlog offset 15m')}",
                  "warning", "{{ $labels.group }} on {{ $labels.topic }}: {{ $value }} messages wait, more than "
                  "15 minutes before", "15m", "the group's clients: too few, too slow, or nacking"),
        AlertRule("DispatchRedeliveries",
                  f"{per_pair('rate(conveyor_dispatch_redelivered_total[10m])')} > {ops.dispatch_redelivery_ratio:g} * "
                  f"{per_pair('rate(conveyor_dispatch_delivered_total[10m])')}", "warning",
                  "{{ $labels.group }} on {{ $labels.topic }} redelivers {{ $value }} messages/s: "
                  "nacks and missed ack deadlines", "10m", "the clients' errors, and ack_deadline against their work"),
        AlertRule("DispatchDeadLetters", f"{per_pair('increase(conveyor_dispatch_dead_lettered_total[15m])')} > 0",
                  "warning", "{{ $labels.group }} on {{ $labels.topic }} dead-lettered {{ $value }} message(s)", "0s",
                  "the dead-letter topic: the messages out of attempts, with their last error"),
        AlertRule("DispatchDeadLettersUnwritable",
                  f"{per_pair('increase(conveyor_dispatch_dead_letters_unwritable_total[15m])')} > 0", "critical",
                  "{{ $labels.group }} on {{ $labels.topic }}: {{ $value }} message(s) out of attempts could not be "
                  "dead-lettered and were skipped", "0s",
                  "conveyor_dispatch_last_unwritable_dead_letter_offset, and max.message.bytes of the dead-letter topic"),
    ]


def realtime_rules(ops: Ops) -> list[AlertRule]:
    rejected = "sum by (instance, kind) (rate(conveyor_realtime_events_rejected_total[10m]))"
    read = "sum by (instance) (rate(conveyor_realtime_records_total[10m]))"
    p99 = "histogram_quantile(0.99, sum by (instance, le) (rate(conveyor_realtime_latency_seconds_bucket[5m])))"
    return [
        AlertRule("RealtimeSlow", f"{p99} > {ops.realtime_p99_warn:g}",
                  "warning", "the real-time views write events {{ $value }} s after their event time at p99", "5m",
                  "the job's batch duration and its lag on the topic"),
        AlertRule("RealtimeRejects", f"{rejected} / on (instance) group_left {read} > {ops.realtime_reject_ratio:g}",
                  "warning", "the real-time views reject a share of {{ $value }} of their records as "
                  "{{ $labels.kind }}", "10m", "the reject topic: late (producers' clocks), incomplete (contracts)"),
        AlertRule("RealtimeStalled", "sum by (instance) (increase(conveyor_realtime_batches_total[15m])) == 0",
                  "warning", "the real-time views wrote no batch in 15 minutes", "0s",
                  "the job's log, and whether the topic had traffic"),
        AlertRule("RealtimeRedisLost", "increase(conveyor_realtime_redis_lost_total[1h]) > 0", "critical",
                  "the real-time job found Redis behind its checkpoint and stopped", "0s",
                  "docs/realtime.md: rebuild the views with --rebuild"),
    ]


#: Per part of ops.running: its name in the alert and a series it exports from its start, without
#: labels, so that absent() fires when no instance of it is scraped (stopped, crashed, or its
#: target lost).
PRESENCE = {
    "gateway": ("gateway", "conveyor_gateway_failed_over"),
    "replicator": ("replicator", "conveyor_replicate_topics"),
    "dispatcher": ("dispatcher", "conveyor_dispatch_readers"),
    "views": ("realtime views", "conveyor_realtime_records_total"),
    "lake": ("lake", "conveyor_lake_run_duration_seconds"),
    "watcher": ("watcher", "conveyor_ops_rounds_total"),
    "throttle": ("throttle", "conveyor_throttle_rounds_total"),
}


def presence_rules(ops: Ops) -> list[AlertRule]:
    """An alert for each part platform.yaml says runs (ops.running) that no instance reports."""
    return [AlertRule(f"ConveyorComponentAbsent{''.join(w.title() for w in component.split())}", f"absent({series})",
                      "critical", f"no {component} reports to Prometheus", "5m",
                      f"whether the {component} runs and its scrape target ({series} is on its /metrics)")
            for component, series in (PRESENCE[part] for part in ops.running)]


def lake_rules(ops: Ops, relaxed: Sequence[str] = ()) -> list[AlertRule]:
    deadline = ops.lake_deadline
    return [
        AlertRule("LakeHourLate", f"time() - conveyor_lake_complete_until_timestamp_seconds > {deadline:g}", "critical",
                  "{{ $labels.topic }}: the lake is complete only up to {{ $value }} s ago",
                  "0s", "the lake job's runs (conveyor lake status) and the source's lag; with the default "
                  f"deadline of {deadline / 3600:g} h, yesterday has landed by {deadline / 3600:02g}:00"),
        *by_delivery(AlertRule(
            "LakeDataLost", "increase(conveyor_lake_lost_records_total{topics}[1h]) > 0", "critical",
            "{{ $labels.topic }}[{{ $labels.partition }}]: records were deleted by retention before they landed",
            "0s", "lake.ops.gaps for the offsets; the topic's retention"), relaxed),
        AlertRule("LakeRunsFailing", "increase(conveyor_lake_runs_total{result=\"failed\"}[1h]) > 2", "warning",
                  "the lake job failed more than twice in an hour", "0s", "the lake job's output"),
    ]


def offset_manager_rules(ops: Ops) -> list[AlertRule]:
    """The offset manager's health (docs/ops.md): the log cleaner that compacts __consumer_offsets
    and the group coordinator that loads it. The third sign, a lost commit, is
    ConsumerGroupOffsetsLost (lag_rules)."""
    return [
        # The least over the hold, not the value now: a scrape of a slow exporter page that timed
        # out leaves a gap, which would start the hold over; a ratio that fell does not.
        AlertRule("OffsetsCompactionStalled",
                  f"min_over_time(kafka_log_logcleanermanager_max_dirty_percent[{duration(ops.offsets_dirty_hold)}]) "
                  f"> {ops.offsets_dirty_warn:g}", "warning",
                  "the log cleaner on {{ $labels.node }} leaves compacted logs {{ $value }} % dirty: "
                  "__consumer_offsets may not be compacted", f"{ops.offsets_dirty_hold:g}s",
                  "log-cleaner.log, min.cleanable.dirty.ratio and min.compaction.lag.ms of the compacted topics"),
        AlertRule("LogCleanerIdle",
                  f"kafka_log_logcleanermanager_time_since_last_run_ms / 1000 > {ops.cleaner_idle_alarm:g}",
                  "critical", "the log cleaner on {{ $labels.node }} has not run for {{ $value }} s", "0s",
                  "log-cleaner.log for the exception that killed its thread; restart the broker"),
        AlertRule("GroupCoordinatorLoadSlow",
                  f"kafka_server_group_coordinator_metrics_partition_load_time_max / 1000 > {ops.coordinator_load_warn:g}",
                  "warning",
                  "the group coordinator on {{ $labels.node }} took {{ $value }} s to load a __consumer_offsets "
                  "partition", "0s", "the size of __consumer_offsets and its compaction"),
    ]


def traffic_rules() -> list[AlertRule]:
    """Broker-side read amplification per topic: bytes out over the last 10 minutes at least twice
    the 10 minutes before, at least 1 MiB/s, while bytes in moved by at most a quarter of their
    level now."""
    def rate(direction: str, offset: str = "") -> str:
        name = f"kafka_server_brokertopicmetrics_bytes{direction}persec_total"
        per_node = kafka(name, lambda series: f'rate({series}{{topic!=""}}[10m]{offset})')
        return f"sum by (cluster, topic) {per_node}"

    out, out_before = rate("out"), rate("out", " offset 10m")
    into, into_before = rate("in"), rate("in", " offset 10m")
    return [
        AlertRule("TopicReadAmplification",
                  f"({out} >= 2 * {out_before} and {out} >= 1048576) and abs({into} - {into_before}) <= 0.25 * {into}", "warning",
                  "bytes out of {{ $labels.topic }} on {{ $labels.cluster }} doubled while bytes in stayed flat",
                  "0s", "who reads the topic again: jobs that keep their offsets in their own store"),
    ]


def link_speed(declared_mbit: dict[str, float]) -> str:
    """Each link's speed in bytes per second: node_exporter's, or for a device that reports none
    (the loopback, many virtual NICs), its ``ops.machines.link_speed_mbit`` on every host that has
    it (its byte counter gives the series the instance and device labels)."""
    speed = "node_network_speed_bytes"
    for device, mbit in declared_mbit.items():
        counter = f"node_network_receive_bytes_total{{device={json.dumps(device)}}}"
        speed += f" or on (instance, device) (0 * {counter} + {mbit * 125_000:.15g})"
    return f"({speed})" if declared_mbit else speed


def host_rules(ops: Ops) -> list[AlertRule]:
    """The broker hosts, on node_exporter's metric names (a remote node_exporter, or the local
    runtime's): the reports' outages came from saturated uplinks, RAID rebuilds, full and
    half-dead disks. Rates over ``ops.machines.window``; each holds for ``ops.machines.hold``."""
    machines = ops.machines
    window, hold = duration(machines.window), duration(machines.hold)

    def rate(series: str) -> str:
        return f"rate({series}[{window}])"

    used = "1 - node_filesystem_avail_bytes / node_filesystem_size_bytes"
    link = f"on (instance, device) {link_speed(machines.link_speed_mbit)}"
    io_seconds = f"{rate('node_disk_read_time_seconds_total')} + {rate('node_disk_write_time_seconds_total')}"
    ios = f"{rate('node_disk_reads_completed_total')} + {rate('node_disk_writes_completed_total')}"
    stolen = rate('node_cpu_seconds_total{mode="steal"}')
    steal = f"avg by (instance) ({stolen})"
    return [
        AlertRule("HostNetworkSaturated",
                  # Each direction on its own: `or` keeps the second only where the first is quiet.
                  f"{rate('node_network_receive_bytes_total')} / {link} > {machines.network_ratio:g} or "
                  f"{rate('node_network_transmit_bytes_total')} / {link} > {machines.network_ratio:g}", "warning",
                  "{{ $labels.device }} on {{ $labels.instance }} carries {{ $value | humanizePercentage }} of its link's speed", hold,
                  "who sends or fetches that much: replication catching up, a consumer reading from the start"),
        AlertRule("HostDiskBusy", f"{rate('node_disk_io_time_seconds_total')} > {machines.disk_busy_ratio:g}",
                  "warning", "disk {{ $labels.device }} on {{ $labels.instance }} is busy {{ $value | humanizePercentage }} of the time",
                  hold, "a RAID rebuild, a compaction or a broker recovering its logs on that disk"),
        AlertRule("HostDiskSlow", f"({io_seconds}) / ({ios}) > {machines.disk_await:g}", "warning",
                  "disk {{ $labels.device }} on {{ $labels.instance }} takes {{ $value | humanizeDuration }} per I/O", hold,
                  "the disk's health (SMART, the RAID controller's log): a disk going bad slows every write"),
        AlertRule("HostFilesystemFilling", f"{used} > {machines.filesystem_warn:g}", "warning",
                  "{{ $labels.mountpoint }} on {{ $labels.instance }} is {{ $value | humanizePercentage }} full", hold,
                  "the topics' retention.bytes and retention.ms against the disk"),
        AlertRule("HostFilesystemFull", f"{used} > {machines.filesystem_alarm:g}", "critical",
                  "{{ $labels.mountpoint }} on {{ $labels.instance }} is {{ $value | humanizePercentage }} full: a broker stops when "
                  "its log disk is", hold, "free space now: shorten retention, move partitions off the broker"),
        AlertRule("HostCpuSteal", f"{steal} > {machines.cpu_steal_ratio:g}", "warning",
                  "the hypervisor takes {{ $value | humanizePercentage }} of {{ $labels.instance }}'s CPU time for others", hold,
                  "the host's neighbours; move the broker to a dedicated host"),
    ]


def rules_document(ops: Ops, relaxed: Sequence[str] = ()) -> dict[str, object]:
    """Every group of rules; ``relaxed``: the topics delivered at least once, whose losses warn."""
    groups = (("conveyor-brokers", broker_rules(ops)), ("conveyor-offset-manager", offset_manager_rules(ops)),
              ("conveyor-traffic", traffic_rules()), ("conveyor-lag", lag_rules(ops)),
              ("conveyor-replication", replication_rules(relaxed)), ("conveyor-lake", lake_rules(ops, relaxed)),
              ("conveyor-gateway", gateway_rules(ops)), ("conveyor-dispatch", dispatch_rules(ops)),
              ("conveyor-realtime", realtime_rules(ops)), ("conveyor-components", presence_rules(ops)),
              ("conveyor-hosts", host_rules(ops)))
    return {"groups": [{"name": name, "rules": [r.document() for r in rules]} for name, rules in groups]}
