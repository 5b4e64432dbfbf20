"""The platform model: one typed, validated view of ``platform.yaml``.

Every part of Conveyor reads the platform through :func:`load_platform`; none parses YAML itself.
Validation happens in two passes so that one bad file yields every problem at once, each with its
path inside the file: pydantic checks shapes and ranges, then :func:`_cross_checks` checks the
references between sections (a topic's replication against each cluster's brokers, a route's
clusters, the services a topic names).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)

from conveyor.errors import ConveyorError

DEFAULT_PLATFORM_FILE = "platform.yaml"

# Names become Kafka topic names, directory names and metric labels: keep them to the safe subset.
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
_TOPIC_NAME = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,248}$"

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$")
_DURATION_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)?\s*$", re.IGNORECASE)
_SIZE_BYTES = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_duration_ms(value: Any) -> int:
    """``"7d"`` -> 604800000. Integers are taken as milliseconds; -1 means "forever" (Kafka's)."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 30s, 15m, 7d")
    if isinstance(value, int):
        if value < -1:
            raise ValueError("must be -1 (forever) or a duration such as 30s, 15m, 7d")
        return value
    if isinstance(value, str):
        if value.strip() in ("-1", "forever"):
            return -1
        match = _DURATION.match(value)
        if match:
            return int(match.group(1)) * _DURATION_MS[match.group(2)]
    raise ValueError(f"must be a duration such as 30s, 15m, 7d (got {value!r})")


def parse_size_bytes(value: Any) -> int:
    """``"1GiB"`` -> 1073741824. Integers are taken as bytes; -1 means "no limit" (Kafka's)."""
    if isinstance(value, bool):
        raise ValueError("must be a size such as 512MiB or 10GB")
    if isinstance(value, int):
        if value < -1:
            raise ValueError("must be -1 (no limit) or a size such as 512MiB")
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            return int(match.group(1)) * _SIZE_BYTES[(match.group(2) or "b").lower()]
    raise ValueError(f"must be a size such as 512MiB or 10GB (got {value!r})")


def _seconds(value: Any) -> Any:
    return parse_duration_ms(value) / 1000 if isinstance(value, str) else value


DurationMs = Annotated[int, BeforeValidator(parse_duration_ms)]
#: Seconds, written as a number or a duration string ("5s", "250ms").
Seconds = Annotated[float, BeforeValidator(_seconds)]
SizeBytes = Annotated[int, BeforeValidator(parse_size_bytes)]
Name = Annotated[str, Field(pattern=_NAME, max_length=64)]


class _Model(BaseModel):
    # Frozen so that a loaded platform is a value every part can share; extra=forbid so that a
    # misspelt key is an error instead of a silently ignored setting.
    model_config = ConfigDict(frozen=True, extra="forbid")


class ClusterRole(str, Enum):
    writable = "writable"
    read = "read"


class ReplicationDefaults(_Model):
    """Replication of topics on a cluster unless a topic says otherwise."""

    factor: int | None = Field(default=None, ge=1, description="default: min(3, brokers)")
    min_insync: int | None = Field(default=None, ge=1, description="default: min(2, factor)")


class Cluster(_Model):
    """A Kafka cluster: started locally by ``conveyor up``, or an existing one at ``bootstrap``."""

    role: ClusterRole
    brokers: int = Field(default=1, ge=1, le=32)
    racks: list[Name] = Field(default_factory=list)
    #: Broker tags for isolation: tag -> broker ids (1-based) that carry it.
    tags: dict[Name, list[Annotated[int, Field(ge=1)]]] = Field(default_factory=dict)
    bootstrap: str | None = Field(default=None, min_length=1)
    #: Extra librdkafka settings for reaching an existing cluster (security.protocol, sasl.*).
    client: dict[str, SecretStr] = Field(default_factory=dict)
    replication: ReplicationDefaults = Field(default_factory=ReplicationDefaults)
    #: Writable clusters the gateway writes to, in order, while this one cannot take writes.
    failover: list[Name] = Field(default_factory=list)

    @model_validator(mode="after")
    def _racks_cover_brokers(self) -> Cluster:
        if self.racks and len(self.racks) != self.brokers:
            raise ValueError(
                f"racks names {len(self.racks)} racks for {self.brokers} brokers: "
                "give one rack per broker, or none"
            )
        for tag, ids in self.tags.items():
            outside = sorted(i for i in ids if i > self.brokers)
            if outside:
                raise ValueError(f"tag {tag!r} names broker ids {outside} beyond the {self.brokers} brokers")
        return self

    @property
    def is_local(self) -> bool:
        return self.bootstrap is None

    @property
    def default_replication_factor(self) -> int:
        return self.replication.factor or min(3, self.brokers)

    @property
    def default_min_insync(self) -> int:
        return self.replication.min_insync or min(2, self.default_replication_factor)

    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    def rack_of(self, broker_id: int) -> str | None:
        return self.racks[broker_id - 1] if self.racks else None

    def tags_of(self, broker_id: int) -> list[str]:
        return sorted(tag for tag, ids in self.tags.items() if broker_id in ids)


class CleanupPolicy(str, Enum):
    delete = "delete"
    compact = "compact"
    compact_delete = "compact,delete"


class Topic(_Model):
    partitions: int = Field(ge=1, le=10_000)
    replication_factor: int | None = Field(default=None, ge=1)
    min_insync_replicas: int | None = Field(default=None, ge=1)
    retention: DurationMs = Field(default=7 * 86_400_000)
    retention_bytes: SizeBytes = -1
    cleanup_policy: CleanupPolicy = CleanupPolicy.delete
    #: Path of the topic's JSON Schema, relative to platform.yaml.
    contract: str | None = None
    producers: list[Name] = Field(default_factory=list)
    consumers: list[Name] = Field(default_factory=list)
    #: Broker tag whose brokers alone may hold this topic's replicas.
    isolation: Name | None = None
    #: Clusters that carry the topic; default: every cluster.
    clusters: list[Name] | None = None
    #: Any other Kafka topic config, passed through as is (for example segment.ms).
    config: dict[str, str] = Field(default_factory=dict)

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


class Service(_Model):
    """A service that publishes or consumes. Its token is stored only as a SHA-256 hex digest."""

    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    description: str = ""


class ReplicationMode(str, Enum):
    #: Records and source offsets in one destination transaction: each record lands once.
    exactly_once = "exactly-once"
    #: Plain idempotent writes, offsets committed after: lower latency, duplicates after a crash.
    at_least_once = "at-least-once"


class Route(_Model):
    """Replication of topics from a writable cluster into another cluster."""

    source: Name
    destination: Name
    topics: list[str] = Field(default_factory=list)
    #: A regular expression over topic names, instead of (or besides) the list.
    pattern: str | None = None
    mode: ReplicationMode = ReplicationMode.exactly_once
    #: Units of work: source partitions hash into buckets, workers own buckets. Fixed for a route's
    #: life (changing it moves every partition), so pick it above the most workers you will run.
    buckets: int = Field(default=8, ge=1, le=256)
    #: Most records per transaction, and the longest a batch waits to fill.
    batch_records: int = Field(default=2000, ge=1)
    batch_wait: Seconds = Field(default=0.05, gt=0)
    #: How often source metadata is polled for new topics and partitions.
    discovery_interval: Seconds = Field(default=2.0, gt=0)

    @model_validator(mode="after")
    def _selects_something(self) -> Route:
        if not self.topics and self.pattern is None:
            raise ValueError("a route needs topics, a pattern, or both")
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


class Redis(_Model):
    enabled: bool = True
    port: int | None = Field(default=None, ge=1024, le=65535, description="default: base_port - 1")
    url: str | None = Field(default=None, description="an existing Redis instead of a local one")


class Runtime(_Model):
    """How ``conveyor up`` runs local clusters on this machine."""

    #: Folder for data, logs and pid files, relative to platform.yaml.
    home: str = ".conveyor"
    #: First port; each node takes three consecutive ports (client, controller, metrics).
    base_port: int = Field(default=19092, ge=1025, le=65000)
    broker_heap: str = Field(default="320m", pattern=r"^\d+[mg]$")
    controller_heap: str = Field(default="160m", pattern=r"^\d+[mg]$")
    #: Seconds to wait for every cluster to report all its brokers.
    start_timeout: float = Field(default=120.0, gt=0)
    redis: Redis = Field(default_factory=Redis)


class Gateway(_Model):
    """Settings of every gateway instance (``conveyor gateway serve``)."""

    port: int = Field(default=18080, ge=1024, le=65535, description="first instance's port; --port overrides")
    #: Seconds the local cluster has to acknowledge before events go to a failover cluster.
    failover_after: Seconds = Field(default=5.0, gt=0)
    max_request_bytes: SizeBytes = 16 * 2**20
    #: One event's key and value together; Kafka's own limits (the producer's message.max.bytes,
    #: the topic's max.message.bytes) lower it further (conveyor.gateway.limits).
    max_event_bytes: SizeBytes = 2**20
    max_events_per_request: int = Field(default=50_000, ge=1)
    #: Requests in progress at once, over all topics; more are refused with 503 and Retry-After
    #: before their bodies are read.
    max_concurrent_requests: int = Field(default=512, ge=1)
    #: Bulkheads: topics hash into lanes, each with its own worker budget and bounded queue.
    lanes: int = Field(default=16, ge=1)
    workers_per_lane: int = Field(default=32, ge=1)
    queue_per_lane: int = Field(default=64, ge=0)
    #: Seconds between publications of the audit counts.
    audit_interval: Seconds = Field(default=2.0, gt=0)
    #: Requests with more events get a per-partition summary instead of one entry per event.
    summary_above: int = Field(default=100, ge=0)


class Spark(_Model):
    """How the pipelines run Spark (``conveyor.pipeline.spark`` builds every session from this)."""

    #: local[N] here; in production a cluster: spark://host:port (standalone), yarn, k8s://https://host:port.
    master: str = Field(default="local[2]", pattern=r"^(local(\[(\d+|\*)(,\d+)?\])?|spark://\S+|yarn|k8s://\S+)$")
    driver_memory: str = Field(default="1g", pattern=r"^\d+[mg]$")
    shuffle_partitions: int = Field(default=4, ge=1)
    #: On a cluster, the address executors reach the driver on, and the one it listens on (Spark's
    #: spark.driver.host and spark.driver.bindAddress); local[N] always uses 127.0.0.1.
    driver_host: str | None = None
    driver_bind_address: str | None = None
    #: How long a cluster master may take to answer before a pipeline gives up with its URL.
    master_timeout: Seconds = Field(default=30.0, gt=0)


class Lake(_Model):
    """The exactly-once lake ingestion job (``conveyor pipeline lake``)."""

    #: Topics to land; default: every topic whose consumers name the ``lake`` service.
    topics: list[str] | None = None
    #: How late an event may arrive after its hour; an hour is complete only after this.
    allowed_lateness: Seconds = Field(default=600.0, ge=0)
    #: Drop an event_id already landed within this window (producer retries); 0 turns it off.
    dedup_window: Seconds = Field(default=3600.0, ge=0)
    #: Seconds a run waits for another run holding the warehouse lock.
    lock_timeout: Seconds = Field(default=120.0, ge=0)


# --- real-time views (pipeline.realtime, ``conveyor pipeline realtime``) ---------------------------
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: A filter or a metric's ``where``: field -> the value, or one of the values, it must have.
FieldMatch = dict[str, str | list[str]]


class ViewMetric(_Model):
    """One counter of a view: the events ``where`` selects, counted, or their ``sum`` field added up."""

    sum: str | None = Field(default=None, description="an integer field of the contract; default: count")
    where: FieldMatch = Field(default_factory=dict)


class RealtimeView(_Model):
    """Windowed counters of one topic's events, kept in Redis hashes, one per key and window."""

    topic: str
    filter: FieldMatch = Field(default_factory=dict)
    group_by: list[str] = Field(min_length=1)
    #: Tumbling event-time window.
    window: Seconds = Field(default=60.0, gt=0)
    metrics: dict[Name, ViewMetric] = Field(min_length=1)
    #: Computed on read: name -> (numerator metric, denominator metric), e.g. ctr: [clicks, impressions].
    ratios: dict[Name, tuple[Name, Name]] = Field(default_factory=dict)
    #: How far behind the newest event time an event may be and still count; later ones are rejected as late.
    allowed_lateness: Seconds = Field(default=60.0, ge=0)
    #: Seconds a key lives after its last write; it must outlive the window and the lateness.
    ttl: Seconds = Field(default=86_400.0, gt=0)
    #: Redis key: ``{view}``, ``{window_start}`` and group-by fields; group-by fields left out of the
    #: key become part of the hash's field names (``<metric>:<value>``). Default: every group-by field.
    key: str | None = None

    @property
    def key_layout(self) -> str:
        return self.key or "view:{view}:" + ":".join(f"{{{g}}}" for g in self.group_by) + ":{window_start}"

    @property
    def key_fields(self) -> list[str]:
        """The group-by fields in the key, in the key's order."""
        return [p for p in _PLACEHOLDER.findall(self.key_layout) if p in self.group_by]

    @model_validator(mode="after")
    def _consistent(self) -> RealtimeView:
        placeholders = _PLACEHOLDER.findall(self.key_layout)
        unknown = [p for p in placeholders if p not in {"view", "window_start", *self.group_by}]
        if unknown:
            raise ValueError(f"key names {unknown} that are neither view, window_start nor a group_by field")
        if "view" not in placeholders or "window_start" not in placeholders:
            raise ValueError("key must contain {view} and {window_start} (keys of two views or windows must differ)")
        for name, (numerator, denominator) in self.ratios.items():
            if {numerator, denominator} - set(self.metrics):
                raise ValueError(f"ratio {name!r} names metrics that the view does not have")
        if self.ttl <= self.window + self.allowed_lateness:
            raise ValueError("ttl must exceed window + allowed_lateness (a late update would recreate an expired key)")
        return self

    def fields_used(self) -> dict[str, str]:
        """Every contract field the view reads -> where it is named (for checks against the contract)."""
        used = {f: "filter" for f in self.filter} | {g: "group_by" for g in self.group_by}
        for name, metric in self.metrics.items():
            used |= {f: f"metrics.{name}.where" for f in metric.where}
            if metric.sum is not None:
                used[metric.sum] = f"metrics.{name}.sum"
        return used


class Realtime(_Model):
    """The real-time views job (``conveyor pipeline realtime``): one Structured Streaming query."""

    views: dict[Name, RealtimeView] = Field(default_factory=dict)
    #: Folder under runtime.home; each job (set of views) has its own checkpoint folder in it.
    checkpoint: str = "realtime"
    #: Micro-batch interval.
    trigger: Seconds = Field(default=1.0, gt=0)
    #: Most Kafka records per micro-batch (catching up after a stop goes in steps of this).
    max_records_per_batch: int = Field(default=200_000, ge=1)
    #: Where a new job (no checkpoint yet) starts reading.
    starting_offsets: str = Field(default="earliest", pattern=r"^(earliest|latest)$")
    #: Side output on the source cluster: late, malformed and unusable events with the reason.
    rejects_topic: str = Field(default="_realtime_rejects", pattern=_TOPIC_NAME)
    #: An event_time further than this after its record's Kafka timestamp is rejected: it would
    #: push the watermark ahead and make every real event late.
    future_tolerance: Seconds = Field(default=300.0, ge=0)
    #: An event_id counted within this window is not counted again (retries, failover copies); 0 turns it off.
    dedup_window: Seconds = Field(default=3600.0, ge=0)


def _contract_properties(platform: Platform, topic: str) -> dict[str, Any] | None:
    spec = platform.topics.get(topic)
    if spec is None or spec.contract is None:
        return None
    try:
        schema = json.loads(platform.resolve(spec.contract).read_text())
    except (OSError, ValueError):
        return None  # reported by the topic's own contract check
    return schema.get("properties") or {} if isinstance(schema, dict) else None


def _realtime_problems(platform: Platform) -> Iterator[Problem]:
    for name, view in platform.pipeline.realtime.views.items():
        where = f"pipeline.realtime.views.{name}"
        if view.topic not in platform.topics:
            yield Problem(f"{where}.topic", f"names unknown topic {view.topic!r}")
            continue
        properties = _contract_properties(platform, view.topic)
        if platform.topics[view.topic].contract is None:
            yield Problem(f"{where}.topic", f"topic {view.topic!r} has no contract (views parse events with it)")
        if properties is None:
            continue
        for field, used_in in view.fields_used().items():
            if field not in properties:
                yield Problem(f"{where}.{used_in}", f"field {field!r} is not in the contract of {view.topic!r}")
        for metric_name, metric in view.metrics.items():
            spec = properties.get(metric.sum) if metric.sum else None
            if isinstance(spec, dict) and spec.get("type") not in ("integer", ["integer", "null"]):
                yield Problem(f"{where}.metrics.{metric_name}.sum", f"field {metric.sum!r} is not an integer")
# --- end of real-time views ----------------------------------------------------------------------


class Pipeline(_Model):
    """Settings of the Spark pipelines; each pipeline issue adds its own section."""

    #: Cluster the pipelines read.
    source: Name | None = None
    #: Iceberg warehouse folder (relative to platform.yaml) or URI.
    warehouse: str = ".conveyor/warehouse"
    spark: Spark = Field(default_factory=Spark)
    lake: Lake = Field(default_factory=Lake)
    realtime: Realtime = Field(default_factory=Realtime)


class Dispatch(_Model):
    """Settings of every consumer dispatcher node (``conveyor dispatch serve``)."""

    #: Cluster the dispatcher reads; default: pipeline.source, else the only read cluster.
    cluster: Name | None = None
    port: int = Field(default=18090, ge=1024, le=65535, description="gRPC port; --port overrides")
    metrics_port: int = Field(default=18190, ge=1024, le=65535, description="/metrics and /healthz")
    #: A delivered message not acked within this is delivered again.
    ack_deadline: Seconds = Field(default=30.0, gt=0)
    #: Deliveries of one message before it goes to the dead-letter topic instead.
    max_attempts: int = Field(default=5, ge=1)
    #: Dead-letter topic per (topic, group); created on first use with the cluster's replication.
    dead_letter_topic: str = Field(default="{topic}.{group}.dead", pattern=r"\{topic\}.*\{group\}|\{group\}.*\{topic\}")
    #: Seconds between offset commits (committed offset plus the acks above it in the metadata).
    commit_interval: Seconds = Field(default=0.5, gt=0)
    #: The broker's offset.metadata.max.bytes; the dispatcher fetches no further ahead than fits.
    metadata_max_bytes: int = Field(default=4096, ge=64)
    #: Fetched messages a partition may hold before the first delivery; the fetch pauses beyond
    #: and resumes below half. librdkafka fetches about a megabyte per partition at a time and
    #: drops it on a pause, so a bound near one fetch pauses all the time: 2,000 held the instant
    #: handler to ~25,000 messages/s, 20,000 let it past 70,000.
    prefetch: int = Field(default=20_000, ge=1)
    #: Most messages in one frame to a client.
    batch: int = Field(default=500, ge=1)
    #: Highest credit (unacked messages) one client stream may hold.
    max_credit: int = Field(default=10_000, ge=1)
    #: ``classic``: a consumer group with acks in the commit metadata; ``share``: a KIP-932 share
    #: group (Kafka 4.2+, docs/dispatch.md). Same gRPC API: clients cannot tell which serves them.
    backend: Literal["classic", "share"] = "classic"
    #: Share consumers per (topic, group) on a node (share backend); each polls again only once
    #: its whole previous poll is settled, so several keep records flowing past a slow one.
    share_consumers: int = Field(default=3, ge=1, le=32)
    #: A Read stream must subscribe within this of opening, or it is closed (DEADLINE_EXCEEDED):
    #: streams waiting for their first frame hold a node's stream slots.
    subscribe_timeout: Seconds = Field(default=5.0, gt=0)
    #: Longest redelivery delay a nack may ask for; a longer one is refused (INVALID_ARGUMENT).
    #: The node holds the message meanwhile, and with it its partition's committed offset.
    max_retry_delay: Seconds = Field(default=300.0, gt=0)
    #: A (topic, group) with no client for this long has its reader stopped: acks committed, Kafka
    #: consumers closed and the group left, so its partitions go to nodes whose clients read them.
    reader_idle_timeout: Seconds = Field(default=600.0, gt=0)

    @model_validator(mode="after")
    def _share_attempts_fit_the_broker(self) -> Dispatch:
        # The node dead-letters at max_attempts; the broker must allow one delivery more, and
        # Kafka caps share.delivery.count.limit at 10 (group.share.max.delivery.count.limit).
        if self.backend == "share" and self.max_attempts > 9:
            raise ValueError(f"max_attempts {self.max_attempts} is above 9, the most the share backend "
                             "supports (Kafka caps a share group's delivery count at 10)")
        return self


class OpsPanel(_Model):
    """A dashboard panel that components fill through their /metrics (interface in docs/ops.md)."""

    title: str = Field(min_length=1)
    #: Metric family names, or globs over them (``conveyor_replicate_*lag*``); each label set is a series.
    metrics: list[str] = Field(min_length=1)


def _default_panels() -> dict[str, OpsPanel]:
    return {name: OpsPanel(title=title, metrics=metrics) for name, title, metrics in (
        ("gateway", "Gateway: events accepted and request time",
         ["conveyor_gateway_events_accepted", "conveyor_gateway_request_seconds"]),
        ("replication", "Replication lag and latency", ["conveyor_replicate_*lag*", "conveyor_replicate_*latency*"]),
        ("lake", "Lake completeness and audit per hour",
         ["conveyor_lake_rows_landed", "conveyor_lake_gaps", "conveyor_lake_lost_records", "conveyor_lake_*complete*",
          "conveyor_audit_*"]),
        ("dispatch", "Dispatcher backlog", ["conveyor_dispatch_*backlog*"]),
        ("realtime", "Real-time view latency", ["conveyor_realtime_*latency*"]),
        ("throttle", "Throttled consumers and busy brokers",
         ["conveyor_throttle_quota_bytes", "conveyor_throttle_broker_busy", "conveyor_throttle_decisions_total"]),
    )}


class Ops(_Model):
    """Settings of the operations watcher (``conveyor ops watch``) and its dashboard."""

    port: int = Field(default=18070, ge=1024, le=65535, description="/metrics, /healthz, /api and the dashboard")
    #: Seconds between samples of offsets and broker metrics.
    interval: Seconds = Field(default=5.0, gt=0)
    #: Samples per partition window (Burrow's intervals); the lag rules judge a whole window.
    window: int = Field(default=10, ge=2, le=100)
    #: Points kept per consumer group and panel series for the dashboard's sparklines.
    history: int = Field(default=120, ge=2, le=10_000)
    #: Optional lag thresholds that turn an otherwise OK partition into WARN.
    max_lag_records: int | None = Field(default=None, ge=0)
    max_lag_seconds: Seconds | None = Field(default=None, ge=0)
    #: Regular expressions over group ids that are not watched (tools, tests).
    exclude_groups: list[str] = Field(default_factory=list)
    #: Request time p99 (Produce, FetchConsumer, Metadata): warning above, alarm above (MISSION: 10 s).
    request_p99_warn: Seconds = Field(default=1.0, gt=0)
    request_p99_alarm: Seconds = Field(default=10.0, gt=0)
    #: Load skew across brokers (max over mean) above this is a warning.
    skew_warn: float = Field(default=1.5, gt=1)
    #: Byte rates below this per broker (mean) are too small for skew to matter.
    skew_min_bytes: SizeBytes = 1_048_576
    #: Read rate over write rate that counts as read amplification (the mission's incident was 4x).
    amplification: float = Field(default=3.0, gt=1)
    #: JMX exporter URLs of the brokers of clusters given by bootstrap (local ones are known).
    metrics: dict[Name, list[str]] = Field(default_factory=dict)
    #: Component name -> its /metrics URL, read for the panels.
    components: dict[Name, str] = Field(default_factory=dict)
    panels: dict[Name, OpsPanel] = Field(default_factory=_default_panels)

    @model_validator(mode="after")
    def _valid(self) -> Ops:
        if self.request_p99_warn > self.request_p99_alarm:
            raise ValueError("request_p99_warn must not be above request_p99_alarm")
        for pattern in self.exclude_groups:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"exclude_groups: {pattern!r} is not a valid regular expression: {err}") from None
        return self


class Platform(_Model):
    version: int = Field(default=1, ge=1, le=1)
    name: Name = "conveyor"
    runtime: Runtime = Field(default_factory=Runtime)
    clusters: dict[Name, Cluster] = Field(min_length=1)
    topics: dict[Annotated[str, Field(pattern=_TOPIC_NAME)], Topic] = Field(default_factory=dict)
    services: dict[Name, Service] = Field(default_factory=dict)
    routes: dict[Name, Route] = Field(default_factory=dict)
    gateway: Gateway = Field(default_factory=Gateway)
    pipeline: Pipeline = Field(default_factory=Pipeline)
    dispatch: Dispatch = Field(default_factory=Dispatch)
    ops: Ops = Field(default_factory=Ops)

    #: Folder of the platform file; relative paths inside the file are relative to it.
    root: Path = Field(default=Path("."), exclude=True)

    def cluster(self, name: str) -> Cluster:
        try:
            return self.clusters[name]
        except KeyError:
            known = ", ".join(sorted(self.clusters))
            raise ConfigError([Problem(f"clusters.{name}", f"no such cluster (known: {known})")]) from None

    def topics_on(self, cluster_name: str) -> dict[str, Topic]:
        """The topics that ``cluster_name`` carries."""
        return {
            name: topic
            for name, topic in self.topics.items()
            if topic.clusters is None or cluster_name in topic.clusters
        }

    def resolve(self, relative: str) -> Path:
        path = Path(relative)
        return path if path.is_absolute() else (self.root / path)

    @property
    def home(self) -> Path:
        return self.resolve(self.runtime.home)

    def local_clusters(self) -> dict[str, Cluster]:
        return {name: c for name, c in self.clusters.items() if c.is_local}


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ConveyorError):
    """platform.yaml is unreadable or invalid; ``problems`` lists every problem found."""

    exit_code = 2

    def __init__(self, problems: list[Problem], source: str | Path | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f"{source}: " if source else ""
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{where}{len(problems)} problem(s)\n{lines}")


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _message(error: dict[str, Any]) -> str:
    """A short message in the file's terms rather than pydantic's."""
    kind, ctx = error["type"], error.get("ctx") or {}
    bounds = {
        "greater_than_equal": ">= {ge}", "greater_than": "> {gt}",
        "less_than_equal": "<= {le}", "less_than": "< {lt}",
    }
    if kind in bounds:
        return "must be " + bounds[kind].format(**ctx)
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known setting (check the spelling)"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    if kind in ("too_short", "too_long") and "min_length" in ctx:
        return f"must have at least {ctx['min_length']} item(s)"
    if kind == "enum":
        return f"must be one of {ctx.get('expected')}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return error["msg"][0].lower() + error["msg"][1:]


def _cross_checks(platform: Platform) -> Iterator[Problem]:
    for name, cluster in platform.clusters.items():
        if cluster.is_local and cluster.client:
            yield Problem(f"clusters.{name}.client", "only applies to a cluster given by bootstrap")
        for other in cluster.failover:
            target = platform.clusters.get(other)
            if target is None:
                yield Problem(f"clusters.{name}.failover", f"names unknown cluster {other!r}")
            elif target.role != ClusterRole.writable or other == name:
                yield Problem(f"clusters.{name}.failover", f"cluster {other!r} is not another writable cluster")
        factor = cluster.default_replication_factor
        if factor > cluster.brokers:
            yield Problem(
                f"clusters.{name}.replication.factor",
                f"is {factor} but the cluster has {cluster.brokers} broker(s)",
            )
        if cluster.default_min_insync > factor:
            yield Problem(
                f"clusters.{name}.replication.min_insync",
                f"is {cluster.default_min_insync}, above the replication factor {factor}",
            )

    for name, topic in platform.topics.items():
        where = f"topics.{name}"
        for cluster_name in topic.clusters or []:
            if cluster_name not in platform.clusters:
                yield Problem(f"{where}.clusters", f"names unknown cluster {cluster_name!r}")
        for cluster_name, cluster in platform.clusters.items():
            if name not in platform.topics_on(cluster_name):
                continue
            factor, min_insync = topic.replication_on(cluster)
            if factor > cluster.brokers:
                yield Problem(
                    f"{where}.replication_factor",
                    f"is {factor} but cluster {cluster_name!r} has {cluster.brokers} broker(s)",
                )
            if min_insync > factor:
                yield Problem(
                    f"{where}.min_insync_replicas",
                    f"is {min_insync}, above the replication factor {factor} on cluster {cluster_name!r}",
                )
            if topic.isolation and topic.isolation in cluster.tags:
                tagged = len(cluster.tags[topic.isolation])
                if tagged < factor:
                    yield Problem(
                        f"{where}.isolation",
                        f"tag {topic.isolation!r} is on {tagged} broker(s) of cluster {cluster_name!r}, "
                        f"fewer than the replication factor {factor}",
                    )
        if topic.isolation and not any(topic.isolation in c.tags for c in platform.clusters.values()):
            yield Problem(f"{where}.isolation", f"no cluster has brokers tagged {topic.isolation!r}")
        for role in ("producers", "consumers"):
            for service in getattr(topic, role):
                if service not in platform.services:
                    yield Problem(f"{where}.{role}", f"names unknown service {service!r}")
        if topic.contract is not None and not platform.resolve(topic.contract).is_file():
            yield Problem(f"{where}.contract", f"file {topic.contract} does not exist")

    for name, route in platform.routes.items():
        for end in ("source", "destination"):
            cluster_name = getattr(route, end)
            if cluster_name not in platform.clusters:
                yield Problem(f"routes.{name}.{end}", f"names unknown cluster {cluster_name!r}")
        if route.source == route.destination:
            yield Problem(f"routes.{name}", "source and destination are the same cluster")
        source = platform.clusters.get(route.source)
        if source is not None and source.role != ClusterRole.writable:
            yield Problem(f"routes.{name}.source", f"cluster {route.source!r} is not writable")
        for topic in route.topics:
            if topic not in platform.topics:
                yield Problem(f"routes.{name}.topics", f"names unknown topic {topic!r}")

    if platform.pipeline.source is not None and platform.pipeline.source not in platform.clusters:
        yield Problem("pipeline.source", f"names unknown cluster {platform.pipeline.source!r}")
    for topic in platform.pipeline.lake.topics or []:
        if topic not in platform.topics:
            yield Problem("pipeline.lake.topics", f"names unknown topic {topic!r}")
        elif platform.topics[topic].contract is None:
            yield Problem("pipeline.lake.topics", f"topic {topic!r} has no contract (the lake's columns come from it)")
    yield from _realtime_problems(platform)


_SECTIONS = ("clusters", "topics", "services", "routes")


def _without_broken_entries(data: dict[str, Any], errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``data`` minus the entries (a cluster, a topic...) that failed validation, so the references
    between the remaining ones can still be checked; None when a failure is outside any entry."""
    broken: dict[str, set[str]] = {}
    for error in errors:
        loc = error["loc"]
        if len(loc) < 2 or loc[0] not in _SECTIONS:
            return None
        broken.setdefault(str(loc[0]), set()).add(str(loc[1]))
    trimmed = dict(data)
    for section, names in broken.items():
        trimmed[section] = {k: v for k, v in (data.get(section) or {}).items() if k not in names}
    return trimmed


def parse_platform(data: Any, root: Path = Path("."), source: str | Path | None = None) -> Platform:
    """Validate already-parsed YAML; raise :class:`ConfigError` listing every problem."""
    if not isinstance(data, dict):
        raise ConfigError([Problem("", "the file must hold a mapping (clusters:, topics:, ...)")], source)
    try:
        platform = Platform.model_validate({**data, "root": root})
    except ValidationError as err:
        errors = err.errors()
        problems = [Problem(_path(e["loc"]), _message(e)) for e in errors]
        trimmed = _without_broken_entries(data, errors)
        if trimmed is not None:
            try:
                partial = Platform.model_validate({**trimmed, "root": root})
            except ValidationError:
                pass  # a reference check needs a valid remainder; the shape errors stand alone
            else:
                # A reference to an entry set aside is not a second problem, only an echo of the first.
                set_aside = {f"'{e['loc'][1]}'" for e in errors}
                problems += [p for p in _cross_checks(partial) if not any(n in p.message for n in set_aside)]
        raise ConfigError(problems, source) from None
    problems = list(_cross_checks(platform))
    if problems:
        raise ConfigError(problems, source)
    return platform


def load_platform(path: str | Path = DEFAULT_PLATFORM_FILE) -> Platform:
    """Read and validate a platform file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [Problem("", f"no platform file at {path} (pass --platform or set CONVEYOR_PLATFORM)")]
        ) from None
    except IsADirectoryError:
        raise ConfigError([Problem("", "is a directory, not a platform file")], path) from None
    except NotADirectoryError:
        raise ConfigError([Problem("", "cannot be read: a part of the path before the file name is "
                                       "not a directory")], path) from None
    except UnicodeDecodeError as err:
        raise ConfigError([Problem("", f"is not UTF-8 text (byte {err.start}: {err.reason})")], path) from None
    except OSError as err:
        raise ConfigError([Problem("", f"cannot be read: {(err.strerror or str(err)).lower()}")], path) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError([Problem("", f"{where}not valid YAML ({getattr(err, 'problem', err)})")], path) from None
    return parse_platform(data, root=path.resolve().parent, source=path)
