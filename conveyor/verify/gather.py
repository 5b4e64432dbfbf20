"""What ``conveyor verify`` reads from each sink, handed to the pure checks (conveyor.verify.checks).

The lake's tables through Spark (the counting stays in Spark; only figures, samples and one row per
view key and window reach the driver), the views in Redis as the views job connects to it, the
views job's rejects, the dispatcher groups' commits, and the routes' sources and destinations on
Kafka (every record, read with verify's own reader).
"""

from __future__ import annotations

import math
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import OffsetSpec

from conveyor import kafka
from conveyor.config import Platform, RealtimeView, read_contract
from conveyor.config.topics import ReplicationMode
from conveyor.dispatch.acktracker import backlog
from conveyor.dispatch.ackcodec import decode
from conveyor.dispatch.errors import AckMetadataError
from conveyor.pipeline.audit import audit_lake
from conveyor.pipeline.errors import spark_failures
from conveyor.pipeline.kafka_source import source_cluster
from conveyor.pipeline.realtime.plan import is_counter
from conveyor.pipeline.realtime.rejects import reject_fields
from conveyor.pipeline.realtime.store import Client
from conveyor.pipeline.tables import data_table, quarantine_table, table_exists
from conveyor.positions import group_name
from conveyor.replicate.plan import route_topic
from conveyor.topics.contracts import compile_contract
from conveyor.verify.checks import (SAMPLE, AuditCheck, DispatchCheck, Invariant, LakeOnce, Result, Skipped,
                                    partition_backlog)
from conveyor.verify.copies import ORIGIN_HEADER, compare_copies, digest, parse_gap, parse_origin
from conveyor.verify.errors import SinkReadError
from conveyor.verify.views import (SourceRecord, TopicRead, ViewCheck, compare_view, json_value, key_pattern,
                                   read_topic, recount)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_TIMEOUT = 30.0
#: The views job's rejects: (view, or None for every view of the topic; topic) -> {(partition, offset): kind}.
Rejected = Mapping[tuple[str | None, str], Mapping[tuple[int, int], str]]


# --- 1. lake exactly once ----------------------------------------------------------------------


def _sample(rows: DataFrame) -> tuple[str, ...]:
    return tuple(sorted(r.event_id for r in rows.limit(SAMPLE).collect()))


def _event_id(value: bytes | None) -> str | None:
    event = json_value(value)
    found = event.get("event_id") if isinstance(event, dict) else None
    return found if isinstance(found, str) else None


def _against_source(spark: SparkSession, platform: Platform, topic: str, rows: DataFrame) -> dict[str, Any]:
    """The topic's committed records on the source cluster (read here, not by the lake's code)
    against the table's rows and its quarantine, by their Kafka coordinates: each record landed,
    quarantined, or dropped as a copy of an event id landed; each row within the source's
    retention one of its records."""
    cluster = source_cluster(platform)
    ranges = _offsets(platform, cluster, topic)
    records = [(m.partition(), m.offset(), _event_id(m.value())) for m in _read(platform, cluster, topic, ranges)]
    source = spark.createDataFrame(records, "kafka_partition int, kafka_offset bigint, event_id string").cache()
    coordinates = ["kafka_partition", "kafka_offset"]
    accounted = rows.select(*coordinates)
    if table_exists(spark, quarantine_table(topic)):
        accounted = accounted.unionByName(spark.table(quarantine_table(topic)).select(*coordinates))
    unlanded = (source.join(accounted, coordinates, "left_anti")
                .join(rows.select("event_id").distinct(), "event_id", "left_anti").cache())
    bounds = spark.createDataFrame([(p, low, end) for p, (low, end) in ranges.items()],
                                   "kafka_partition int, low bigint, end bigint")
    within = rows.join(bounds, "kafka_partition").where("kafka_offset >= low AND kafka_offset < end")
    foreign = within.select(*coordinates).join(source, coordinates, "left_anti").cache()

    def at(frame: DataFrame) -> tuple[str, ...]:
        return tuple(f"{topic}[{r.kafka_partition}]@{r.kafka_offset}" for r in
                     frame.orderBy(*coordinates).limit(SAMPLE).collect())

    try:
        return {"source": len(records), "unlanded": unlanded.count(), "unlanded_at": at(unlanded),
                "foreign": foreign.count(), "foreign_at": at(foreign)}
    finally:
        for frame in (source, unlanded, foreign):
            frame.unpersist()


def lake_once(spark: SparkSession, platform: Platform, topic: str, accepted: set[str] | None) -> LakeOnce:
    """The topic's table against itself, against the topic's records on the source cluster and,
    given them, the accepted ids (all compared in Spark)."""
    with spark_failures(f"verify {topic}"):
        if not table_exists(spark, data_table(topic)):
            rows = spark.createDataFrame([], "event_id string, kafka_partition int, kafka_offset bigint")
        else:
            # Read once, then compared six ways: each scan of a lake of small files (an hour's
            # partition per run and late hour) costs a request per file to the object store.
            rows = spark.table(data_table(topic)).select("event_id", "kafka_partition", "kafka_offset").cache()
        try:
            return _lake_once(spark, platform, topic, accepted, rows)
        finally:
            rows.unpersist()


def _lake_once(spark: SparkSession, platform: Platform, topic: str, accepted: set[str] | None,
               rows: DataFrame) -> LakeOnce:
    """:func:`lake_once` on the table's ``rows``."""
    from pyspark.sql.functions import col, count, count_distinct, lit

    ids = rows.select("event_id")
    totals = ids.agg(count(lit(1)).alias("rows"), count_distinct("event_id").alias("distinct")).first()
    duplicated = _sample(ids.groupBy("event_id").count().where(col("count") > 1))
    found = LakeOnce(topic, int(totals["rows"]), int(totals["distinct"]), duplicated,
                     **_against_source(spark, platform, topic, rows))
    if accepted is None:
        return found
    wanted = spark.createDataFrame([(i,) for i in sorted(accepted)], "event_id string")
    landed = ids.distinct()
    missing, unexpected = (wanted.join(landed, "event_id", "left_anti").cache(),
                           landed.join(wanted, "event_id", "left_anti").cache())
    try:
        return replace(found, accepted=len(accepted), missing=missing.count(), missing_ids=_sample(missing),
                       unexpected=unexpected.count(), unexpected_ids=_sample(unexpected))
    finally:
        missing.unpersist()
        unexpected.unpersist()


# --- 2. audit ----------------------------------------------------------------------------------


def audit(spark: SparkSession, platform: Platform) -> AuditCheck:
    return AuditCheck.of(audit_lake(spark, platform))


# --- 3. views equal a recount ------------------------------------------------------------------


def _read(platform: Platform, cluster: str, topic: str, ranges: Mapping[int, tuple[int, int]]) -> Iterator[Message]:
    """The committed records of ``topic`` in each partition's [start, end)."""
    todo = {p: end for p, (start, end) in ranges.items() if end > start}
    if not todo:
        return
    consumer = kafka.consumer(platform, cluster, f"conveyor-verify-{uuid.uuid4().hex[:8]}", "conveyor-verify",
                              {"enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, ranges[p][0]) for p in todo])
        deadline = time.monotonic() + _TIMEOUT
        while todo:
            if time.monotonic() > deadline:
                raise SinkReadError(f"reading {topic} on {cluster}: partitions {sorted(todo)} returned nothing for "
                                    f"{_TIMEOUT:.0f}s before their end offsets")
            messages = consumer.consume(500, 1.0)
            if messages:
                deadline = time.monotonic() + _TIMEOUT
            for message in messages:
                error = message.error()
                # The end of the log: a transaction marker that ends a partition is never returned,
                # so the position alone would stop short of the end offset.
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    todo.pop(message.partition(), None)
                elif error is not None:
                    raise kafka.KafkaOperationError(f"reading {topic} on {cluster}", error)
                elif message.offset() < todo.get(message.partition(), -1):
                    yield message
            for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
                if tp.offset >= todo[tp.partition]:
                    del todo[tp.partition]
    finally:
        consumer.close()


def _offsets(platform: Platform, cluster: str, topic: str) -> dict[int, tuple[int, int]]:
    """Per partition of ``topic``: its earliest offset and last stable offset."""
    admin = kafka.admin(platform, cluster)
    try:
        metadata = admin.list_topics(topic, timeout=_TIMEOUT).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return {}
        found: list[dict[int, int]] = []
        for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
            futures = admin.list_offsets({TopicPartition(topic, p): spec for p in metadata.partitions},
                                         isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=_TIMEOUT)
            found.append({tp.partition: f.result().offset for tp, f in futures.items()})
    except KafkaException as exc:
        raise kafka.KafkaOperationError.from_exception(f"listing offsets of {topic} on {cluster}", exc) from None
    return {p: (found[0][p], found[1][p]) for p in found[0]}


def rejected(platform: Platform) -> Rejected:
    """Every record the views job rejected, by view and source topic, from its side output: its kind."""
    cluster, topic = source_cluster(platform), platform.pipeline.realtime.rejects_topic
    found: dict[tuple[str | None, str], dict[tuple[int, int], str]] = defaultdict(dict)
    for message in _read(platform, cluster, topic, _offsets(platform, cluster, topic)):
        fields = reject_fields(message.headers())
        if fields.get("partition", "").isdigit() and fields.get("offset", "").isdigit():
            coordinates = (int(fields["partition"]), int(fields["offset"]))
            found[(fields.get("view"), fields.get("topic", ""))][coordinates] = fields.get("kind", "")
    return dict(found)


def view_topic(platform: Platform, topic: str, since_ms: int) -> TopicRead | None:
    """The view topic's records on the source cluster whose events may fall in a window from
    ``since_ms`` on (an event is at most the future tolerance ahead of its Kafka timestamp); None
    when the topic does not exist there."""
    cluster = source_cluster(platform)
    ranges = _offsets(platform, cluster, topic)
    if not ranges:
        return None
    tolerance_ms = round(platform.pipeline.realtime.future_tolerance * 1000)
    starts = _offsets_at(platform, cluster, topic, since_ms - tolerance_ms, ranges)
    records = (SourceRecord(m.partition(), m.offset(), m.timestamp()[1], m.value())
               for m in _read(platform, cluster, topic, {p: (starts[p], end) for p, (_, end) in ranges.items()}))
    return read_topic(records, compile_contract(topic, read_contract(platform, topic)), tolerance_ms)


def _offsets_at(platform: Platform, cluster: str, topic: str, since_ms: int,
                ranges: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Per partition, the first offset whose timestamp is ``since_ms`` or later (its end if none)."""
    consumer = kafka.consumer(platform, cluster, f"conveyor-verify-{uuid.uuid4().hex[:8]}", "conveyor-verify")
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, p, max(since_ms, 0)) for p in ranges],
                                           timeout=_TIMEOUT)
    except KafkaException as exc:
        raise kafka.KafkaOperationError.from_exception(f"looking up {topic} on {cluster} by time", exc) from None
    finally:
        consumer.close()
    return {tp.partition: ranges[tp.partition][1] if tp.offset < 0 else max(tp.offset, ranges[tp.partition][0])
            for tp in found}


def held(client: Client, view: str, layout: str) -> dict[str, dict[str, int]]:
    """Every key of the view in Redis and its counters (the job's fences left out)."""
    keys = sorted(client.scan_iter(match=key_pattern(view, layout), count=1000))
    found: dict[str, dict[str, int]] = {}
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        pipe = client.pipeline(transaction=False)
        for key in chunk:
            pipe.hgetall(key)
        for key, fields in zip(chunk, pipe.execute(), strict=True):
            if fields:  # expired since the scan
                found[key] = {name: int(value) for name, value in fields.items() if is_counter(name)}
    return found


def since(view: RealtimeView, now: datetime) -> int:
    """The first window surely within the view's ttl: a key lives ttl seconds from its last write,
    and no event is written before its window starts, so from one window after now - ttl on, every
    window's key is still there if it was ever written."""
    window_ms, now_ms = round(view.window * 1000), int(now.timestamp() * 1000)
    oldest = now_ms - math.ceil(view.ttl) * 1000
    return oldest - oldest % window_ms + window_ms


def view_check(client: Client, name: str, view: RealtimeView, read: TopicRead | None, rejects: Rejected,
               since_ms: int, newest_ms: int | None = None) -> ViewCheck | Skipped:
    """The view's windows from ``since_ms`` on against verify's recount of its topic; ``newest_ms``:
    the newest event time of every views' topic (a job's watermark follows all of its topics)."""
    if read is None:
        return Skipped(Invariant.views, name, f"its topic {view.topic} does not exist on the source cluster")
    # A reject without a view (malformed, future) was left out of every view of its topic.
    kinds = {**rejects.get((None, view.topic), {}), **rejects.get((name, view.topic), {})}
    counted = recount(name, view, read, kinds, since_ms, newest_ms)
    return compare_view(name, view.key_layout, since_ms, held(client, name, view.key_layout), counted)


# --- 4. every source record copied once ------------------------------------------------------


def _source_topics(platform: Platform, route: str) -> list[str]:
    """The topics of the route's source that it copies (named, requested, or matched by pattern)."""
    source = platform.routes[route].source
    try:
        listed = kafka.admin(platform, source).list_topics(timeout=_TIMEOUT).topics
    except KafkaException as exc:
        raise kafka.KafkaOperationError.from_exception(f"listing the topics of {source}", exc) from None
    return sorted(t for t in listed if not t.startswith("__") and platform.copies(route, t))


def _gaps(platform: Platform, route: str) -> dict[str, list[tuple[int, int, int]]]:
    """Per topic, the (partition, first, last) the route topic records as lost to retention."""
    destination, topic = platform.routes[route].destination, route_topic(route)
    found: dict[str, set[tuple[int, int, int]]] = defaultdict(set)
    for message in _read(platform, destination, topic, _offsets(platform, destination, topic)):
        gap = parse_gap(message.value() or b"")
        if gap is not None:
            found[gap[0]].add(gap[1:])
    return {t: sorted(g) for t, g in found.items()}


def copies(platform: Platform) -> list[Result]:
    """Each route's topics: every committed source record against its copies on the destination,
    the sources read first (a copy of a record written since is past the source's end)."""
    if not platform.routes:
        return [Skipped(Invariant.replication, "", "platform.yaml declares no route")]
    results: list[Result] = []
    by_destination: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for route in sorted(platform.routes):
        for topic in _source_topics(platform, route):
            by_destination[(platform.routes[route].destination, topic)].append((route, topic))
    if not by_destination:
        return [Skipped(Invariant.replication, "", "no route's source holds a topic the route copies")]
    gaps = {route: _gaps(platform, route) for route in platform.routes}
    for (destination, topic), routes in sorted(by_destination.items()):
        sources = {}
        for route, _ in routes:
            cluster = platform.routes[route].source
            ranges = _offsets(platform, cluster, topic)
            sources[route] = ranges, {(m.partition(), m.offset()): digest(m.key(), m.value())
                                      for m in _read(platform, cluster, topic, ranges)}
        found: dict[tuple[str, int, int], list[bytes]] = defaultdict(list)
        for message in _read(platform, destination, topic, _offsets(platform, destination, topic)):
            origin = next((parse_origin(v) for k, v in message.headers() or [] if k == ORIGIN_HEADER and v), None)
            if origin is not None and origin[1] == topic:
                found[(origin[0], origin[2], origin[3])].append(digest(message.key(), message.value()))
        for route, _ in routes:
            cluster = platform.routes[route].source
            ranges, source = sources[route]
            copied = {(p, o): d for (c, p, o), d in found.items() if c == cluster}
            exact = platform.copy_mode(route, topic) is ReplicationMode.exactly_once
            results.append(compare_copies(f"{route}: {topic}", topic, exact, source, ranges, copied,
                                          gaps[route].get(topic, [])))
    return results


# --- 5. every dispatched message acked ---------------------------------------------------------


def dispatch_check(platform: Platform, topic: str, group: str) -> DispatchCheck:
    """The group's commits on the cluster the dispatcher reads. The classic backend commits in the
    group itself, with the acks above the committed offset in the metadata; the share backend's
    broker state reaches Kafka's commits only through its position feed (conveyor.positions)."""
    from conveyor.dispatch.server import dispatch_cluster

    cluster = dispatch_cluster(platform)
    classic = platform.dispatch.backend == "classic"
    kafka_group = group if classic else group_name("dispatch", group)
    offsets = _offsets(platform, cluster, topic)
    if not offsets:
        raise SinkReadError(f"topic {topic} does not exist on cluster {cluster}")
    try:
        commits = kafka.committed(platform, cluster, kafka_group, [TopicPartition(topic, p) for p in sorted(offsets)],
                                  timeout=_TIMEOUT)
    except KafkaException as exc:
        raise kafka.KafkaOperationError.from_exception(f"reading the commits of {kafka_group}", exc) from None
    partitions = []
    for tp in sorted(commits, key=lambda tp: tp.partition):
        start, end = offsets[tp.partition]
        committed = tp.offset if tp.offset >= 0 else None
        acked = _acked(tp.metadata, committed) if classic else ()
        base = start if committed is None else committed
        records: list[int] = []
        if backlog(end, base, len(acked)):
            records = [m.offset() for m in _read(platform, cluster, topic, {tp.partition: (base, end)})]
        partitions.append(partition_backlog(tp.partition, committed, end, acked, records))
    return DispatchCheck(topic, group, kafka_group, tuple(partitions))


def _acked(metadata: str | None, committed: int | None) -> tuple[int, ...]:
    """The acks above ``committed`` the dispatcher recorded with it; none when they were written for
    another offset or cannot be read (the dispatcher itself then delivers them again)."""
    try:
        recorded = decode(metadata or "")
    except AckMetadataError:
        return ()
    return recorded.acked if recorded.base == committed else ()
