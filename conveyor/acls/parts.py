"""What each of Conveyor's own parts may do on a cluster: what it uses, derived from platform.yaml. Pure.

Each part connects as ``User:conveyor-<part>`` (``Platform.acting_as``). Names the parts make up
at run time (transactional ids, monitoring groups, dead-letter topics) are granted by the prefix
they all share; everything else is granted by name. Topic-level administration that a running part
does on its own (the replicator creating and growing its copies, the dispatcher creating a
dead-letter topic) is granted on those topics only. The platform's admin work (``topics apply``,
``acl apply``, balancing) stays with the super user.
"""

from __future__ import annotations

from collections.abc import Iterable

from conveyor.acls.grants import CONSUME, PRODUCE, Grant, Pattern, Resource, principal, wanted_grants, wanted_users
from conveyor.config import ClusterRole, ConfigError, Part, Platform
from conveyor.config.contracts import REGISTRY_GROUP_PREFIX, REGISTRY_TRANSACTIONAL_ID
from conveyor.config.topics import REWINDS_TOPIC
from conveyor.kafka import OFFSETS_TOPIC
from conveyor.replicate import plan

#: The cluster resource's only name in Kafka.
CLUSTER = "kafka-cluster"
#: Any name (Kafka's wildcard); used only for the ops part's read-only describes.
ANY = "*"
#: Every route topic and every replicator group starts with these.
ROUTE_TOPIC_PREFIX = plan.route_topic("")
REPLICATE_GROUP_PREFIX = plan.group_id("")
#: Kept in step with conveyor.dispatch.share_reader and conveyor.positions, which import the Kafka
#: client; a unit test checks the names agree.
DISPATCH_NODES_GROUP_PREFIX = "conveyor-dispatch-nodes."
TOPIC_ADMIN = ("CREATE", "ALTER", "ALTER_CONFIGS", "DESCRIBE_CONFIGS")


def feed_group(part: str, name: str) -> str:
    """The position feed's monitoring group (conveyor.positions.group_name)."""
    return f"conveyor.{part}.{name}"


def _on(part: Part, resource: Resource, name: str, operations: Iterable[str],
        pattern: Pattern = Pattern.literal) -> set[Grant]:
    return {Grant(principal(part.user), resource, name, pattern, op) for op in operations}


def _topics(part: Part, names: Iterable[str], operations: Iterable[str]) -> set[Grant]:
    operations = tuple(operations)
    return {g for name in names for g in _on(part, Resource.topic, name, operations)}


def gateway(platform: Platform, cluster_name: str) -> set[Grant]:
    """Writes the topics its producers declare (and reads their max.message.bytes), on every
    writable cluster (its own and those it fails over to)."""
    if platform.cluster(cluster_name).role != ClusterRole.writable:
        return set()
    produced = {name for name, topic in platform.topics_on(cluster_name).items() if topic.producers}
    return _topics(Part.gateway, produced, (*PRODUCE, "DESCRIBE_CONFIGS"))


def replicator(platform: Platform, cluster_name: str) -> set[Grant]:
    """Reads its routes' topics at the source; at the destination writes them transactionally,
    creates and grows them, keeps their configs in step, and keeps its positions in its route topic."""
    part = Part.replicator
    grants: set[Grant] = set()
    for name, route in platform.routes.items():
        copied_operations = ((*CONSUME, "DESCRIBE_CONFIGS") if route.source == cluster_name
                             else (*PRODUCE, *TOPIC_ADMIN) if route.destination == cluster_name else ())
        if not copied_operations:
            continue
        if route.pattern is not None:  # a pattern selects topics nobody has named yet
            grants |= _on(part, Resource.topic, ANY, copied_operations)
        grants |= _topics(part, platform.route_topics(name), copied_operations)
        if route.source == cluster_name:
            grants |= _on(part, Resource.group, plan.group_id(name), ("READ",), Pattern.prefixed)
            grants |= _on(part, Resource.group, feed_group("replicate", name), ("READ",))
        if route.destination == cluster_name:
            grants |= _topics(part, [plan.route_topic(name)], (*CONSUME, *PRODUCE, *TOPIC_ADMIN))
            grants |= _on(part, Resource.group, plan.group_id(name), ("READ", "DESCRIBE"),
                          Pattern.prefixed)
            grants |= _on(part, Resource.transactional_id, plan.transactional_prefix(name),
                          ("WRITE", "DESCRIBE"), Pattern.prefixed)
    return grants


def dispatcher(platform: Platform, cluster_name: str, dispatch_cluster: str | None) -> set[Grant]:
    """Reads the topics its consumers declare, in their groups (``<service>`` or ``<service>.<name>``,
    classic or share), tracks its nodes in presence groups, writes dead letters, and with the share
    backend publishes its positions to the feed (``conveyor.dispatch.<group>``)."""
    if cluster_name != dispatch_cluster:
        return set()
    part = Part.dispatcher
    grants = _on(part, Resource.group, DISPATCH_NODES_GROUP_PREFIX, ("READ", "DESCRIBE"), Pattern.prefixed)
    template = platform.dispatch.dead_letter_topic
    # The share backend sets its share group's configs (share.auto.offset.reset...) before reading.
    group_operations = ("READ", "DESCRIBE", *(("ALTER_CONFIGS", "DESCRIBE_CONFIGS")
                                              if platform.dispatch.backend == "share" else ()))
    for topic_name, topic in platform.topics_on(cluster_name).items():
        for service in topic.consumers:
            grants |= _topics(part, [topic_name], CONSUME)
            grants |= _on(part, Resource.group, service, group_operations)
            grants |= _on(part, Resource.group, f"{service}.", group_operations, Pattern.prefixed)
            # Every dead-letter topic of the service's groups starts like this (groups start with it).
            prefix = template[:template.index("{group}") + len("{group}")].format(topic=topic_name, group=service)
            grants |= _on(part, Resource.topic, prefix, (*PRODUCE, "CREATE"), Pattern.prefixed)
    if platform.dispatch.backend == "share":
        # The share group's position goes to the feed's monitoring group of each of its groups.
        grants |= _on(part, Resource.group, feed_group("dispatch", ""), ("READ",), Pattern.prefixed)
    return grants


def lake(platform: Platform, cluster_name: str, source: str | None) -> set[Grant]:
    """Reads the topics it lands (pipeline.lake.topics, or those naming the ``lake`` service) and
    publishes its positions to their monitoring groups; the audit reads the same topics on every
    writable cluster, where the gateways accepted them (conveyor.pipeline.accepted). On every
    cluster holding one, it reads the ACLs (DESCRIBE on the cluster) to learn whether only the bus
    writes it (conveyor.pipeline.trust)."""
    on_cluster = platform.topics_on(cluster_name)
    landed = (set(platform.pipeline.lake.topics or ()) | {n for n, t in on_cluster.items() if "lake" in t.consumers}
              ) & set(on_cluster)
    if not landed:
        return set()
    grants = _on(Part.lake, Resource.cluster, CLUSTER, ("DESCRIBE",))
    if cluster_name != source and platform.cluster(cluster_name).role != ClusterRole.writable:
        return grants
    grants |= _topics(Part.lake, landed, CONSUME)
    if cluster_name == source:
        for topic in landed:
            grants |= _on(Part.lake, Resource.group, feed_group("lake", topic), ("READ",))
    return grants


def realtime(platform: Platform, cluster_name: str, source: str | None) -> set[Grant]:
    """Reads its views' topics, writes (and creates) its rejects topic, publishes its positions."""
    if cluster_name != source or not platform.pipeline.realtime.views:
        return set()
    config = platform.pipeline.realtime
    grants = _topics(Part.realtime, {view.topic for view in config.views.values()}, CONSUME)
    grants |= _topics(Part.realtime, [config.rejects_topic], (*PRODUCE, "CREATE"))
    return grants | _on(Part.realtime, Resource.group, feed_group("realtime", ""), ("READ",), Pattern.prefixed)


def ops(cluster_name: str) -> set[Grant]:
    """Describes every topic, group and broker it watches, reads the replicators' route topics for
    their gaps and __consumer_offsets for a rewound group's commits, keeps its rewind evidence in a
    topic of its own, and sets the throttle's client quotas (ALTER_CONFIGS on the cluster)."""
    part = Part.ops
    return (_on(part, Resource.topic, ANY, ("DESCRIBE", "DESCRIBE_CONFIGS"))
            | _on(part, Resource.topic, ROUTE_TOPIC_PREFIX, ("READ",), Pattern.prefixed)
            # A group's commit records, kept as a rewind's evidence (conveyor.ops.commit_log).
            | _on(part, Resource.topic, OFFSETS_TOPIC, ("READ",))
            # Its own rewind evidence, kept in the cluster across restarts (conveyor.ops.rewind_store).
            | _on(part, Resource.topic, REWINDS_TOPIC, ("READ", "WRITE", "DESCRIBE", "CREATE"))
            | _on(part, Resource.group, ANY, ("DESCRIBE",))
            | _on(part, Resource.cluster, CLUSTER, ("DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS")))


def _read_cluster(platform: Platform, chosen: str | None, setting: str) -> str | None:
    try:
        return platform.read_cluster(chosen, setting)
    except ConfigError:  # no pipeline or dispatcher can run: they get nothing
        return None


def registry(platform: Platform, cluster_name: str, registry_cluster: str | None) -> set[Grant]:
    """The contract registry's topic: the gateways register versions in it (one transaction at a
    time under one transactional id, conveyor.bus.registry); every part that checks, copies or reads
    events follows it."""
    if cluster_name != registry_cluster:
        return set()
    topic = platform.contracts.topic
    grants = _topics(Part.gateway, [topic], (*CONSUME, *PRODUCE))
    grants |= _on(Part.gateway, Resource.transactional_id, REGISTRY_TRANSACTIONAL_ID, ("WRITE", "DESCRIBE"))
    for part in Part:
        if part is not Part.gateway:
            grants |= _topics(part, [topic], CONSUME)
        # A follower reads by assignment and commits nothing, but a consumer with a group (librdkafka
        # wants one) still looks its coordinator up.
        grants |= _on(part, Resource.group, REGISTRY_GROUP_PREFIX, ("READ",), Pattern.prefixed)
    return grants


def part_grants(platform: Platform, cluster_name: str) -> set[Grant]:
    """Every part's grants on ``cluster_name``."""
    source = _read_cluster(platform, None, "pipeline.source")
    dispatch_cluster = _read_cluster(platform, platform.dispatch.cluster, "dispatch.cluster")
    registry_cluster = _read_cluster(platform, platform.contracts.cluster, "contracts.cluster")
    return (gateway(platform, cluster_name) | replicator(platform, cluster_name)
            | dispatcher(platform, cluster_name, dispatch_cluster) | lake(platform, cluster_name, source)
            | realtime(platform, cluster_name, source) | ops(cluster_name)
            | registry(platform, cluster_name, registry_cluster))


def wanted(platform: Platform, cluster_name: str) -> tuple[set[Grant], set[str]]:
    """(the ALLOW bindings, the SCRAM users) platform.yaml asks for on ``cluster_name``: its
    services' and Conveyor's parts'."""
    parts = part_grants(platform, cluster_name)
    return wanted_grants(platform, cluster_name) | parts, wanted_users(platform, cluster_name) | {
        g.principal.removeprefix("User:") for g in parts}
