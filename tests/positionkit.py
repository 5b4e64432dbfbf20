"""What a reader's monitoring-only group (conveyor.positions) holds, against what the topic holds."""

from __future__ import annotations

from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from conveyor import kafka
from conveyor.config import Platform
from conveyor.positions import kept_in

Offsets = dict[tuple[str, int], int]


def monitored(platform: Platform, cluster: str, group: str,
              topics: set[str] | None = None) -> tuple[Offsets, set[str | None]]:
    """The group's committed offsets (of ``topics`` only, when given: a route's group also holds
    the topics earlier tests copied), and where their metadata says the real position lives."""
    committed = [tp for tp in kafka.committed(platform, cluster, group)
                 if tp.offset >= 0 and (topics is None or tp.topic in topics)]
    return {(tp.topic, tp.partition): tp.offset for tp in committed}, {kept_in(tp.metadata) for tp in committed}


def end_offsets(platform: Platform, cluster: str, topic: str) -> Offsets:
    admin = kafka.admin(platform, cluster)
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    return {(tp.topic, tp.partition): f.result().offset for tp, f in admin.list_offsets(asked).items()}
