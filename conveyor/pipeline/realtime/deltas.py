"""A micro-batch of Kafka records to what the views must add, what was rejected and why, and the
event times written. Pure.

``project`` runs in Spark's Python workers over Arrow batches (``mapInArrow``): it parses each
record by the contract version its header names (the lake's
:class:`~conveyor.pipeline.records.RecordParser`; conveyor.pipeline.realtime.contracts),
decides lateness against the watermark the driver fixed for the batch before it ran, and adds
every event into per-key partial sums, so only one row per key, rejected record and distinct
event millisecond leaves a task. ``merge`` (on the driver) adds the tasks' partial sums together.
The same records with the same watermarks always give the same result, which is what lets a
replayed batch reproduce its first attempt exactly.

De-duplication: before counting, a task claims its events' ids through ``claims`` (the job passes
Redis claims, see ``store.EventClaims``; tests pass a dict) and counts an event only at the record
that owns its id. A claim names its record, so a replay finds its own claims and decides as its
first attempt did, and of two copies in one batch the same one counts whichever task ran first.

Sums are exact (Python integers) until the store, which saturates them at the 64-bit bounds of a
Redis counter; a partial sum beyond 64 bits leaves its task as text.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from conveyor.gctune import tune_for_throughput
from conveyor.pipeline.realtime.plan import INT64_MAX, INT64_MIN, ViewPlan, epoch_ms, matches
from conveyor.pipeline.records import RecordParser, VersionText
from conveyor.pipeline.schema import Column
from conveyor.pipeline.worker_path import forget_archives

#: What a task returns, one row per: key field delta, distinct applied event time, rejected record.
#: ``big`` holds a delta beyond 64 bits as decimal text (``value`` is then null).
OUTPUT = pa.schema([
    ("kind", pa.string()), ("view", pa.string()), ("key", pa.string()), ("field", pa.string()),
    ("value", pa.int64()), ("big", pa.string()), ("event_ms", pa.int64()), ("reason", pa.string()),
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("raw_key", pa.binary()),
    ("raw", pa.binary()),
])
OUTPUT_DDL = ("kind string, view string, key string, field string, value bigint, big string, event_ms bigint, "
              "reason string, topic string, partition int, offset bigint, raw_key binary, raw binary")
DELTA, TIME, MAX, RECORDS, REJECT, DUPLICATES = "delta", "time", "max", "records", "reject", "duplicates"
#: The Kafka rows' column of each record's contract header (conveyor.pipeline.kafka_source).
CONTRACT = "contract"


class Claims(Protocol):
    """Claims each event id for the record carrying it (``owners``: ``partition:offset`` in the
    topic; ``times_ms``: the event's time, which its copies share): True where the record owns the
    id (it was free within the window, or this record claimed it before: a replay), False where
    another record did (a duplicate)."""

    def __call__(self, topic: str, event_ids: Sequence[str], owners: Sequence[str],
                 times_ms: Sequence[int]) -> Sequence[bool]: ...


#: How far the clocks of the hosts that stamp records may run ahead of the driver's.
CLOCK_SKEW_MS = 5000


class ContractBehindError(Exception):
    """A real-time task met a record of a contract version registered after its plan was read: the
    driver reads the registry again and starts the query over (conveyor.pipeline.realtime.contracts)."""


@dataclass(frozen=True)
class TopicPlan:
    topic: str
    #: The latest version's text (a record without a contract header is parsed by it).
    schema_text: str
    #: The columns of every version.
    columns: tuple[Column, ...]
    #: Every version the registry held when the plan was read: (number, id, text).
    versions: tuple[VersionText, ...] = ()


@dataclass(frozen=True)
class BatchPlan:
    """Everything a task needs: the topics' contracts, the views, and each view's watermark (epoch
    ms; None before any event was seen) fixed for this batch."""

    topics: tuple[TopicPlan, ...]
    views: tuple[ViewPlan, ...]
    watermarks: tuple[int | None, ...]
    future_tolerance_ms: int
    #: Real-time tasks: when the registry was read (epoch ms); a record of a version the plan lacks
    #: stamped after that (less CLOCK_SKEW_MS) stops the task. None (micro-batches): the registry was
    #: read after every record of the batch was written, so such a record is rejected.
    versions_read_ms: int | None = None

    def after(self, newest_ms: int | None) -> BatchPlan:
        """This plan with each view's watermark following ``newest_ms``, the newest event time seen
        (None: none yet, no watermark)."""
        return replace(self, watermarks=tuple(None if newest_ms is None else newest_ms - v.lateness_ms
                                              for v in self.views))


@dataclass(frozen=True)
class Reject:
    #: malformed, future, incomplete (a group-by field is missing) or late.
    kind: str
    view: str | None
    reason: str
    topic: str
    partition: int
    offset: int
    #: The record's key and value as they came.
    key: bytes | None
    raw: bytes | None


#: A Kafka record's coordinates, key and value: (topic, partition, offset, key, value).
Source = tuple[str, int, int, bytes | None, bytes | None]
#: A Kafka row as the tasks take it: the record, its Kafka timestamp (epoch ms), its contract header.
Row = tuple[Source, int, bytes | None]


class Partial:
    """One task's partial sums. ``per_record``: each record's deltas kept apart, under its offset
    (the real-time mode's recovery, conveyor.pipeline.realtime.live); otherwise under -1."""

    def __init__(self, plan: BatchPlan, claims: Claims | None, per_record: bool = False) -> None:
        self.plan = plan
        self.per_record = per_record
        self.parsers = {t.topic: RecordParser(t.topic, t.schema_text, t.columns, t.versions) for t in plan.topics}
        #: topic -> its views, each with its watermark.
        self.views: dict[str, list[tuple[ViewPlan, int | None]]] = {t.topic: [] for t in plan.topics}
        for view, watermark in zip(plan.views, plan.watermarks, strict=True):
            self.views[view.topic].append((view, watermark))
        self.claims = claims
        #: topic -> events waiting for their ids' claims: (event, event_ms, record).
        self.unclaimed: dict[str, list[tuple[dict[str, Any], int, Source]]] = defaultdict(list)
        #: (view, key, hash field, offset) -> delta.
        self.sums: dict[tuple[str, str, str, int], int] = defaultdict(int)
        self.times: Counter[int] = Counter()
        self.max_ms: int | None = None
        self.rejects: list[Reject] = []
        self.records = 0
        self.duplicates = 0

    def add(self, record: Source, kafka_ms: int, header: bytes | None = None) -> None:
        """``header``: the record's contract header (None: it has none)."""
        topic = record[0]
        parser = self.parsers[topic]
        read_ms = self.plan.versions_read_ms
        if read_ms is not None and kafka_ms > read_ms - CLOCK_SKEW_MS and parser.names_unheld(header):
            raise ContractBehindError(f"{topic} {record[1]}:{record[2]} names contract version {header!r}, "
                                      "registered after the plan was read")
        self.records += 1
        reason, event = parser.event(record[4], header)
        if reason is not None:
            return self._reject("malformed", reason, record)
        event_ms = epoch_ms(event["event_time"])
        if event_ms > kafka_ms + self.plan.future_tolerance_ms:
            return self._reject("future", f"event_time {event['event_time'].isoformat()} is more than "
                                f"{self.plan.future_tolerance_ms / 1000:g}s after the record's Kafka timestamp", record)
        # A copy carries its original's event time: the newest time is the same with or without it.
        self.max_ms = event_ms if self.max_ms is None else max(self.max_ms, event_ms)
        if self.claims is not None and event.get("event_id") is not None:
            self.unclaimed[topic].append((event, event_ms, record))
        else:
            self._apply(record, event, event_ms)

    def settle(self) -> None:
        """Claim the ids of the events added (one call per topic) and count the events owned."""
        for topic, waiting in self.unclaimed.items():
            assert self.claims is not None
            owned = self.claims(topic, [w[0]["event_id"] for w in waiting], [f"{w[2][1]}:{w[2][2]}" for w in waiting],
                                [w[1] for w in waiting])
            for (event, event_ms, record), own in zip(waiting, owned, strict=True):
                if own:
                    self._apply(record, event, event_ms)
                else:
                    self.duplicates += 1
        self.unclaimed.clear()

    def _reject(self, kind: str, why: str, record: Source, view: str | None = None) -> None:
        self.rejects.append(Reject(kind, view, why, *record))

    def _apply(self, record: Source, event: dict[str, Any], event_ms: int) -> None:
        applied = False
        for view, watermark in self.views[record[0]]:
            if not matches(view.filter, event):
                continue
            missing = next((g for g in view.group_by if event.get(g) is None), None)
            if missing is not None:
                self._reject("incomplete", f"group-by field {missing} is missing", record, view.name)
            elif watermark is not None and event_ms < watermark:
                self._reject("late", f"event_time {event['event_time'].isoformat()} is before the view's watermark "
                             f"{datetime.fromtimestamp(watermark / 1000, timezone.utc).isoformat()}",
                             record, view.name)
            else:
                self._count(view, event, event_ms, record[2] if self.per_record else -1)
                applied = True
        if applied:
            self.times[event_ms] += 1

    def _count(self, view: ViewPlan, event: dict[str, Any], event_ms: int, offset: int) -> None:
        key = view.key(event, view.window_start(event_ms))
        suffix = view.field_suffix(event)
        for metric in view.metrics:
            if not metric.where or matches(metric.where, event):
                amount = 1 if metric.sum is None else (event.get(metric.sum) or 0)
                self.sums[(view.name, key, metric.name + suffix, offset)] += amount

    def deltas(self) -> dict[tuple[str, str, int], dict[str, int]]:
        """(view, key, offset) -> {hash field: delta}, in the order the sums were first made."""
        grouped: dict[tuple[str, str, int], dict[str, int]] = {}
        for (view, key, name, offset), value in self.sums.items():
            grouped.setdefault((view, key, offset), {})[name] = value
        return grouped

    def reject_counts(self) -> dict[str, int]:
        """Counter name -> rejects: ``malformed``, ``future``, ``late:<view>``, ``incomplete:<view>``."""
        return _reject_counts(self.rejects)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """One Arrow batch per kind of row, built column by column."""
        if self.sums:
            (views, keys, fields, _), values = zip(*self.sums, strict=True), list(self.sums.values())
            columns: dict[str, list[Any]] = {"view": list(views), "key": list(keys), "field": list(fields)}
            try:
                section = _section(DELTA, **columns, value=values)
            except OverflowError:  # rare: near-limit values in one key; exact as text, added up on the driver
                small = [v if INT64_MIN <= v <= INT64_MAX else None for v in values]
                big = [None if v is not None else str(n) for v, n in zip(small, values, strict=True)]
                section = _section(DELTA, **columns, value=small, big=big)
            yield section
        if self.times:
            yield _section(TIME, event_ms=list(self.times), value=list(self.times.values()))
        yield _section(MAX, value=[self.max_ms])
        yield _section(RECORDS, value=[self.records])
        if self.duplicates:
            yield _section(DUPLICATES, value=[self.duplicates])
        if self.rejects:
            yield _section(REJECT, **{name: [getattr(r, attr) for r in self.rejects] for name, attr in _REJECT_COLUMNS})


_REJECT_COLUMNS = (("field", "kind"), ("view", "view"), ("reason", "reason"), ("topic", "topic"),
                   ("partition", "partition"), ("offset", "offset"), ("raw_key", "key"), ("raw", "raw"))


def _section(kind: str, **columns: list[Any]) -> pa.RecordBatch:
    rows = len(next(iter(columns.values())))
    arrays = [pa.array([kind] * rows, pa.string()) if f.name == "kind"
              else pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(rows, f.type)
              for f in OUTPUT]
    return pa.RecordBatch.from_arrays(arrays, schema=OUTPUT)


def kafka_rows(batch: pa.RecordBatch) -> Iterator[Row]:
    """An Arrow batch of Kafka rows as (record, Kafka timestamp in epoch ms, contract header)."""
    stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()  # microseconds
    headers = batch.column(CONTRACT).to_pylist() if CONTRACT in batch.schema.names else [None] * batch.num_rows
    records = zip(*(batch.column(c).to_pylist() for c in ("topic", "partition", "offset", "key", "value")), strict=True)
    for record, stamp, header in zip(records, stamps, headers, strict=True):
        yield record, stamp // 1000, header


def project(batches: Iterator[pa.RecordBatch], plan: BatchPlan,
            claims: Claims | None = None) -> Iterator[pa.RecordBatch]:
    """For ``mapInArrow`` over Kafka rows (topic, partition, offset, timestamp, key, value, and
    the contract header): one batch of partial sums per task; with ``claims``, each event_id
    counted once."""
    tune_for_throughput()  # the partial sums grow to a dict per key, which the collector would walk again and again
    forget_archives()
    partial = Partial(plan, claims)
    for batch in batches:
        for record, stamp, header in kafka_rows(batch):
            partial.add(record, stamp, header)
    partial.settle()
    yield from partial.batches()


@dataclass(frozen=True)
class BatchResult:
    #: key -> (view, {hash field: delta}).
    deltas: dict[str, tuple[str, dict[str, int]]]
    #: Applied events per event time (epoch ms).
    times: dict[int, int]
    #: Newest event time of the batch's valid events (late ones included), None without one.
    max_ms: int | None
    #: Kafka records read.
    records: int
    rejects: tuple[Reject, ...] = field(default=())
    #: Events not counted: another record owns their event_id (a copy, within the de-dup window).
    duplicates: int = 0

    @property
    def applied(self) -> int:
        return sum(self.times.values())

    def reject_counts(self) -> dict[str, int]:
        """Counter name -> rejects: ``malformed``, ``future``, ``late:<view>``, ``incomplete:<view>``."""
        return _reject_counts(self.rejects)


def _reject_counts(rejects: Iterable[Reject]) -> dict[str, int]:
    return dict(Counter(r.kind if r.view is None else f"{r.kind}:{r.view}" for r in rejects))


def merge(table: pa.Table) -> BatchResult:
    """The tasks' partial results added together."""

    def rows(kind: str) -> pa.Table:
        return table.filter(pc.equal(table["kind"], kind))

    deltas: dict[str, tuple[str, dict[str, int]]] = {}
    part = rows(DELTA)
    values = part["value"].to_pylist()
    if part["big"].null_count < part.num_rows:
        values = [int(b) if b is not None else v for v, b in zip(values, part["big"].to_pylist(), strict=True)]
    for view, key, name, value in zip(*(part[c].to_pylist() for c in ("view", "key", "field")), values, strict=True):
        fields = deltas.setdefault(key, (view, {}))[1]
        fields[name] = fields.get(name, 0) + value
    times: Counter[int] = Counter()
    part = rows(TIME)
    for event_ms, count in zip(part["event_ms"].to_pylist(), part["value"].to_pylist(), strict=True):
        times[event_ms] += count
    max_ms = pc.max(rows(MAX)["value"]).as_py()
    records = pc.sum(rows(RECORDS)["value"]).as_py() or 0
    rejects = sorted((Reject(r["field"], r["view"], r["reason"], r["topic"], r["partition"], r["offset"], r["raw_key"],
                             r["raw"])
                      for r in rows(REJECT).to_pylist()), key=lambda r: (r.topic, r.partition, r.offset, r.view or ""))
    duplicates = pc.sum(rows(DUPLICATES)["value"]).as_py() or 0
    return BatchResult(deltas, dict(times), max_ms, records, tuple(rejects), duplicates)


def latencies(times: Mapping[int, int], written_ms: int) -> Counter[int]:
    """Applied events per latency (ms from event time to ``written_ms``)."""
    return Counter({written_ms - event_ms: count for event_ms, count in times.items()})


def quantiles(counts: Mapping[int, int], wanted: Iterable[float]) -> dict[float, int]:
    """The q-quantiles (nearest rank) of values given as value -> how many times it occurs."""
    total = sum(counts.values())
    if total == 0:
        return {}
    ordered = sorted(counts.items())
    result: dict[float, int] = {}
    for q in wanted:
        rank, seen = max(1.0, q * total), 0
        for value, count in ordered:
            seen += count
            if seen >= rank:
                result[q] = value
                break
    return result
