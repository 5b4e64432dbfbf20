"""What ``conveyor replicate status`` shows of a route, read from Kafka alone: the group's workers,
per source topic what waits to be copied, the gaps recorded in the route topic (which outlive every
worker), and the source configs undeclared copies do not have."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import TopicPartition

from conveyor import kafka
from conveyor.config import Platform
from conveyor.replicate import plan
from conveyor.replicate.bookkeeping import BucketRecords, read_bucket
from conveyor.replicate.destination import config_differences
from conveyor.replicate.plan import Gap, SourcePartition
from conveyor.replicate.topic_configs import ConfigDifference


@dataclass(frozen=True)
class TopicProgress:
    topic: str
    #: exactly-once or at-least-once, as the topic's delivery (or the route's mode) says.
    mode: str
    partitions: int
    #: Records the source holds now (end minus earliest offset, summed over partitions).
    source_records: int
    #: Offsets the route is past: copied, or lost in a gap.
    copied: int
    waiting: int
    #: Offsets lost in recorded gaps.
    lost: int


@dataclass(frozen=True)
class RouteStatus:
    route: str
    source: str
    destination: str
    mode: str
    buckets: int
    workers: tuple[str, ...]
    topics: tuple[TopicProgress, ...]
    gaps: tuple[Gap, ...]
    differences: tuple[ConfigDifference, ...]


def route_records(platform: Platform, name: str) -> BucketRecords:
    """Every bucket's committed offsets and gaps, merged; empty before the route's first worker."""
    spec = platform.routes[name]
    stored: dict[SourcePartition, int] = {}
    gaps: list[Gap] = []
    if plan.route_topic(name) in kafka.admin(platform, spec.destination).list_topics(timeout=10).topics:
        for bucket in range(spec.buckets):
            records = read_bucket(platform, name, spec.destination, "status", bucket)
            stored.update(records.offsets)
            gaps += records.gaps
    return BucketRecords(stored, tuple(sorted(gaps, key=lambda g: (g.topic, g.partition, g.first))))


def route_gaps(platform: Platform, name: str) -> tuple[Gap, ...]:
    return route_records(platform, name).gaps


def route_status(platform: Platform, name: str) -> RouteStatus:
    spec = platform.routes[name]
    destination = kafka.admin(platform, spec.destination)
    group = kafka.describe_groups(destination, [plan.group_id(name)])[plan.group_id(name)]
    records = route_records(platform, name)
    stored, gaps = records.offsets, records.gaps
    source = kafka.consumer(platform, spec.source, "conveyor-replicate-status", "status")
    try:
        metadata = source.list_topics(timeout=10)
        topics = []
        for topic in sorted(t for t in metadata.topics if platform.copies(name, t)):
            ends = total = copied = 0
            for partition in metadata.topics[topic].partitions:
                low, high = source.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                ends += high
                total += high - low
                copied += stored.get(SourcePartition(topic, partition), low)
            lost = sum(g.count for g in gaps if g.topic == topic)
            topics.append(TopicProgress(topic, platform.copy_mode(name, topic).value,
                                        len(metadata.topics[topic].partitions), total, copied, ends - copied, lost))
    finally:
        source.close()
    differences = config_differences(platform, spec, [t.topic for t in topics], kafka.admin(platform, spec.source),
                                     destination)
    return RouteStatus(name, spec.source, spec.destination, spec.mode.value, spec.buckets,
                       tuple(sorted(m.client_id for m in group.members)), tuple(topics),
                       gaps,
                       tuple(d for found in differences.values() for d in found))
