"""A route's topics on the destination: created, grown, and their configs kept in step with the source.

The I/O edge of :mod:`conveyor.replicate.topic_configs`, through the topic provisioner's own
snapshot, planner and apply (the code of `conveyor topics apply`). Declared topics get their
platform.yaml declaration, exactly as `conveyor topics apply` gives it, and a change the destination
refuses for them fails the round as it fails that command. Undeclared topics get their source's
configs; a change the destination refuses for one of them is reported as a difference of that topic
and holds no other topic back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from conveyor.config import Platform, Route, Topic
from conveyor.replicate.topic_configs import (
    MIN_INSYNC,
    MIRRORED,
    ConfigDifference,
    MirroredConfigs,
    mirror_configs,
    not_applied,
)
from conveyor.topics.plan import Change, ClusterPlan, LiveTopic, plan_cluster
from conveyor.topics.provisioner import ProvisionError, apply, snapshot

_TIMEOUT = 15.0


@dataclass(frozen=True)
class TopicSync:
    #: What was done on the destination.
    changes: tuple[Change, ...]
    #: Per undeclared topic: the source values its copy does not have; empty when it has them all.
    differences: dict[str, tuple[ConfigDifference, ...]]


def read_configs(admin: AdminClient, topics: Iterable[str], keys: Iterable[str]) -> dict[str, dict[str, str]]:
    """Per topic, its values of ``keys``; a topic deleted since it was listed is left out."""
    wanted = set(keys)
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in topics]
    if not resources:
        return {}
    found = {}
    for resource, future in admin.describe_configs(resources, request_timeout=_TIMEOUT).items():
        try:
            entries = future.result()
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise
        found[resource.name] = {k: e.value for k, e in entries.items() if k in wanted and e.value is not None}
    return found


def _mirrored(platform: Platform, route: Route, name: str, source: Mapping[str, str],
              live: LiveTopic | None) -> tuple[int, MirroredConfigs]:
    """The copy's replication factor (the live one, which the replicator never changes) and configs."""
    cluster = platform.cluster(route.destination)
    factor = live.replication_factor if live is not None else cluster.default_replication_factor
    return factor, mirror_configs(name, source, route.destination, factor, cluster.default_min_insync)


def sync_topics(platform: Platform, route: Route, counts: Mapping[str, int], source_admin: AdminClient,
                destination_admin: AdminClient) -> TopicSync:
    """Create or grow every topic of ``counts`` (name -> source partitions) on the destination, and
    bring the configs of undeclared ones to their source's."""
    cluster = platform.cluster(route.destination)
    declared = {name: platform.topics[name] for name in counts if name in platform.topics}
    undeclared = sorted(name for name in counts if name not in declared)
    source_configs = read_configs(source_admin, undeclared, MIRRORED)
    managed = set(MIRRORED) | {key for topic in declared.values() for key in topic.kafka_configs(cluster)}
    specs = {name: topic.model_copy(update={"partitions": max(counts[name], topic.partitions), "clusters": None})
             for name, topic in declared.items()}
    # Undeclared topics are never isolated: only declared ones can need their replicas placed.
    snap = snapshot(platform, route.destination, destination_admin, managed, only=set(counts), placing=specs)
    differences: dict[str, tuple[ConfigDifference, ...]] = {}
    for name in undeclared:
        if name not in source_configs:
            continue  # deleted on the source since it was listed
        live = snap.topics.get(name)
        factor, mirrored = _mirrored(platform, route, name, source_configs[name], live)
        specs[name] = Topic(
            partitions=max(counts[name], live.partitions if live else 0),
            replication_factor=factor, min_insync_replicas=int(mirrored.configs[MIN_INSYNC]),
            config={k: v for k, v in mirrored.configs.items() if k != MIN_INSYNC})
        differences[name] = mirrored.differences
    cluster_plan = plan_cluster(route.destination, cluster, specs, snap.topics, snap.brokers)

    own = tuple(c for c in cluster_plan.changes if c.topic in declared)
    mirrored_changes = tuple(c for c in cluster_plan.changes if c.topic not in declared)
    done = []
    if own or cluster_plan.refusals:
        done += [c for _, c in apply(platform, [ClusterPlan(route.destination, own, cluster_plan.refusals)])]
    if mirrored_changes:
        try:
            done += [c for _, c in apply(platform, [ClusterPlan(route.destination, mirrored_changes, ())])]
        except ProvisionError:
            # The batch stops at its first refusal: each topic alone, to learn which ones refuse.
            for name in sorted({c.topic for c in mirrored_changes}):
                changes = tuple(c for c in mirrored_changes if c.topic == name)
                try:
                    done += [c for _, c in apply(platform, [ClusterPlan(route.destination, changes, ())])]
                except ProvisionError as err:
                    differences[name] += _refused(name, changes, source_configs[name], snap.topics.get(name),
                                                  f"{route.destination} refused it ({err})")
    return TopicSync(tuple(done), differences)


def _refused(name: str, changes: tuple[Change, ...], source: Mapping[str, str], live: LiveTopic | None,
             reason: str) -> tuple[ConfigDifference, ...]:
    found = []
    for change in changes:
        if not change.configs:  # a partition increase
            found.append(ConfigDifference(name, "partitions", str(change.partitions),
                                          str(live.partitions) if live else None, reason))
        for key, value in sorted(change.configs.items()):
            found.append(ConfigDifference(name, key, source.get(key, value),
                                          live.configs.get(key) if live else None, reason))
    return tuple(found)


def config_differences(platform: Platform, route: Route, topics: Iterable[str], source_admin: AdminClient,
                       destination_admin: AdminClient) -> dict[str, tuple[ConfigDifference, ...]]:
    """For ``conveyor replicate status``: per undeclared topic on the destination, the source values
    its copy does not have now, whether the destination cannot take them or has not taken them yet."""
    undeclared = sorted(name for name in topics if name not in platform.topics)
    source_configs = read_configs(source_admin, undeclared, MIRRORED)
    snap = snapshot(platform, route.destination, destination_admin, MIRRORED, only=set(undeclared))
    found = {}
    for name in undeclared:
        live = snap.topics.get(name)
        if name not in source_configs or live is None:
            continue
        _, mirrored = _mirrored(platform, route, name, source_configs[name], live)
        known = {d.config for d in mirrored.differences}
        found[name] = tuple(replace(d, destination=live.configs.get(d.config)) for d in mirrored.differences) + \
            not_applied(name, source_configs[name], {k: v for k, v in mirrored.configs.items() if k not in known},
                        live.configs, "not applied: the destination refused it or a worker has not synced it yet "
                                      "(see the workers' log)")
    return found
