"""Checks of the references between sections, one function per section; pydantic has checked
each section's own shape before these run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from conveyor.config.clusters import ClusterRole, Purpose
from conveyor.config.contract_files import ContractFileError, read_contract
from conveyor.config.platform import Platform
from conveyor.config.problems import Problem
from conveyor.config.topics import CleanupPolicy, Delivery, ReplicationMode


def cross_checks(platform: Platform) -> Iterator[Problem]:
    yield from _cluster_problems(platform)
    yield from _topic_problems(platform)
    yield from _route_problems(platform)
    yield from _pipeline_problems(platform)
    yield from _realtime_problems(platform)
    yield from _registry_problems(platform)


def _unknown(path: str, section: str, kind: str, name: str) -> Problem:
    return Problem(path, f"names unknown {kind} {name!r}", refers_to=(f"{section}.{name}",))


#: What a cluster given by bootstrap may say about itself, and `conveyor up` says of the ones it starts.
_SET_BY_UP = ("client", "credentials", "users", "metrics", "disks")


def _cluster_problems(platform: Platform) -> Iterator[Problem]:
    for name, cluster in platform.clusters.items():
        if cluster.bootstrap is None:
            for setting in _SET_BY_UP:
                if getattr(cluster, setting):
                    yield Problem(f"clusters.{name}.{setting}", "only applies to a cluster given by bootstrap; "
                                                                "`conveyor up` sets it for the clusters it starts")
        if cluster.failover and cluster.purpose is Purpose.logs:
            yield Problem(f"clusters.{name}.failover", "a logs cluster never fails over: the gateway sheds what it "
                                                       "does not acknowledge within gateway.logs_wait")
        for other in cluster.failover:
            target = platform.clusters.get(other)
            if target is None:
                yield _unknown(f"clusters.{name}.failover", "clusters", "cluster", other)
            elif target.role != ClusterRole.writable or other == name:
                yield Problem(f"clusters.{name}.failover", f"cluster {other!r} is not another writable cluster",
                              refers_to=(f"clusters.{other}",))
        factor = cluster.default_replication_factor
        if factor > cluster.brokers:
            yield Problem(f"clusters.{name}.replication.factor",
                          f"is {factor} but the cluster has {cluster.brokers} broker(s)")
        if cluster.default_min_insync > factor:
            yield Problem(f"clusters.{name}.replication.min_insync",
                          f"is {cluster.default_min_insync}, above the replication factor {factor}")


def _topic_problems(platform: Platform) -> Iterator[Problem]:
    for name, topic in platform.topics.items():
        where = f"topics.{name}"
        for cluster_name in topic.clusters or []:
            if cluster_name not in platform.clusters:
                yield _unknown(f"{where}.clusters", "clusters", "cluster", cluster_name)
        for cluster_name, cluster in platform.clusters.items():
            if name not in platform.topics_on(cluster_name):
                continue
            on = (f"clusters.{cluster_name}",)
            factor, min_insync = topic.replication_on(cluster)
            if factor > cluster.brokers:
                yield Problem(f"{where}.replication_factor",
                              f"is {factor} but cluster {cluster_name!r} has {cluster.brokers} broker(s)", on)
            if min_insync > factor:
                yield Problem(f"{where}.min_insync_replicas",
                              f"is {min_insync}, above the replication factor {factor} on cluster {cluster_name!r}",
                              on)
            if topic.isolation and topic.isolation in cluster.tags:
                tagged = len(cluster.tags[topic.isolation])
                if tagged < factor:
                    yield Problem(f"{where}.isolation",
                                  f"tag {topic.isolation!r} is on {tagged} broker(s) of cluster {cluster_name!r}, "
                                  f"fewer than the replication factor {factor}", on)
        if topic.isolation and not any(topic.isolation in c.tags for c in platform.clusters.values()):
            yield Problem(f"{where}.isolation", f"no cluster has brokers tagged {topic.isolation!r}")
        for role in ("producers", "direct_producers", "consumers"):
            for service in getattr(topic, role):
                if service not in platform.services:
                    yield _unknown(f"{where}.{role}", "services", "service", service)
        if topic.requested_by is not None and topic.requested_by not in platform.services:
            yield _unknown(f"{where}.requested_by", "services", "service", topic.requested_by)
        if topic.contract is not None and not platform.resolve(topic.contract).is_file():
            yield Problem(f"{where}.contract", f"file {topic.contract} does not exist")


    for service in platform.topic_requests.allowed:
        if service not in platform.services:
            yield _unknown("topic_requests.allowed", "services", "service", service)


def _route_problems(platform: Platform) -> Iterator[Problem]:
    for name, route in platform.routes.items():
        for end in ("source", "destination"):
            cluster_name = getattr(route, end)
            if cluster_name not in platform.clusters:
                yield _unknown(f"routes.{name}.{end}", "clusters", "cluster", cluster_name)
        if route.source == route.destination:
            yield Problem(f"routes.{name}", "source and destination are the same cluster")
        source = platform.clusters.get(route.source)
        if source is not None and source.role != ClusterRole.writable:
            yield Problem(f"routes.{name}.source", f"cluster {route.source!r} is not writable",
                          refers_to=(f"clusters.{route.source}",))
        for topic in route.topics:
            if topic not in platform.topics:
                yield _unknown(f"routes.{name}.topics", "topics", "topic", topic)
        destination = platform.clusters.get(route.destination)
        if destination is None or destination.purpose is not Purpose.logs:
            continue
        # A logs cluster takes acks=1 writes without transactions: nothing exact can land there.
        if route.mode is ReplicationMode.exactly_once:
            yield Problem(f"routes.{name}.mode", f"cluster {route.destination!r} serves logs (acks=1, no "
                          "transactions): copy the topics it does not declare with mode at-least-once",
                          refers_to=(f"clusters.{route.destination}",))
        exact = sorted(t for t in route.topics
                       if t in platform.topics and platform.topics[t].delivery is Delivery.exact)
        if exact:
            yield Problem(f"routes.{name}.topics", f"cluster {route.destination!r} serves logs (acks=1, no "
                          f"transactions), but {', '.join(exact)} promise(s) exact delivery: set their delivery to "
                          "at_least_once, or copy them into another cluster",
                          refers_to=tuple(f"topics.{t}" for t in exact))


def _pipeline_problems(platform: Platform) -> Iterator[Problem]:
    source = platform.pipeline.source
    if source is not None and source not in platform.clusters:
        yield _unknown("pipeline.source", "clusters", "cluster", source)
    catalog = platform.pipeline.catalog
    if catalog.type == "jdbc" and catalog.uri is None and platform.runtime.postgres is None:
        yield Problem("pipeline.catalog.uri", "a jdbc catalog needs a uri, or runtime.postgres to run one locally",
                      refers_to=("runtime.postgres",))
    for topic in platform.pipeline.lake.topics or []:
        if topic not in platform.topics:
            yield _unknown("pipeline.lake.topics", "topics", "topic", topic)
        elif platform.topics[topic].contract is None:
            yield Problem("pipeline.lake.topics", f"topic {topic!r} has no contract (the lake's columns come from it)",
                          refers_to=(f"topics.{topic}",))
    for topic in platform.pipeline.lake.keep_raw_value:
        if topic not in platform.topics:
            yield _unknown("pipeline.lake.keep_raw_value", "topics", "topic", topic)


def _contract_properties(platform: Platform, topic: str) -> dict[str, Any] | None:
    try:
        schema = read_contract(platform, topic)
    except ContractFileError:
        return None  # reported by the topic's own contract check
    return schema.get("properties") or {}


def _realtime_problems(platform: Platform) -> Iterator[Problem]:
    for name, view in platform.pipeline.realtime.views.items():
        where = f"pipeline.realtime.views.{name}"
        if view.topic not in platform.topics:
            yield _unknown(f"{where}.topic", "topics", "topic", view.topic)
            continue
        on = (f"topics.{view.topic}",)
        if platform.topics[view.topic].contract is None:
            yield Problem(f"{where}.topic", f"topic {view.topic!r} has no contract (views parse events with it)", on)
            continue
        properties = _contract_properties(platform, view.topic)
        if properties is None:
            continue
        for field, used_in, gap in view.contract_gaps(properties):
            yield Problem(f"{where}.{used_in}", f"field {field!r} {gap}", on)


def _registry_problems(platform: Platform) -> Iterator[Problem]:
    """The contract registry's topic, where declared: one partition (one order of registrations),
    compacted and kept forever (every version stays readable), on the registry's cluster."""
    name = platform.contracts.topic
    topic = platform.topics.get(name)
    if topic is None:
        return
    where = f"topics.{name}"
    if topic.partitions != 1:
        yield Problem(f"{where}.partitions", "the contract registry's topic takes one partition: registrations "
                                             "are ordered by it")
    if topic.cleanup_policy is not CleanupPolicy.compact or topic.retention != -1:
        yield Problem(where, "the contract registry's topic is compacted and kept forever "
                             "(cleanup_policy: compact, retention: -1): every version must stay readable")
    chosen = platform.contracts.cluster
    if chosen is not None and chosen not in platform.clusters:
        yield _unknown("contracts.cluster", "clusters", "cluster", chosen)
    elif chosen is not None and topic.clusters is not None and chosen not in topic.clusters:
        yield Problem(f"{where}.clusters", f"must include {chosen}, the cluster contracts.cluster names",
                      refers_to=("contracts.cluster",))
