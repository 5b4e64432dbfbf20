"""What it takes to make one cluster's topics match platform.yaml. Pure: no Kafka here.

The federation needs every topic in every cluster (docs/architecture.md, section 2), created by
the tool that plans them rather than by hand on each cluster. The plan lists creations, partition
increases and config changes; what Kafka cannot do (shrink a topic, change the replication factor
in place) is a refusal with the reason, and a plan with refusals is never applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from conveyor.config import Cluster, Topic


class ChangeKind(str, Enum):
    create = "create"
    add_partitions = "add partitions"
    alter_configs = "alter configs"
    delete = "delete"


@dataclass(frozen=True)
class LiveTopic:
    name: str
    partitions: int
    replication_factor: int
    #: Current values of the configs Conveyor manages.
    configs: dict[str, str]


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    rack: str | None


@dataclass(frozen=True)
class Change:
    topic: str
    kind: ChangeKind
    detail: str
    partitions: int = 0
    replication_factor: int = 0
    configs: dict[str, str] = field(default_factory=dict)
    #: Explicit replicas per new partition (isolated topics); None lets Kafka place them.
    replica_assignment: list[list[int]] | None = None


@dataclass(frozen=True)
class Refusal:
    topic: str
    reason: str


@dataclass(frozen=True)
class Budget:
    """A cluster's partitions (leaders, internal topics' included) against its partition budget."""

    held: int
    after: int
    limit: int


@dataclass(frozen=True)
class ClusterPlan:
    cluster: str
    changes: tuple[Change, ...]
    refusals: tuple[Refusal, ...]
    #: Set when the plan was made against every topic of the cluster.
    budget: Budget | None = None

    @property
    def in_sync(self) -> bool:
        return not self.changes and not self.refusals


def is_internal(topic: str) -> bool:
    """Kafka's own topics (__consumer_offsets, __transaction_state, ...); never pruned."""
    return topic.startswith("__")


def place_replicas(
    first_partition: int, count: int, factor: int, brokers: list[BrokerInfo]
) -> list[list[int]]:
    """Replicas for partitions ``first_partition .. first_partition+count-1`` on ``brokers``.

    Brokers are interleaved by rack, so consecutive picks fall on different racks, and each
    partition starts one broker further along, so leaders spread evenly.
    """
    if factor > len(brokers):
        raise ValueError(f"replication factor {factor} needs at least {factor} brokers, got {len(brokers)}")
    by_rack: dict[str | None, list[int]] = {}
    for broker in sorted(brokers, key=lambda b: b.broker_id):
        by_rack.setdefault(broker.rack, []).append(broker.broker_id)
    racks = [by_rack[r] for r in sorted(by_rack, key=str)]
    ordered = [rack[i] for i in range(max(map(len, racks))) for rack in racks if i < len(rack)]
    return [
        [ordered[(p + r) % len(ordered)] for r in range(factor)]
        for p in range(first_partition, first_partition + count)
    ]


def isolated_brokers(topic: Topic, cluster: Cluster, live_brokers: list[BrokerInfo]) -> list[BrokerInfo] | None:
    """The brokers an isolated topic may use on this cluster, or None when it is not isolated here."""
    if topic.isolation is None or topic.isolation not in cluster.tags:
        return None
    allowed = set(cluster.tags[topic.isolation])
    return [b for b in live_brokers if b.broker_id in allowed]


def needs_placement(cluster: Cluster, desired: Mapping[str, Topic], live: Mapping[str, LiveTopic]) -> bool:
    """Whether planning ``desired`` places replicas itself, and so needs the live brokers: an
    isolated topic to create or to grow. Kafka places every other topic's replicas."""
    return any(topic.isolation is not None and topic.isolation in cluster.tags
               and (name not in live or topic.partitions > live[name].partitions)
               for name, topic in desired.items())


def plan_cluster(
    cluster_name: str,
    cluster: Cluster,
    desired: dict[str, Topic],
    live: dict[str, LiveTopic],
    live_brokers: list[BrokerInfo],
    prune: bool = False,
) -> ClusterPlan:
    changes: list[Change] = []
    refusals: list[Refusal] = []
    for name, topic in sorted(desired.items()):
        factor, _ = topic.replication_on(cluster)
        wanted_configs = topic.kafka_configs(cluster)
        placement = isolated_brokers(topic, cluster, live_brokers)
        current = live.get(name)
        if current is None:
            assignment = None
            if placement is not None:
                if len(placement) < factor:
                    refusals.append(Refusal(name, _too_few_tagged(topic, factor, placement)))
                    continue
                assignment = place_replicas(0, topic.partitions, factor, placement)
            changes.append(
                Change(name, ChangeKind.create,
                       f"create with {topic.partitions} partitions, replication factor {factor}",
                       partitions=topic.partitions, replication_factor=factor,
                       configs=wanted_configs, replica_assignment=assignment)
            )
            continue
        if topic.partitions < current.partitions:
            refusals.append(
                Refusal(name, f"declares {topic.partitions} partitions but the topic has {current.partitions}: "
                              "Kafka cannot shrink a topic; raise the declaration back, or create a new "
                              "topic and move producers and consumers to it")
            )
        elif topic.partitions > current.partitions:
            assignment = None
            if placement is not None:
                if len(placement) < factor:
                    refusals.append(Refusal(name, _too_few_tagged(topic, factor, placement)))
                    continue
                assignment = place_replicas(current.partitions, topic.partitions - current.partitions, factor, placement)
            changes.append(
                Change(name, ChangeKind.add_partitions, f"partitions {current.partitions} -> {topic.partitions}",
                       partitions=topic.partitions, replica_assignment=assignment)
            )
        if factor != current.replication_factor:
            refusals.append(
                Refusal(name, f"declares replication factor {factor} but the topic has "
                              f"{current.replication_factor}: changing it moves replicas, which "
                              "`conveyor topics apply` does not do; reassign partitions instead")
            )
        drift = {k: v for k, v in wanted_configs.items() if current.configs.get(k) != v}
        if drift:
            detail = ", ".join(f"{k} {current.configs.get(k, '(unset)')} -> {v}" for k, v in sorted(drift.items()))
            changes.append(Change(name, ChangeKind.alter_configs, detail, configs=drift))
    if prune:
        for name in sorted(set(live) - set(desired)):
            if not is_internal(name):
                changes.append(Change(name, ChangeKind.delete, "not declared in platform.yaml (--prune)"))
    return ClusterPlan(cluster_name, tuple(changes), tuple(refusals))


def within_budget(plan: ClusterPlan, cluster: Cluster, live: dict[str, LiveTopic]) -> ClusterPlan:
    """``plan`` with the cluster's partition budget, and a refusal when applying it would pass it."""
    held = sum(t.partitions for t in live.values())
    added = sum(c.partitions for c in plan.changes if c.kind == ChangeKind.create)
    added += sum(c.partitions - live[c.topic].partitions for c in plan.changes if c.kind == ChangeKind.add_partitions)
    removed = sum(live[c.topic].partitions for c in plan.changes if c.kind == ChangeKind.delete)
    budget = Budget(held, held + added - removed, cluster.partition_budget)
    refusals = plan.refusals
    if added and budget.after > budget.limit:
        refusals += (Refusal("*", f"the cluster would hold {budget.after:,} partitions, above its partition budget of "
                                  f"{budget.limit:,} (clusters.{plan.cluster}.partition_budget)"),)
    return ClusterPlan(plan.cluster, plan.changes, refusals, budget)


def _too_few_tagged(topic: Topic, factor: int, placement: list[BrokerInfo]) -> str:
    return (f"isolation tag {topic.isolation!r} is on {len(placement)} live broker(s), "
            f"fewer than the replication factor {factor}")
