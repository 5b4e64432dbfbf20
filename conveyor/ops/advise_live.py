"""The partition advisor's inputs, measured on a live cluster: consumers over a window of ``seconds``,
the produce rate over Prometheus's last ``window_seconds``.

- partitions per topic: topic metadata;
- produce rate (messages/s): the rate of ``kafka_server_brokertopicmetrics_messagesinpersec_total{topic}``
  summed over the brokers, from the Prometheus that scrapes their exporters;
- backlog: the largest lag (end minus committed offsets, summed over partitions) of any group
  reading the topic, at the end of the window;
- processing time per message: measured per group that stayed behind through the window
  (:func:`~conveyor.topics.advise.measured_processing_seconds`: members over messages committed per
  second); the slowest group counts, since it is the one the partitions must serve.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from confluent_kafka import KafkaException

from conveyor import kafka
from conveyor.config import Platform
from conveyor.topics.advise import measured_processing_seconds
from conveyor.ops.broker_readings import node_values
from conveyor.ops.errors import SampleError
from conveyor.ops.prometheus import NO_PROMETHEUS, QueryError, connect
from conveyor.ops.sampler import SamplerProcess
from conveyor.ops.tracker import OffsetSnapshot

MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesinpersec_total"


@dataclass(frozen=True)
class TopicMeasure:
    topic: str
    partitions: int
    #: Messages/s produced; None when Prometheus could not say (:func:`measure` says why).
    rate: float | None
    backlog: int
    #: Seconds per message of the slowest group that stayed behind; None when no group did.
    processing_seconds: float | None
    #: Group whose consumers set ``processing_seconds``.
    measured_group: str | None = None


def _lags(snapshot: OffsetSnapshot, topic: str) -> dict[str, tuple[int, int]]:
    """Group -> (lag, committed total) on ``topic``."""
    out = {}
    for group in snapshot.groups:
        committed = {tp: o for tp, o in (group.committed or {}).items() if tp[0] == topic}
        if committed:
            lag = sum(max(snapshot.ends.get(tp, o) - o, 0) for tp, o in committed.items())
            out[group.group] = (lag, sum(committed.values()))
    return out


def produce_rates(platform: Platform, cluster: str, window_seconds: float) -> tuple[dict[str, float] | None, str | None]:
    """Messages/s per topic over the last ``window_seconds``, summed over the brokers; or None and why."""
    prometheus = connect(platform)
    if prometheus is None:
        return None, NO_PROMETHEUS
    try:
        rates: dict[str, float] = {}
        for sample in node_values(prometheus, cluster, MESSAGES_IN, window_seconds):
            topic = sample.labels.get("topic")
            if topic is not None and sample.value is not None:
                rates[topic] = rates.get(topic, 0.0) + sample.value
        return rates, None
    except QueryError as err:
        return None, str(err)
    finally:
        prometheus.close()


def measure(platform: Platform, cluster: str, topics: Collection[str] | None, seconds: float,
            window_seconds: float) -> tuple[list[TopicMeasure], str | None]:
    """Per topic its measures, and why there is no produce rate when there is none."""
    # In a child process: librdkafka's group admin calls can kill the process (conveyor.ops.sampler).
    sampler = SamplerProcess(platform, cluster)
    try:
        before = sampler.sample()
        time.sleep(seconds)
        after = sampler.sample()
    finally:
        sampler.close()
    rates, no_rate = produce_rates(platform, cluster, window_seconds)
    window = (after.at_ms - before.at_ms) / 1000
    counts: dict[str, int] = {}
    for topic, _ in after.partitions:
        counts[topic] = counts.get(topic, 0) + 1
    wanted = sorted(t for t in counts if topics is None or t in topics)
    groups = sorted({g for t in wanted for g in _lags(after, t)})
    members = _members(platform, cluster, groups)
    out = []
    for topic in wanted:
        lags_before, lags_after = _lags(before, topic), _lags(after, topic)
        timings = []
        for group, (lag, committed) in lags_after.items():
            if group in lags_before and window > 0:
                consumed = (committed - lags_before[group][1]) / window
                t = measured_processing_seconds(members.get(group, 0), consumed, lags_before[group][0], lag)
                if t is not None:
                    timings.append((t, group))
        slowest = max(timings, default=(None, None))
        out.append(TopicMeasure(topic, counts[topic], rates.get(topic, 0.0) if rates is not None else None,
                                max((lag for lag, _ in lags_after.values()), default=0), *slowest))
    return out, no_rate


def _members(platform: Platform, cluster: str, groups: list[str]) -> dict[str, int]:
    if not groups:
        return {}
    admin = kafka.admin(platform, cluster)  # kept referenced until its futures resolve
    try:
        return {group: len(description.members) for group, description in kafka.describe_groups(admin, groups).items()}
    except KafkaException as exc:
        raise SampleError(cluster, f"describing consumer groups: {exc}") from None
