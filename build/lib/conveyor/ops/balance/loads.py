"""Load per partition from two scrapes of every broker's JMX exporter. Pure: no HTTP, no clock.

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
- Rates are counter increases between the two scrapes divided by the seconds between them; a
  counter that went down (the broker restarted) counts as no traffic for that window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from conveyor.ops.health import MetricSample

SIZE = "kafka_log_log_size"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesinpersec_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesoutpersec_total"


@dataclass(frozen=True)
class BrokerCounters:
    """One scrape of one broker: per-topic byte counters and per-replica sizes."""

    #: None when the exporter's broker is not known (a metrics page without its broker id).
    broker: int | None
    bytes_in: Mapping[str, float] = field(default_factory=dict)
    bytes_out: Mapping[str, float] = field(default_factory=dict)
    sizes: Mapping[tuple[str, int], float] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionLoad:
    bytes_in: float = 0.0
    bytes_out: float = 0.0
    size: int = 0


def counters_from_samples(broker: int | None, samples: Iterable[MetricSample]) -> BrokerCounters:
    bytes_in: dict[str, float] = {}
    bytes_out: dict[str, float] = {}
    sizes: dict[tuple[str, int], float] = {}
    for name, labels, value in samples:
        topic = labels.get("topic")
        if topic is None or value != value:  # NaN: the exporter could not read the MBean
            continue
        if name == SIZE and "partition" in labels:
            sizes[(topic, int(labels["partition"]))] = value
        elif name == BYTES_IN:
            bytes_in[topic] = value
        elif name == BYTES_OUT:
            bytes_out[topic] = value
    return BrokerCounters(broker, bytes_in, bytes_out, sizes)


def _rate(now: Mapping[str, float], before: Mapping[str, float], seconds: float) -> dict[str, float]:
    return {topic: max(value - before.get(topic, 0.0), 0.0) / seconds
            for topic, value in now.items() if seconds > 0 and value >= before.get(topic, 0.0)}


def partition_loads(
    leaders: Mapping[tuple[str, int], int | None],
    scrapes: Sequence[tuple[BrokerCounters | None, BrokerCounters]],
    seconds: float,
) -> dict[tuple[str, int], PartitionLoad]:
    """Per partition of ``leaders`` ({(topic, partition): leading broker or None}), its load.

    ``scrapes`` holds per broker its two scrapes, ``seconds`` apart; a broker whose first scrape
    failed (None) contributes sizes but no rates, one whose id is unknown spreads its rates over
    all the topic's partitions.
    """
    partitions_of: dict[str, list[tuple[str, int]]] = defaultdict(list)
    led: dict[tuple[int, str], list[tuple[str, int]]] = defaultdict(list)
    for tp, leader in leaders.items():
        partitions_of[tp[0]].append(tp)
        if leader is not None:
            led[(leader, tp[0])].append(tp)
    rates_in: dict[tuple[str, int], float] = defaultdict(float)
    rates_out: dict[tuple[str, int], float] = defaultdict(float)
    for then, now in scrapes:
        if then is None:
            continue
        for rates, now_counts, then_counts in ((rates_in, now.bytes_in, then.bytes_in),
                                               (rates_out, now.bytes_out, then.bytes_out)):
            for topic, rate in _rate(now_counts, then_counts, seconds).items():
                targets = led.get((now.broker, topic)) or partitions_of.get(topic, [])
                for tp in targets:
                    rates[tp] += rate / len(targets)
    sizes: dict[tuple[str, int], float] = {}
    for _, counters in scrapes:
        for tp, size in counters.sizes.items():
            sizes[tp] = max(sizes.get(tp, 0.0), size)
    return {tp: PartitionLoad(rates_in.get(tp, 0.0), rates_out.get(tp, 0.0), int(sizes.get(tp, 0.0)))
            for tp in leaders}
