"""Durability lint: topic settings that look fine until a broker fails, then stop writes or lose
acknowledged records. Pure: the platform model in, findings out. ``conveyor config check`` and
``conveyor topics plan`` print them as warnings, and fail on them with ``--strict``.

Each rule reads the settings as each cluster that carries the topic would apply them (the topic's
own, else the cluster's defaults), so a topic is judged once per cluster. The rules about losing
an acknowledged record to one failure (min ISR 1, fewer than 3 replicas on the read cluster,
unclean election) apply to exact topics only: a topic delivered at least once accepts that rare loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.config import ClusterRole, Delivery, Platform
from conveyor.config.topics import CleanupPolicy

#: Kafka's default segment.ms (7 days).
DEFAULT_SEGMENT_MS = 7 * 86_400_000


@dataclass(frozen=True)
class Finding:
    topic: str
    cluster: str
    rule: str
    message: str


def durability_findings(platform: Platform) -> list[Finding]:
    findings = []
    for cluster_name, cluster in platform.clusters.items():
        for name, topic in sorted(platform.topics_on(cluster_name).items()):
            factor, min_isr = topic.replication_on(cluster)
            configs = topic.kafka_configs(cluster)

            def found(rule: str, message: str) -> None:
                findings.append(Finding(name, cluster_name, rule, message))

            if factor > 1 and min_isr >= factor:
                found("min-isr-equals-replicas", f"min.insync.replicas {min_isr} equals the replication factor "
                      f"{factor}: one broker down stops every acks=all write to the topic")
            exact = topic.delivery is Delivery.exact
            if exact and factor > 1 and min_isr == 1:
                found("min-isr-one", "min.insync.replicas 1: an acks=all write is acknowledged by the leader "
                      "alone, and lost if the leader fails before a follower has copied it")
            if exact and cluster.role is ClusterRole.read and factor < 3:
                found("read-replicas-below-3", f"replication factor {factor} on the read cluster: one broker "
                      "down leaves at most one copy of what every reader depends on")
            segment = int(configs.get("segment.ms", DEFAULT_SEGMENT_MS))
            if topic.cleanup_policy is CleanupPolicy.delete and 0 <= topic.retention < segment:
                found("segment-over-retention", f"segment.ms {segment} is above retention.ms {topic.retention}: "
                      "records stay until their segment rolls, so a topic written slowly keeps them far longer "
                      "than its retention says")
            if exact and configs.get("unclean.leader.election.enable", "false").lower() == "true":
                found("unclean-election", "unclean.leader.election.enable: a replica that missed writes can "
                      "become leader and drop acknowledged records")
    return findings
