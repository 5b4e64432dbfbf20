"""Plan and apply platform.yaml's topics on every cluster, writable and read alike.

The I/O edge of :mod:`conveyor.topics.plan`: it reads each cluster's topics, configs and brokers
through the admin client, asks the pure planner for the difference, and applies it. A plan with
any refusal (on any cluster) is not applied at all, so a run never leaves the clusters half-changed
by a mistake in the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from conveyor import kafka
from conveyor.config import Platform, Topic
from conveyor.errors import ConveyorError
from conveyor.topics.plan import (BrokerInfo, Change, ChangeKind, ClusterPlan, LiveTopic, needs_placement,
                                  plan_cluster, within_budget)

_TIMEOUT = 15.0


class ProvisionError(ConveyorError):
    """A cluster could not be read or changed, or the plan holds changes Kafka cannot make."""


@dataclass(frozen=True)
class ClusterSnapshot:
    topics: dict[str, LiveTopic]
    #: The live brokers, read only when the plan places replicas itself (see :func:`snapshot`).
    brokers: list[BrokerInfo]


def _unreachable(platform: Platform, cluster: str, exc: KafkaException) -> ProvisionError:
    return ProvisionError(
        f"cluster {cluster} at {platform.bootstrap(cluster)} did not answer "
        f"({exc.args[0].str() if exc.args else exc}); is it running? (`conveyor status`)"
    )


def snapshot(platform: Platform, cluster: str, admin: AdminClient, managed_configs: Iterable[str],
             only: set[str] | None = None, placing: Mapping[str, Topic] | None = None) -> ClusterSnapshot:
    """The cluster's topics (or just ``only``), with the values of the configs Conveyor manages,
    and its live brokers when one of ``placing`` needs its replicas placed (empty otherwise).

    The brokers come from DescribeCluster, which services run on a timer could not afford: when a
    broker answers it with metadata librdkafka cannot use (one restarting, a handle closing),
    librdkafka's parser returns neither a result nor an error and the process aborts on
    ``rd_kafka_admin_response_parse: Assertion `rko_result' failed``."""
    try:
        metadata = admin.list_topics(timeout=_TIMEOUT)
        names = [name for name in metadata.topics
                 if not metadata.topics[name].error and (only is None or name in only)]
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        configs = {}
        if resources:
            for resource, future in admin.describe_configs(resources, request_timeout=_TIMEOUT).items():
                configs[resource.name] = {k: e.value for k, e in future.result().items()}
    except KafkaException as exc:
        raise _unreachable(platform, cluster, exc) from None
    managed = set(managed_configs)
    topics = {}
    for name in names:
        partitions = metadata.topics[name].partitions
        factor = max((len(p.replicas) for p in partitions.values()), default=0)
        values = {k: v for k, v in configs.get(name, {}).items() if k in managed and v is not None}
        topics[name] = LiveTopic(name, len(partitions), factor, values)
    brokers: list[BrokerInfo] = []
    if needs_placement(platform.cluster(cluster), placing or {}, topics):
        try:
            description = admin.describe_cluster(request_timeout=_TIMEOUT).result()
        except KafkaException as exc:
            raise _unreachable(platform, cluster, exc) from None
        brokers = [BrokerInfo(node.id, node.rack) for node in description.nodes]
    return ClusterSnapshot(topics, brokers)


def plan(platform: Platform, clusters: Iterable[str] | None = None, prune: bool = False) -> list[ClusterPlan]:
    plans = []
    for name in clusters or platform.clusters:
        cluster = platform.cluster(name)
        desired = platform.topics_on(name)
        managed = {key for topic in desired.values() for key in topic.kafka_configs(cluster)}
        snap = snapshot(platform, name, kafka.admin(platform, name), managed, placing=desired)
        plans.append(within_budget(plan_cluster(name, cluster, desired, snap.topics, snap.brokers, prune), cluster,
                                   snap.topics))
    return plans


def ensure_topics(platform: Platform, cluster_name: str, specs: dict[str, Topic]) -> list[Change]:
    """Create, grow or re-configure exactly these topics on one cluster; never deletes. The same
    planner and apply path as `conveyor topics apply`, for topics that services discover at run
    time (the replicator's copies of pattern-matched topics, their own bookkeeping topics)."""
    cluster = platform.cluster(cluster_name)
    managed = {key for topic in specs.values() for key in topic.kafka_configs(cluster)}
    snap = snapshot(platform, cluster_name, kafka.admin(platform, cluster_name), managed, only=set(specs),
                    placing=specs)
    cluster_plan = plan_cluster(cluster_name, cluster, specs, snap.topics, snap.brokers)
    return [change for _, change in apply(platform, [cluster_plan])]


def apply(platform: Platform, plans: list[ClusterPlan]) -> list[tuple[str, Change]]:
    """Carry out every change of ``plans``; returns (cluster, change) for each one done."""
    refusals = [(p.cluster, r) for p in plans for r in p.refusals]
    if refusals:
        lines = "\n".join(f"  {cluster}: topic {r.topic}: {r.reason}" for cluster, r in refusals)
        raise ProvisionError(f"nothing was changed; platform.yaml asks for what Kafka cannot do:\n{lines}")
    done: list[tuple[str, Change]] = []
    for cluster_plan in plans:
        admin = kafka.admin(platform, cluster_plan.cluster)
        try:
            for change in _apply_cluster(admin, cluster_plan.changes):
                done.append((cluster_plan.cluster, change))
        except KafkaException as exc:
            raise ProvisionError(
                f"cluster {cluster_plan.cluster}: {exc.args[0].str() if exc.args else exc} "
                f"(done before the failure: {len(done)} change(s)); run `conveyor topics plan` to see what is left"
            ) from None
    return done


def _apply_cluster(admin: AdminClient, changes: tuple[Change, ...]) -> Iterable[Change]:
    by_kind: dict[ChangeKind, list[Change]] = {}
    for change in changes:
        by_kind.setdefault(change.kind, []).append(change)

    if creates := by_kind.get(ChangeKind.create):
        # confluent-kafka 2.16 wants num_partitions equal to the assignment's length (not -1, as
        # its docstring says) and no replication_factor beside an assignment.
        new_topics = [
            NewTopic(c.topic, num_partitions=len(c.replica_assignment), replica_assignment=c.replica_assignment,
                     config=c.configs)
            if c.replica_assignment
            else NewTopic(c.topic, num_partitions=c.partitions, replication_factor=c.replication_factor,
                          config=c.configs)
            for c in creates
        ]
        yield from _wait(admin.create_topics(new_topics, operation_timeout=_TIMEOUT), creates)
    if increases := by_kind.get(ChangeKind.add_partitions):
        # confluent-kafka rejects an explicit replica_assignment=None: pass it only when set.
        new_partitions = [
            NewPartitions(c.topic, c.partitions, replica_assignment=c.replica_assignment)
            if c.replica_assignment else NewPartitions(c.topic, c.partitions)
            for c in increases
        ]
        yield from _wait(admin.create_partitions(new_partitions, operation_timeout=_TIMEOUT), increases)
    if alters := by_kind.get(ChangeKind.alter_configs):
        resources = [
            ConfigResource(ResourceType.TOPIC, c.topic, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in c.configs.items()
            ])
            for c in alters
        ]
        futures = admin.incremental_alter_configs(resources)
        yield from _wait({r.name: f for r, f in futures.items()}, alters)
    if deletes := by_kind.get(ChangeKind.delete):
        yield from _wait(admin.delete_topics([c.topic for c in deletes], operation_timeout=_TIMEOUT), deletes)


def _wait(futures: dict, changes: list[Change]) -> Iterable[Change]:
    for change in changes:
        try:
            futures[change.topic].result()
        except KafkaException as exc:
            # Another process (a second replicator worker) created it first: the goal is met.
            if not (change.kind == ChangeKind.create and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
        yield change
