"""The replicator's Prometheus metrics, per route and source partition (names in docs/replicate.md)."""

from __future__ import annotations

import time

from confluent_kafka import Message
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from conveyor.replicate.plan import SourcePartition


class ReplicateMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = {"registry": self.registry}
        partition = ["route", "topic", "partition"]
        self.records = Counter("conveyor_replicate_records", "Records copied (committed)", partition, **r)
        self.bytes = Counter("conveyor_replicate_bytes", "Key and value bytes copied (committed)", partition, **r)
        self.lag = Gauge("conveyor_replicate_lag_records", "Source end offset minus next offset to copy", partition,
                         **r)
        self.latency = Histogram("conveyor_replicate_latency_seconds",
                                 "Source record timestamp to committed copy", ["route"],
                                 buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60), **r)
        self.max_pause = Gauge("conveyor_replicate_max_pause_seconds",
                               "Longest gap between copies of a partition that had records waiting", partition, **r)
        self.stopped = Gauge("conveyor_replicate_partition_stopped",
                             "1 when a partition is stopped (a record the destination refuses)", partition, **r)
        self.buckets_owned = Gauge("conveyor_replicate_buckets_owned",
                                   "Buckets this worker copies, per copy mode (a bucket with topics of both "
                                   "deliveries counts in each)", ["route", "worker", "mode"], **r)
        self.errors = Counter("conveyor_replicate_errors", "Errors by kind (source, commit-retry, aborted)",
                              ["route", "kind"], **r)
        self.unreachable = Gauge("conveyor_replicate_cluster_unreachable",
                                 "1 while a cluster of the route does not answer (alert)", ["route", "cluster"], **r)
        self.topics = Gauge("conveyor_replicate_topics", "Source topics the route copies", ["route"], **r)
        topic = ["route", "topic"]
        self.gaps = Counter("conveyor_replicate_gaps", "Gaps found: source offsets retention deleted before they "
                            "were copied (recorded in the route topic; alert)", topic, **r)
        self.gap_records = Counter("conveyor_replicate_gap_records",
                                   "Source offsets retention deleted before they were copied", topic, **r)
        self.config_differences = Gauge("conveyor_replicate_config_differences",
                                        "Source configs of an undeclared topic its copy does not have", topic, **r)

    def copied(self, route: str, message: Message, now_monotonic: float) -> None:
        labels = (route, message.topic(), str(message.partition()))
        self.records.labels(*labels).inc()
        self.bytes.labels(*labels).inc(len(message.value() or b"") + len(message.key() or b""))
        timestamp_ms = message.timestamp()[1]
        if timestamp_ms > 0:
            self.latency.labels(route).observe(max(0.0, time.time() - timestamp_ms / 1000))

    def pause(self, route: str, source: SourcePartition, seconds: float) -> None:
        gauge = self.max_pause.labels(route, source.topic, str(source.partition))
        if seconds > gauge._value.get():
            gauge.set(seconds)
