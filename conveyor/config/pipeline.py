"""``pipeline:``: the Spark pipelines (the lake and the real-time views) and the Spark they run on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any
from typing import Literal

from pydantic import AfterValidator, BeforeValidator, Discriminator, Field, SecretStr, Tag, field_validator, model_validator

from conveyor.config.units import TOPIC_NAME, Model, Name, Secret, Seconds, is_reference, resolve_secret


#: Spark settings that pipeline.spark gives keys of their own.
_SPARK_KEYS = {"spark.master": "master", "spark.driver.memory": "driver_memory",
               "spark.sql.shuffle.partitions": "shuffle_partitions", "spark.driver.host": "driver_host",
               "spark.driver.bindAddress": "driver_bind_address", "spark.jars": "jars",
               "spark.jars.packages": "packages"}


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
    #: On a cluster, the Python executors start their workers with (PYSPARK_PYTHON): any Python of
    #: the driver's minor version; conveyor and what its executor side imports are shipped
    #: (conveyor.pipeline.shipping). Default: PYSPARK_PYTHON as set, else python3. local[N] uses
    #: the driver's interpreter.
    executor_python: str | None = None
    #: Any other Spark setting (executor memory and instances, a Kubernetes image, ...), applied
    #: over the pipelines' own; the settings above and the jars have their own keys. A value may be
    #: ``${ENV_VAR}`` or ``file:PATH`` (an access key) and is masked when shown.
    conf: dict[str, Secret] = Field(default_factory=dict)
    #: Jars added to the pipelines' own (paths or URLs), and Maven coordinates Spark resolves
    #: (spark.jars.packages: group:artifact:version), such as an object store's file system.
    jars: list[str] = Field(default_factory=list)
    packages: list[str] = Field(default_factory=list)

    @field_validator("conf")
    @classmethod
    def _own_keys(cls, conf: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for key in conf:
            if not key.startswith("spark."):
                raise ValueError(f"conf: {key!r} is not a Spark setting (they start with spark.)")
            if key in _SPARK_KEYS:
                raise ValueError(f"conf: give {key} as pipeline.spark.{_SPARK_KEYS[key]}")
        return conf

    @field_validator("packages")
    @classmethod
    def _coordinates(cls, packages: list[str]) -> list[str]:
        for package in packages:
            if not re.fullmatch(r"[\w.\-]+:[\w.\-]+:[\w.\-]+", package):
                raise ValueError(f"packages: {package!r} is not a Maven coordinate group:artifact:version")
        return packages


class Lake(Model):
    """The exactly-once lake ingestion job (``conveyor lake run``)."""

    #: Topics to land; default: every topic whose consumers name the ``lake`` service.
    topics: list[str] | None = None
    #: How late an event may arrive after its hour; an hour is complete only after this.
    allowed_lateness: Seconds = Field(default=600.0, ge=0)
    #: How often the lake runs (a `lake run --every` process, a systemd timer, a CronJob): the
    #: schedule `conveyor deploy` writes and the one the watcher judges the lake's positions
    #: against (stopped only after two missed runs).
    every: Seconds = Field(default=600.0, gt=0)
    #: Drop an event_id already landed within this window (producer retries); 0 turns it off.
    dedup_window: Seconds = Field(default=3600.0, ge=0)
    #: Topics whose rows keep every record's bytes (``raw_value``); the other topics' rows keep
    #: them only for an event with fields outside the table's columns, where they say more.
    keep_raw_value: list[str] = Field(default_factory=list)
    #: A run that loses a commit to a concurrent run re-reads the table's positions and tries
    #: again, at most this many times in all.
    commit_attempts: int = Field(default=5, ge=1)
    #: Files under a table that no snapshot references are deleted once older than this (after a
    #: killed run). It must exceed the longest run: a younger file may belong to a run in progress,
    #: on this host or another. 0s is right only when one writer runs at a time.
    orphan_age: Seconds = Field(default=86_400.0, ge=0)


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_REDIS_URL = re.compile(r"^rediss?://\S+$")


def _redis_url(value: SecretStr) -> SecretStr:
    if not is_reference(value) and not _REDIS_URL.match(value.get_secret_value()):
        raise ValueError("must be a redis:// or rediss:// URL")
    return value


#: A Redis URL, which may carry a user and password (``rediss://user:password@host:6379/0``): as a
#: secret it may be ``${ENV_VAR}`` or ``file:PATH``, and is masked wherever settings are shown.
RedisUrl = Annotated[SecretStr, BeforeValidator(resolve_secret), AfterValidator(_redis_url)]
#: One server's URL, or a Redis Cluster's nodes' (a list); an error names which it was read as.
RedisTargetUrls = Annotated[Annotated[RedisUrl, Tag("url")] | Annotated[list[RedisUrl], Field(min_length=1), Tag("nodes")],
                            Discriminator(lambda value: "nodes" if isinstance(value, list) else "url")]
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

    def contract_gaps(self, properties: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
        """(field, where the view names it, what is wrong) for each field the view reads that a
        contract with these properties does not give as the view needs it."""
        for field, used_in in self.fields_used().items():
            if field not in properties:
                yield field, used_in, f"is not in the contract of {self.topic!r}"
        for name, metric in self.metrics.items():
            spec = properties.get(metric.sum) if metric.sum else None
            if isinstance(spec, dict) and spec.get("type") not in ("integer", ["integer", "null"]):
                yield metric.sum, f"metrics.{name}.sum", "is not an integer"  # type: ignore[misc]


class Realtime(Model):
    """The real-time views job (``conveyor views run``): one Structured Streaming query."""

    views: dict[Name, RealtimeView] = Field(default_factory=dict)
    #: Folder under runtime.home, or a URI of any Hadoop file system (file:///..., hdfs://...,
    #: s3://... through S3A, which takes the catalog's S3 options); each job (set of views) has its
    #: own checkpoint folder in it.
    checkpoint: str = "realtime"
    #: The views' Redis: one server's URL, or a list of Redis Cluster nodes' URLs (some of them: the
    #: client discovers the rest; the first one's credentials and TLS apply to all). Unset, `conveyor
    #: up` gives it in the resolved view: runtime.redis.url, else the Redis it runs.
    redis: RedisTargetUrls | None = None
    #: The same Redis as a read-only user sees it, for the parts that only read the views (`conveyor
    #: verify`, `conveyor views`); default: ``redis``. `conveyor up` gives both, each its own user.
    redis_reader: RedisTargetUrls | None = None
    #: ``micro-batch``: a batch every ``trigger``. ``real-time``: Spark's real-time mode, one task per
    #: partition that stays up and writes each Arrow batch of ``real_time_rows`` records as it
    #: arrives (Spark needs a slot per partition; docs/realtime.md). A job keeps its mode: changing
    #: it takes ``--rebuild``.
    mode: Literal["micro-batch", "real-time"] = "micro-batch"
    #: Micro-batch interval.
    trigger: Seconds = Field(default=1.0, gt=0)
    #: Real-time mode: records a task hands to Python at once. A record waits for that many to
    #: arrive on its partition, or for its real-time batch to end: size it to the rate.
    real_time_rows: int = Field(default=500, ge=1)
    #: Real-time mode: length of one real-time batch; Spark logs its offsets when it ends, and a
    #: restart reads again from there (the job skips what it had written, unread).
    real_time_batch: Seconds = Field(default=300.0, gt=0)
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


#: Schemes of object stores: no atomic rename, so no Hadoop catalog on them.
OBJECT_STORES = ("s3a://", "s3://", "s3n://", "gs://", "abfs://", "abfss://", "wasb://", "wasbs://")
_CATALOG_URIS = {"jdbc": ("jdbc:",), "rest": ("http://", "https://"), "hive": ("thrift://",)}


class Catalog(Model):
    """The Iceberg catalog of the lake's tables (``conveyor.pipeline.catalog`` maps it to Spark).

    ``hadoop`` keeps table metadata as files beside the data and commits by renaming a file: the
    embedded default for one machine. ``jdbc`` (PostgreSQL), ``rest`` and ``hive`` keep it in a
    service that commits atomically, which object stores and many writers need."""

    type: Literal["hadoop", "jdbc", "rest", "hive"] = "hadoop"
    #: jdbc:postgresql://host:port/db, http(s)://rest-server, thrift://metastore:9083. For jdbc it
    #: may be left out when runtime.postgres runs the database locally: `conveyor up` gives it then.
    uri: str | None = None
    #: Folder (relative to platform.yaml) or URI where table files go.
    warehouse: str = ".conveyor/warehouse"
    #: More Iceberg catalog properties, passed as they are (jdbc.user, jdbc.password, io-impl, ...).
    #: Each may be ``${ENV_VAR}`` or ``file:PATH``, and is masked wherever the settings are shown.
    options: dict[str, Secret] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Catalog:
        if self.type == "hadoop":
            if self.warehouse.startswith(OBJECT_STORES):
                raise ValueError(
                    f"type hadoop cannot keep tables on {self.warehouse}: a Hadoop catalog commits by an atomic "
                    "rename, which object stores lack, so two commits could both win; use type jdbc, rest or hive"
                )
            if self.uri is not None:
                raise ValueError("type hadoop takes no uri (its metadata lives in the warehouse)")
        elif self.uri is not None and not self.uri.startswith(_CATALOG_URIS[self.type]):
            raise ValueError(f"uri of a {self.type} catalog must start with {' or '.join(_CATALOG_URIS[self.type])}")
        elif self.uri is None and self.type != "jdbc":
            raise ValueError(f"type {self.type} needs a uri")
        return self


class Pipeline(Model):
    """Settings of the Spark pipelines; each pipeline has its own section."""

    #: Cluster the pipelines read.
    source: Name | None = None
    catalog: Catalog = Field(default_factory=Catalog)
    spark: Spark = Field(default_factory=Spark)
    lake: Lake = Field(default_factory=Lake)
    realtime: Realtime = Field(default_factory=Realtime)

