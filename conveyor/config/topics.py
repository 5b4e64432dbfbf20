"""``topics:``, ``services:`` and ``routes:``: what the clusters carry, who uses it, and where it is copied."""

from __future__ import annotations

import re
from enum import Enum

from pydantic import Field, model_validator

from conveyor.config.clusters import Cluster
from conveyor.config.contracts import Compatibility
from conveyor.config.tokens import TokenHash
from conveyor.config.units import DurationMs, Model, Name, Seconds, SizeBytes

#: Where the ops watcher keeps its rewind evidence on each cluster it watches (conveyor.ops.rewind_history).
REWINDS_TOPIC = "_conveyor_ops_rewinds"


class CleanupPolicy(str, Enum):
    delete = "delete"
    compact = "compact"
    compact_delete = "compact,delete"


class Delivery(str, Enum):
    #: Each event once: money, orders. A loss or a copy pages; the durability lint applies in full.
    exact = "exact"
    #: Copies tolerated, and the rare loss one broker failure can cause: logs, traces. The lake
    #: keeps copies, a loss warns, and the durability lint does not ask for more replicas.
    at_least_once = "at_least_once"


class Topic(Model):
    partitions: int = Field(ge=1, le=10_000)
    #: What the platform promises the topic's consumers, and so how hard it checks and alerts.
    delivery: Delivery = Delivery.exact
    replication_factor: int | None = Field(default=None, ge=1)
    min_insync_replicas: int | None = Field(default=None, ge=1)
    retention: DurationMs = Field(default=7 * 86_400_000)
    retention_bytes: SizeBytes = -1
    cleanup_policy: CleanupPolicy = CleanupPolicy.delete
    #: Path of the topic's JSON Schema, relative to platform.yaml.
    contract: str | None = None
    #: The rule the contract's new versions are held to; default: contracts.compatibility.
    compatibility: Compatibility | None = None
    #: Services that send the topic's events through the bus (a gateway token); they get no Kafka
    #: credentials or ACLs of their own, so every record is written by a gateway and carries its verdict.
    producers: list[Name] = Field(default_factory=list)
    #: Services that write the topic on Kafka themselves, with a SCRAM credential and WRITE: the lake
    #: checks every record of such a topic in full (conveyor.pipeline.trust).
    direct_producers: list[Name] = Field(default_factory=list)
    consumers: list[Name] = Field(default_factory=list)
    #: Broker tag whose brokers alone may hold this topic's replicas.
    isolation: Name | None = None
    #: Clusters that carry the topic; default: every cluster.
    clusters: list[Name] | None = None
    #: Any other Kafka topic config, passed through as is (for example segment.ms).
    config: dict[str, str] = Field(default_factory=dict)
    #: Events per second the producers expect to send (the partition count of a requested topic
    #: comes from it).
    expected_rate: float | None = Field(default=None, ge=0)
    #: The service that asked for the topic through the bus (a request in the contract registry); None for a
    #: topic declared in platform.yaml.
    requested_by: Name | None = None

    def replication_on(self, cluster: Cluster) -> tuple[int, int]:
        """(replication factor, min ISR) of this topic on ``cluster``."""
        factor = self.replication_factor or cluster.default_replication_factor
        min_insync = self.min_insync_replicas or min(cluster.default_min_insync, factor)
        return factor, min_insync

    def kafka_configs(self, cluster: Cluster) -> dict[str, str]:
        """The topic-level Kafka configs Conveyor manages on ``cluster``."""
        _, min_insync = self.replication_on(cluster)
        configs = {
            "cleanup.policy": self.cleanup_policy.value,
            "retention.ms": str(self.retention),
            "retention.bytes": str(self.retention_bytes),
            "min.insync.replicas": str(min_insync),
        }
        configs.update(self.config)
        return configs


class Service(TokenHash):
    """A service that publishes or consumes, and the hash of its token."""

    description: str = ""


class ReplicationMode(str, Enum):
    #: Records and source offsets in one destination transaction: each record lands once.
    exactly_once = "exactly-once"
    #: Plain idempotent writes, offsets committed after: lower latency, duplicates after a crash.
    at_least_once = "at-least-once"


class Route(Model):
    """Replication of topics from a writable cluster into another cluster."""

    source: Name
    destination: Name
    topics: list[str] = Field(default_factory=list)
    #: A regular expression over topic names, instead of (or besides) the list.
    pattern: str | None = None
    #: How the route copies a topic the platform file does not declare (one its pattern matches); a
    #: declared topic is copied as its delivery promises, exact ones exactly once.
    mode: ReplicationMode = ReplicationMode.exactly_once
    #: Units of work: source partitions hash into buckets, workers own buckets. Fixed for a route's
    #: life (changing it moves every partition), so pick it above the most workers you will run.
    buckets: int = Field(default=8, ge=1, le=256)
    #: Most records per transaction, and the longest a batch waits to fill.
    batch_records: int = Field(default=2000, ge=1)
    batch_wait: Seconds = Field(default=0.05, gt=0)
    #: How often source metadata is polled for new topics and partitions.
    discovery_interval: Seconds = Field(default=2.0, gt=0)
    #: Topics requested through the bus (granted in the contract registry) join the route as they are granted.
    requested: bool = True

    @model_validator(mode="after")
    def _selects_something(self) -> Route:
        if not self.topics and self.pattern is None and not self.requested:
            raise ValueError("a route needs topics, a pattern, or requested: true")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as err:
                raise ValueError(f"pattern is not a valid regular expression: {err}") from None
        return self

    def selects(self, topic: str) -> bool:
        # Kafka's internal topics and Conveyor's own bookkeeping topics are never copied.
        if topic.startswith("__") or topic.startswith("_conveyor"):
            return False
        return topic in self.topics or (
            self.pattern is not None and re.fullmatch(self.pattern, topic) is not None
        )


class TopicRequests(Model):
    """Topics services ask for through the bus (``POST /v1/topics``, `conveyor topics request`)."""

    #: Services whose tokens may request topics at the gateway.
    allowed: list[Name] = Field(default_factory=list)
    #: Partitions of a requested topic unless its expected rate asks for more.
    default_partitions: int = Field(default=9, ge=1, le=10_000)
    #: Most partitions a rate may ask for: a request above it is refused (the dispatcher, or a
    #: topic declared by hand, is the answer then).
    max_partitions: int = Field(default=100, ge=1, le=10_000)
    #: A consumer's time per event, and the lag it must recover within after a 30 s stall, when
    #: the request gives neither (the partition advisor's inputs).
    processing_time: Seconds = Field(default=0.005, gt=0)
    max_lag: Seconds = Field(default=60.0, gt=0)
    #: Caps per asking service, so that one token cannot fill the clusters: topics it holds
    #: (granted ones), partitions across them, and requests in any hour (refused ones included).
    max_topics_per_service: int = Field(default=20, ge=1)
    max_partitions_per_service: int = Field(default=500, ge=1)
    max_requests_per_hour: int = Field(default=30, ge=1)
    #: How long POST /v1/topics waits for the provisioner's decision before it answers 202 with
    #: a URL to poll.
    grant_wait: Seconds = Field(default=15.0, ge=0)
