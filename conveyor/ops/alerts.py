"""Alert rules: lag statuses, offset findings and health findings turned into alerts. Pure.

Every alert has a severity, says what is wrong with the numbers that show it, and names what to
look at. The rules are tables (severity per lag status, per finding kind, a message per health
rule), so each is tested from a table of cases. One event raises one alert: a group whose offsets
moved back gets the rewind finding's alert (amount and cause) instead of a second one for its
REWIND status.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from conveyor.ops.health import HealthFinding, Rule, Severity
from conveyor.ops.lag import Reason, Status
from conveyor.ops.rewind import FindingKind, OffsetFinding, ReadAmplification
from conveyor.ops.tracker import GroupReport
from conveyor.replicate.plan import Gap


@dataclass(frozen=True, slots=True)
class Alert:
    severity: Severity
    #: Stable name of the rule, also the metric label: lag_stop, offset_reset_latest, under_replicated...
    rule: str
    cluster: str
    #: What it is about: a consumer group, a node, or the cluster.
    subject: str
    #: What is wrong.
    message: str
    #: What to look at.
    look_at: str
    #: When the condition began, epoch ms, when known.
    since_ms: int | None = None


LAG_SEVERITY = {
    Status.WARN: Severity.WARNING,
    Status.STALL: Severity.WARNING,
    Status.STOP: Severity.CRITICAL,
    Status.REWIND: Severity.CRITICAL,
    Status.ERR: Severity.CRITICAL,
}
LAG_LOOK_AT = {
    Status.WARN: "the group's throughput against the produce rate: add consumers up to the partition count, "
                 "or put the dispatcher in front of a slow consumer",
    Status.STALL: "the consumer's logs for a record it cannot process: it is alive and keeps committing the same offset",
    Status.STOP: "the group's members (`conveyor ops lag --group {group}` shows its state): a crashed, hung or "
                 "descheduled consumer, or partitions left unassigned after a rebalance",
    Status.REWIND: "who moved the committed offset back: an offsets reset, a consumer restoring offsets from its "
                   "own store, the coordinator after a rebalance",
    Status.ERR: "the partition named in the message; the group's auto.offset.reset decides whether the coming "
                "reset re-reads or skips",
}

FINDING_SEVERITY = {
    FindingKind.REWIND: Severity.WARNING,
    FindingKind.RESET_EARLIEST: Severity.WARNING,
    FindingKind.RESET_LATEST: Severity.CRITICAL,
    FindingKind.BEHIND_LOG_START: Severity.CRITICAL,
}
FINDING_LOOK_AT = {
    FindingKind.REWIND: "consumers of the group for duplicates; offset resets and restores in the group's history",
    FindingKind.RESET_EARLIEST: "the consumers' logs for 'offset out of range' and why the commit was lost",
    FindingKind.RESET_LATEST: "the skipped offsets named in the message: re-process them while retention keeps them",
    FindingKind.BEHIND_LOG_START: "the topic's retention against the group's throughput",
}

# Health rules: (message, look at); formatted with the finding's fields.
HEALTH_TEXT = {
    Rule.BROKER_DOWN: (
        "{subject} on {cluster} does not answer its metrics endpoint ({detail})",
        "whether the process is alive (`conveyor status`) and its server.log; while it is down its partitions "
        "run on fewer replicas"),
    Rule.UNDER_REPLICATED: (
        "{value:,.0f} partition(s) on {cluster} have fewer in-sync replicas than replicas",
        "a broker down or slow (broker_down, isr_shrinking), the followers' lag; "
        "`kafka-topics --describe --under-replicated-partitions`"),
    Rule.UNDER_MIN_ISR: (
        "{value:,.0f} partition(s) on {cluster} are below min.insync.replicas: acks=all writes to them fail "
        "with NOT_ENOUGH_REPLICAS",
        "bring the missing brokers back first; the under-replicated partitions"),
    Rule.OFFLINE: (
        "{value:,.0f} partition(s) on {cluster} have no leader: they can be neither written nor read",
        "the brokers that hold their replicas; keep unclean.leader.election.enable off unless losing data is "
        "acceptable"),
    Rule.NO_CONTROLLER: (
        "no active controller on {cluster}: no leader election or topic change can happen",
        "the controller quorum (kafka_server_raft_* metrics) and the controllers' logs"),
    Rule.ISR_SHRINKING: (
        "in-sync replica sets are shrinking on {subject} ({value:,.2f}/s)",
        "the followers' network, disk and GC pauses, a broker going down, replica.lag.time.max.ms"),
    Rule.UNCLEAN_ELECTION: (
        "{value:,.0f} unclean leader election(s) on {cluster} since its controller started: acknowledged "
        "records were lost",
        "which partitions (the controller's log); compare producer counts with what landed (audit); "
        "unclean.leader.election.enable"),
    Rule.LEADER_CHANGES: (
        "{value:,.0f} partition leader change(s) on {cluster} in the last {detail} s",
        "brokers restarting or fenced (session timeouts) and leaders flapping between brokers; "
        "with acks=1 every change loses what the followers had not copied"),
    Rule.REQUEST_SLOW: (
        "{detail} requests on {subject} take {seconds:,.1f} s at p99 (above {limit_s:g} s)",
        "the broker's request queue and handler idle ratio, its disk and network, a slow topic hogging it, "
        "GC pauses"),
    Rule.FOLLOWER_LAG: (
        "followers of {subject} stayed behind across the last {detail} samples (now {value:,.0f} records)",
        "the leader's and followers' network and disk, replica fetcher threads, replication throttles left set"),
    Rule.SKEW: (
        "{detail} per broker on {cluster} is uneven: max over mean {value:,.2f} (above {limit:g})",
        "`conveyor balance plan --cluster {cluster}`: load on few brokers makes them the bottleneck: "
        "reads that hit 2-3 of 5 brokers slow every client of those brokers"),
    Rule.COMPACTION_STALLED: (
        "the log cleaner on {subject} leaves its compacted logs {value:,.0f}% dirty (above {limit:g}%) across the "
        "last {detail} samples: __consumer_offsets may not be compacted, and a coordinator taking it over loads "
        "all of it",
        "the cleaner's log (log-cleaner.log), min.cleanable.dirty.ratio and min.compaction.lag.ms of the compacted "
        "topics (`kafka-configs --describe`), uncleanable partitions"),
    Rule.CLEANER_IDLE: (
        "the log cleaner on {subject} has not run for {seconds:,.0f} s (above {limit_s:g} s): its thread is dead, "
        "so __consumer_offsets grows without compaction",
        "log-cleaner.log for the exception that killed it; restart the broker"),
    Rule.COORDINATOR_LOAD_SLOW: (
        "the group coordinator on {subject} took {seconds:,.1f} s to load a __consumer_offsets partition "
        "(above {limit_s:g} s): its groups got no offsets meanwhile",
        "the size of __consumer_offsets (compaction: offsets_compaction_stalled) and the broker's disk"),
    Rule.TOPIC_AMPLIFICATION: (
        "bytes out of {subject} on {cluster} rose to {value:,.0f} B/s from {limit:,.0f} B/s while bytes in stayed "
        "flat; {detail}",
        "who reads the topic (the brokers' request logs, client ids, `conveyor ops lag`); jobs that keep offsets in "
        "their own store and rewind all together read a topic several times over"),
}

#: Lag statuses whose cause is the offset manager's, by reason: their own rule instead of lag_err.
REASON_RULES = {
    Reason.COMMIT_LOST: (
        "offset_fetch_empty",
        "the offset manager: an offset fetch answered no offset for a partition the group had committed. Check "
        "offsets_compaction_stalled and coordinator_load_slow, the group's offsets.retention.minutes, and who "
        "deleted its offsets; the group's auto.offset.reset decides whether it now re-reads or skips"),
}


def lag_alert(report: GroupReport) -> Alert | None:
    """One alert for a group that is not OK; its message names the worst partition."""
    status = report.status
    if status.status is Status.OK:
        return None
    worst = status.problems[0] if status.problems else None
    state = f" (group state {report.state})" if report.state else ""
    rule, look_at = f"lag_{status.status.name.lower()}", LAG_LOOK_AT[status.status].format(group=report.group)
    if worst is not None and worst.reason in REASON_RULES:
        rule, look_at = REASON_RULES[worst.reason]
    return Alert(LAG_SEVERITY[status.status], rule, report.cluster, report.group,
                 f"{report.cluster}: {status.message}{state}", look_at, worst.since_ms if worst else None)


def offset_alerts(cluster: str, findings: Sequence[OffsetFinding]) -> list[Alert]:
    """One alert per (group, kind): the earliest finding in full, the other partitions summed."""
    by_kind: dict[tuple[str, FindingKind], list[OffsetFinding]] = {}
    for finding in findings:
        by_kind.setdefault((finding.group, finding.kind), []).append(finding)
    alerts = []
    for (group, kind), found in sorted(by_kind.items(), key=lambda item: (item[0][0], item[0][1].value)):
        found.sort(key=lambda f: (f.at_ms, f.topic, f.partition))
        message = f"{cluster}: {found[0].message}"
        if len(found) > 1:
            partitions = {(f.topic, f.partition) for f in found}
            message += (f" In all: {len(found)} such moves on {len(partitions)} partition(s), "
                        f"{sum(f.records for f in found):,} records.")
        alerts.append(Alert(FINDING_SEVERITY[kind], f"offset_{kind.name.lower()}", cluster, group, message,
                            FINDING_LOOK_AT[kind], found[0].at_ms))
    return alerts


def amplification_alert(cluster: str, finding: ReadAmplification) -> Alert:
    return Alert(Severity.WARNING, "read_amplification", cluster, finding.group, f"{cluster}: {finding.message}",
                 "bytes out of the brokers against bytes in; where the group stores its offsets")


def group_alerts(report: GroupReport) -> list[Alert]:
    alerts = offset_alerts(report.cluster, report.findings.offsets)
    alerts += [amplification_alert(report.cluster, f) for f in report.findings.amplification]
    lag = lag_alert(report)
    if lag is not None and not (report.status.status is Status.REWIND and report.findings.offsets):
        alerts.append(lag)
    return alerts


def health_alert(finding: HealthFinding) -> Alert:
    message, look_at = HEALTH_TEXT[finding.rule]
    fields = {"cluster": finding.cluster, "subject": finding.subject, "value": finding.value,
              "limit": finding.limit or 0.0, "detail": finding.detail, "seconds": finding.value / 1000,
              "limit_s": (finding.limit or 0.0) / 1000}
    # Several findings of these rules share a subject (a node's requests, a cluster's loads).
    per_detail = finding.rule in (Rule.REQUEST_SLOW, Rule.SKEW)
    subject = f"{finding.subject} {finding.detail}" if per_detail else finding.subject
    return Alert(finding.severity, finding.rule.value, finding.cluster, subject, message.format(**fields),
                 look_at.format(**fields))


def sampling_alert(cluster: str, error: str) -> Alert:
    return Alert(Severity.CRITICAL, "sampling_failed", cluster, cluster, error,
                 "the cluster's bootstrap servers and the watcher's client settings; until it answers, consumer lag "
                 "on it is not judged")


#: A replication gap stays an alert this long after a copier found it: the loss is permanent, the
#: alarm is for the people who can still replay the records from elsewhere.
GAP_ALERT_MS = 24 * 3600 * 1000


def replication_gap_alert(route: str, source: str, destination: str, gaps: Sequence[Gap], at_ms: int,
                          relaxed: Collection[str] = ()) -> Alert | None:
    """One alert per route for the gaps found within GAP_ALERT_MS: the records retention deleted on
    the source before the route copied them. Critical when an exact topic lost records; a warning
    when only topics delivered at least once (``relaxed``) did."""
    recent = sorted((g for g in gaps if at_ms - g.found_ms <= GAP_ALERT_MS), key=lambda g: (g.topic, g.partition, g.first))
    if not recent:
        return None
    severity = Severity.WARNING if all(g.topic in relaxed for g in recent) else Severity.CRITICAL
    listed = ", ".join(f"{g.topic}[{g.partition}] {g.first}..{g.last}" for g in recent[:5])
    more = f" and {len(recent) - 5} more" if len(recent) > 5 else ""
    return Alert(severity, "replication_gap", destination, f"route {route}",
                 f"retention on {source} deleted {sum(g.count for g in recent):,} records before route {route} copied "
                 f"them: {listed}{more}",
                 f"`conveyor replicate status --route {route}`; the route's workers were down or slower than {source}'s "
                 "retention: raise its retention or the workers' count, and replay the lost records from their producers",
                 min(g.found_ms for g in recent))


def sort_alerts(alerts: Iterable[Alert]) -> tuple[Alert, ...]:
    """Worst first, then by cluster, rule and subject, so the order is stable between refreshes."""
    return tuple(sorted(alerts, key=lambda a: (-a.severity, a.cluster, a.rule, a.subject)))
