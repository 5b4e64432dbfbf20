"""The balance planner's model of a live cluster: metadata from Kafka, load from the JMX exporters.

- brokers and racks: ``describe_cluster`` (only live brokers answer; replicas on any other broker
  id are on a dead broker, which the planner moves away);
- replicas, leaders and in-sync replicas: topic metadata;
- broker tags: platform.yaml (``clusters.<name>.tags``); isolation: the topics' ``isolation`` tag,
  where this cluster carries that tag;
- load per partition: what the Prometheus that scrapes the brokers' exporters holds (their byte
  rates over a window and their replicas' sizes; ``conveyor.ops.balance.loads`` says how per-topic
  rates become per-partition loads). Without a Prometheus, or without its figures of a broker, the
  loads are zero and the plan balances replica and leader counts only; the reason is kept in
  ``notes``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from conveyor import kafka
from conveyor.config import Platform
from conveyor.ops.balance.errors import BalanceError
from conveyor.ops.balance.loads import BYTES_IN, BYTES_OUT, SIZE, PartitionLoad, broker_loads, partition_loads
from conveyor.ops.balance.model import NO_LEADER, Broker, ClusterModel, Partition
from conveyor.ops.broker_readings import metrics_targets, node_values
from conveyor.ops.prometheus import NO_PROMETHEUS, PrometheusClient, QueryError, connect

TopicPartition = tuple[str, int]
COUNTS_ONLY = "only replica and leader counts are balanced"


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


def measure_loads(prometheus: PrometheusClient, platform: Platform, cluster: str,
                  leaders: Mapping[TopicPartition, int | None], window_seconds: float
                  ) -> tuple[dict[TopicPartition, PartitionLoad], list[str]]:
    """Per-partition load from the brokers' byte rates over ``window_seconds`` and their replicas'
    sizes as ``prometheus`` holds them, and notes on what was missing."""
    brokers = {t.node: t.broker_id for t in metrics_targets(platform, cluster) if t.broker is not False}
    try:
        rates_in, rates_out = (node_values(prometheus, cluster, name, window_seconds) for name in (BYTES_IN, BYTES_OUT))
        sizes = node_values(prometheus, cluster, SIZE)
    except QueryError as err:
        return {}, [f"loads not measured ({err}): {COUNTS_ONLY}"]
    loads = broker_loads(brokers, rates_in, rates_out, sizes)
    seen = {load.node for load in loads}
    notes = [f"{node}: Prometheus holds no figures of it: its partitions count as idle and empty"
             for node in brokers if node not in seen]
    if not rates_in and sizes:
        notes.append(f"no byte rates over the last {window_seconds:g} s (Prometheus needs two scrapes in the "
                     "window): traffic counts as none, sizes still count")
    return partition_loads(leaders, loads), notes


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
                 window_seconds: float = 300.0, include_internal: bool = True) -> LiveCluster:
    """Read ``cluster`` and its load over the last ``window_seconds`` (0: none): the planner's input."""
    admin = kafka.admin(platform, cluster)
    metadata = read_metadata(platform, cluster, admin, topics)
    if not include_internal:
        metadata = Metadata(metadata.brokers, {tp: m for tp, m in metadata.partitions.items()
                                               if not tp[0].startswith("__")})
    if not metadata.partitions:
        raise BalanceError(f"cluster {cluster} has no partitions to balance"
                           + (f" among topics {sorted(topics)}" if topics else ""))
    leaders = {tp: meta.leader for tp, meta in metadata.partitions.items()}
    loads, notes = _loads(platform, cluster, leaders, window_seconds)
    return LiveCluster(cluster, build_model(metadata, platform, cluster, loads), metadata, tuple(notes))


def _loads(platform: Platform, cluster: str, leaders: Mapping[TopicPartition, int | None],
           window_seconds: float) -> tuple[dict[TopicPartition, PartitionLoad], list[str]]:
    if window_seconds <= 0:
        return {}, [f"loads not measured (--window 0): {COUNTS_ONLY}"]
    prometheus = connect(platform, timeout=15.0)  # a range over every partition of a large cluster can be slow
    if prometheus is None:
        return {}, [f"loads not measured ({NO_PROMETHEUS}): {COUNTS_ONLY}"]
    try:
        return measure_loads(prometheus, platform, cluster, leaders, window_seconds)
    finally:
        prometheus.close()
