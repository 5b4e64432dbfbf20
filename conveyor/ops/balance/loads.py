"""Load per partition from what Prometheus holds of every broker's JMX exporter. Pure: no HTTP, no clock.

What the brokers report, and the approximation built on it:

- ``kafka_log_log_size{topic,partition}``: bytes on disk of each replica a broker holds. A
  partition's size is the largest of its replicas (what a new replica has to copy).
- ``kafka_server_brokertopicmetrics_bytesinpersec_total{topic}`` and ``..._bytesoutpersec_total{topic}``:
  bytes produced to, and fetched by consumers from, the partitions of a topic that this broker
  leads (replication traffic is counted apart, in the Replication* meters). Kafka has no
  per-partition rate, so a broker's rate for a topic is **split evenly across the partitions of
  that topic it leads**; if it leads none of them (leadership moved during the window) the rate
  is split across all the topic's partitions. Skew between partitions of one topic on one broker
  (a hot key) is therefore invisible; skew between brokers and between topics is not.
- Rates are Prometheus's ``rate()`` of those counters over the planner's window
  (conveyor.ops.broker_readings.node_values), which takes a broker's restart for no drop.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from conveyor.ops.prometheus import Sample

SIZE = "kafka_log_log_size"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesinpersec_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesoutpersec_total"


@dataclass(frozen=True)
class BrokerLoad:
    """One broker's traffic (bytes/s per topic it leads partitions of) and replica sizes (bytes)."""

    node: str
    #: None when the node's broker id is not known (a metrics page declared without it).
    broker: int | None
    bytes_in: Mapping[str, float] = field(default_factory=dict)
    bytes_out: Mapping[str, float] = field(default_factory=dict)
    sizes: Mapping[tuple[str, int], float] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionLoad:
    bytes_in: float = 0.0
    bytes_out: float = 0.0
    size: int = 0


def _by_node(samples: Sequence[Sample], key: str) -> dict[str, dict[str, float]]:
    """node -> {label ``key``'s value: value} of ``samples``, those without either label or a value left out."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for sample in samples:
        node, value = sample.labels.get("node"), sample.labels.get(key)
        if node is not None and value is not None and sample.value is not None:
            out[node][value] = sample.value
    return out


def broker_loads(brokers: Mapping[str, int | None], rates_in: Sequence[Sample], rates_out: Sequence[Sample],
                 sizes: Sequence[Sample]) -> list[BrokerLoad]:
    """Per node of ``brokers`` ({node: broker id}) that Prometheus has figures of, its load: from
    the per-topic rates of the byte counters and the latest replica sizes, each labelled ``node``."""
    ins, outs = _by_node(rates_in, "topic"), _by_node(rates_out, "topic")
    replicas: dict[str, dict[tuple[str, int], float]] = defaultdict(dict)
    for sample in sizes:
        node, topic, partition = (sample.labels.get(k) for k in ("node", "topic", "partition"))
        if node is not None and topic is not None and partition is not None and sample.value is not None:
            replicas[node][(topic, int(partition))] = sample.value
    return [BrokerLoad(node, broker, ins.get(node, {}), outs.get(node, {}), replicas.get(node, {}))
            for node, broker in brokers.items() if node in ins or node in outs or node in replicas]


def partition_loads(leaders: Mapping[tuple[str, int], int | None],
                    brokers: Sequence[BrokerLoad]) -> dict[tuple[str, int], PartitionLoad]:
    """Per partition of ``leaders`` ({(topic, partition): leading broker or None}), its load.

    A broker whose id is unknown spreads its rates over all the topic's partitions.
    """
    partitions_of: dict[str, list[tuple[str, int]]] = defaultdict(list)
    led: dict[tuple[int, str], list[tuple[str, int]]] = defaultdict(list)
    for tp, leader in leaders.items():
        partitions_of[tp[0]].append(tp)
        if leader is not None:
            led[(leader, tp[0])].append(tp)
    rates_in: dict[tuple[str, int], float] = defaultdict(float)
    rates_out: dict[tuple[str, int], float] = defaultdict(float)
    sizes: dict[tuple[str, int], float] = {}
    for load in brokers:
        for rates, per_topic in ((rates_in, load.bytes_in), (rates_out, load.bytes_out)):
            for topic, rate in per_topic.items():
                targets = (led.get((load.broker, topic)) if load.broker is not None else None) \
                    or partitions_of.get(topic, [])
                for tp in targets:
                    rates[tp] += rate / len(targets)
        for tp, size in load.sizes.items():
            sizes[tp] = max(sizes.get(tp, 0.0), size)
    return {tp: PartitionLoad(rates_in.get(tp, 0.0), rates_out.get(tp, 0.0), int(sizes.get(tp, 0.0)))
            for tp in leaders}
