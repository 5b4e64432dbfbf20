"""The balance planner's model of a live cluster: metadata from Kafka, load from the JMX exporters.

- brokers and racks: ``describe_cluster`` (only live brokers answer; replicas on any other broker
  id are on a dead broker, which the planner moves away);
- replicas, leaders and in-sync replicas: topic metadata;
- broker tags: platform.yaml (``clusters.<name>.tags``); isolation: the topics' ``isolation`` tag,
  where this cluster carries that tag;
- load per partition: two scrapes of every broker's exporter ``sample_seconds`` apart
  (``conveyor.ops.balance.loads`` says how per-topic rates become per-partition loads). Without
  reachable exporters the loads are zero and the plan balances replica and leader counts only;
  the reason is kept in ``notes``.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from conveyor import kafka
from conveyor.config import Platform
from conveyor.ops.balance.errors import BalanceError
from conveyor.ops.balance.loads import PartitionLoad, counters_from_samples, partition_loads
from conveyor.ops.balance.model import NO_LEADER, Broker, ClusterModel, Partition
from conveyor.ops.health import MetricSample
from conveyor.ops.broker_readings import Target, metrics_targets
from conveyor.ops.scrape import Family, Scraper

TopicPartition = tuple[str, int]
#: A scraped page: its metric families, or why it could not be read.
Page = tuple[Family, ...] | str


class ClusterUnreachableError(BalanceError):
    def __init__(self, cluster: str, what: str) -> None:
        self.cluster = cluster
        super().__init__(f"cluster {cluster} did not answer ({what}); is it running? (`conveyor status`)")


@dataclass(frozen=True)
class PartitionMetadata:
    replicas: tuple[int, ...]
    #: None: no leader (offline).
    leader: int | None
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Metadata:
    #: Live brokers: id -> rack.
    brokers: Mapping[int, str | None]
    partitions: Mapping[TopicPartition, PartitionMetadata]

    def assignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        return {tp: meta.replicas for tp, meta in self.partitions.items()}


@dataclass(frozen=True)
class LiveCluster:
    cluster: str
    model: ClusterModel
    metadata: Metadata
    #: What limits the model (unreachable exporters, no loads measured).
    notes: tuple[str, ...] = ()

    def assignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        """Replica lists of the partitions in the model."""
        return {(p.topic, p.partition): p.replicas for p in self.model.partitions}


def read_metadata(platform: Platform, cluster: str, admin: AdminClient | None = None,
                  topics: Collection[str] | None = None, timeout: float = 15.0) -> Metadata:
    """Live brokers and the partitions of ``topics`` (default: every topic)."""
    admin = admin or kafka.admin(platform, cluster)
    try:
        description = admin.describe_cluster(request_timeout=timeout).result()
        listing = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise ClusterUnreachableError(cluster, str(exc.args[0] if exc.args else exc)) from None
    partitions = {
        (name, number): PartitionMetadata(tuple(meta.replicas), meta.leader if meta.leader != NO_LEADER else None,
                                          tuple(meta.isrs))
        for name, topic in listing.topics.items() if topic.error is None and (topics is None or name in topics)
        for number, meta in topic.partitions.items()
    }
    return Metadata({node.id: node.rack for node in description.nodes}, partitions)


def scrape_twice(platform: Platform, cluster: str, seconds: float
                 ) -> tuple[list[Target], list[Page], list[Page], float]:
    """Every broker exporter of ``cluster`` scraped twice, ``seconds`` apart: (targets, first
    pages, second pages, the seconds that really passed). A page is its families, or why it failed."""
    targets = [t for t in metrics_targets(platform, cluster) if t.broker is not False]
    if not targets:
        return [], [], [], 0.0
    scraper = Scraper(timeout=10.0)  # a busy broker's page with every partition's size can be slow
    try:
        first = scraper.pages([t.url for t in targets])
        started = time.monotonic()
        time.sleep(seconds)
        second = scraper.pages([t.url for t in targets])
        return targets, first, second, time.monotonic() - started
    finally:
        scraper.close()


def samples(page: Page) -> list[MetricSample]:
    return [] if isinstance(page, str) else [s for family in page for s in family.samples]


def measure_loads(platform: Platform, cluster: str, leaders: Mapping[TopicPartition, int | None],
                  sample_seconds: float) -> tuple[dict[TopicPartition, PartitionLoad], list[str]]:
    """Per-partition load from two scrapes of the cluster's brokers, and notes on what was missing."""
    targets, first, second, seconds = scrape_twice(platform, cluster, sample_seconds)
    if not targets:
        return {}, [f"no metrics URLs for cluster {cluster} (clusters.{cluster}.metrics): loads not measured, "
                    "only replica and leader counts are balanced"]
    notes, pairs = [], []
    for target, before, after in zip(targets, first, second):
        if isinstance(after, str):
            notes.append(f"{target.node}: metrics not read ({after}): its partitions count as idle and empty")
            continue
        if isinstance(before, str):
            notes.append(f"{target.node}: first scrape failed ({before}): its traffic counts as none")
        earlier = None if isinstance(before, str) else counters_from_samples(target.broker_id, samples(before))
        pairs.append((earlier, counters_from_samples(target.broker_id, samples(after))))
    return partition_loads(leaders, pairs, seconds), notes


def isolation_of(platform: Platform, cluster: str) -> dict[str, str]:
    """Topic -> isolation tag, for the topics whose tag this cluster's brokers carry."""
    tags = platform.cluster(cluster).tags
    return {name: t.isolation for name, t in platform.topics_on(cluster).items() if t.isolation in tags}


def build_model(metadata: Metadata, platform: Platform, cluster: str,
                loads: Mapping[TopicPartition, PartitionLoad]) -> ClusterModel:
    spec = platform.cluster(cluster)
    # Tags are declared for broker ids 1..N; a broker beyond them (just added) carries none.
    brokers = [Broker(b, rack, frozenset(spec.tags_of(b))) for b, rack in sorted(metadata.brokers.items())]
    none = PartitionLoad()
    partitions = [
        Partition(topic, number, meta.replicas, NO_LEADER if meta.leader is None else meta.leader,
                  loads.get((topic, number), none).bytes_in, loads.get((topic, number), none).bytes_out,
                  loads.get((topic, number), none).size)
        for (topic, number), meta in sorted(metadata.partitions.items()) if meta.replicas
    ]
    return ClusterModel(tuple(brokers), tuple(partitions), isolation_of(platform, cluster))


def live_cluster(platform: Platform, cluster: str, topics: Collection[str] | None = None,
                 sample_seconds: float = 5.0, include_internal: bool = True) -> LiveCluster:
    """Read ``cluster`` and measure its load: the planner's input."""
    admin = kafka.admin(platform, cluster)
    metadata = read_metadata(platform, cluster, admin, topics)
    if not include_internal:
        metadata = Metadata(metadata.brokers, {tp: m for tp, m in metadata.partitions.items()
                                               if not tp[0].startswith("__")})
    if not metadata.partitions:
        raise BalanceError(f"cluster {cluster} has no partitions to balance"
                           + (f" among topics {sorted(topics)}" if topics else ""))
    leaders = {tp: meta.leader for tp, meta in metadata.partitions.items()}
    loads, notes = measure_loads(platform, cluster, leaders, sample_seconds) if sample_seconds > 0 else (
        {}, ["loads not measured (--sample-seconds 0): only replica and leader counts are balanced"])
    return LiveCluster(cluster, build_model(metadata, platform, cluster, loads), metadata, tuple(notes))
