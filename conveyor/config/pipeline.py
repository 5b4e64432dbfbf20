"""``pipeline:``: the Spark pipelines (the lake and the real-time views) and the Spark they run on."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from conveyor.config.units import TOPIC_NAME, Model, Name, Seconds


class Spark(Model):
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


class Lake(Model):
    """The exactly-once lake ingestion job (``conveyor pipeline lake``)."""

    #: Topics to land; default: every topic whose consumers name the ``lake`` service.
    topics: list[str] | None = None
    #: How late an event may arrive after its hour; an hour is complete only after this.
    allowed_lateness: Seconds = Field(default=600.0, ge=0)
    #: Drop an event_id already landed within this window (producer retries); 0 turns it off.
    dedup_window: Seconds = Field(default=3600.0, ge=0)
    #: Seconds a run waits for another run holding the warehouse lock.
    lock_timeout: Seconds = Field(default=120.0, ge=0)


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: A filter or a metric's ``where``: field -> the value, or one of the values, it must have.
FieldMatch = dict[str, str | list[str]]


class ViewMetric(Model):
    """One counter of a view: the events ``where`` selects, counted, or their ``sum`` field added up."""

    sum: str | None = Field(default=None, description="an integer field of the contract; default: count")
    where: FieldMatch = Field(default_factory=dict)


class RealtimeView(Model):
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


class Realtime(Model):
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
    rejects_topic: str = Field(default="_realtime_rejects", pattern=TOPIC_NAME)
    #: An event_time further than this after its record's Kafka timestamp is rejected: it would
    #: push the watermark ahead and make every real event late.
    future_tolerance: Seconds = Field(default=300.0, ge=0)
    #: An event_id counted within this window is not counted again (retries, failover copies); 0 turns it off.
    dedup_window: Seconds = Field(default=3600.0, ge=0)


class Pipeline(Model):
    """Settings of the Spark pipelines; each pipeline issue adds its own section."""

    #: Cluster the pipelines read.
    source: Name | None = None
    #: Iceberg warehouse folder (relative to platform.yaml) or URI.
    warehouse: str = ".conveyor/warehouse"
    spark: Spark = Field(default_factory=Spark)
    lake: Lake = Field(default_factory=Lake)
    realtime: Realtime = Field(default_factory=Realtime)

