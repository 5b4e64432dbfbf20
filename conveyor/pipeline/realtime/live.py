"""The views' work inside Spark's real-time mode (``pipeline.realtime.mode: real-time``), exactly once.

In real-time mode a task reads one Kafka partition and stays up, handing its records to
:func:`write_live` in Arrow batches as they arrive; each batch is parsed, checked, de-duplicated
and summed as a micro-batch is (:class:`~conveyor.pipeline.realtime.deltas.Partial`) and written to
Redis at once. Spark logs a real-time batch's offsets only when it ends, so a replay reads records
written long before, in other Arrow batches: no batch id can fence it. The fence is per partition:

- ``<job>:pos:<topic>:<partition>`` holds ``done`` (every record up to that offset is in the views
  and in the counters beside it, which move with it in one script call), ``pending`` (a span up to
  that offset began writing) and the newest event time the watermarks follow.
- A span of records past ``done`` first sets ``pending`` to its last offset, if ``done`` and
  ``pending`` are still what the task read (else another task writes the partition, and this one
  stops before it writes a key), then writes its keys,
  each carrying ``_at:<topic>:<partition>``: the offset up to which the key holds that partition's
  records (the script skips an entry not past it). Then ``done`` moves to the span's end.
- After a crash, records up to ``done`` are skipped unread; those in ``(done, pending]`` may be in
  some keys and not in others, so they are written record by record, each under its own offset:
  a key that has it skips it, one that has not adds it. Their lateness is decided against the
  watermark the first attempt used (kept with ``pending``), and their event ids are claimed by the
  same records (a claim names its record), so every attempt decides alike.

The watermark is per partition: the newest event time of the partition's committed records, never
past the clock of its commit. Rejects go to the side output from the task, before ``done`` moves
(at least once, as the micro-batch job's).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from functools import lru_cache

import pyarrow as pa

from conveyor.gctune import tune_for_throughput
from conveyor.pipeline.realtime.deltas import BatchPlan, Partial, Row, kafka_rows, latencies
from conveyor.pipeline.realtime.rejects import RejectsOutput
from conveyor.pipeline.realtime.store import Client, EventClaims, RedisTarget, ViewStore, connect_to, state_key
from conveyor.pipeline.worker_path import forget_archives

#: Seconds the diagnostics hash lives past its last write.
DIAGNOSTICS_TTL = 86_400
#: The position hash's own fields; the rest are the exact counters.
POSITION_FIELDS = ("done", "pending", "pending_max", "max_ms", "prev_max_ms")


def position_key(job: str, topic: str, partition: int) -> str:
    return f"{state_key(job)}:pos:{topic}:{partition}"


def diagnostics_key(job: str) -> str:
    """Not exact, for the driver's reports: applied events per latency (``ms:<n>``), keys written,
    keys saturated per view (``saturated:<view>``), records read again after a restart
    (``reread``) and written record by record (``recovered``)."""
    return f"{state_key(job)}:live"


def live_state(client: Client, job: str, partitions: Iterable[tuple[str, int]]) -> \
        tuple[dict[tuple[str, int], Position], Counter[str]]:
    """Each of ``partitions``' position, and the job's exact counters summed over them. (Named, not
    scanned for: a SCAN walks every key, and the claims are millions.)"""
    partitions = list(partitions)
    pipe = client.pipeline(transaction=False)
    for topic, partition in partitions:
        pipe.hgetall(position_key(job, topic, partition))
    positions: dict[tuple[str, int], Position] = {}
    counters: Counter[str] = Counter()
    for at, fields in zip(partitions, pipe.execute(), strict=True):
        if fields:
            positions[at] = Position.of(fields)
            counters.update({k: int(v) for k, v in fields.items() if k not in POSITION_FIELDS})
    return positions, counters


def latency_bucket(ms: int) -> int:
    """A latency rounded down to 1 ms under 1 s, 10 ms under 10 s, else 100 ms: the hash stays small
    over a long run and its quantiles keep two digits."""
    step = 1 if ms < 1000 else 10 if ms < 10_000 else 100
    return ms - ms % step


def fence_field(topic: str, partition: int) -> str:
    return f"_at:{topic}:{partition}"


@dataclass(frozen=True)
class Position:
    #: Every record up to this offset is in the views and the counters (-1: none yet).
    done: int = -1
    #: A span up to this offset began writing: records in (done, pending] may be in some keys only.
    pending: int = -1
    #: The newest event time the span up to ``pending`` decided lateness against.
    pending_max: int | None = None
    #: The newest event time of the records up to ``done``, at most the clock of their commit.
    max_ms: int | None = None

    @classmethod
    def of(cls, fields: Mapping[str, str]) -> Position:
        def number(name: str) -> int | None:
            value = fields.get(name)
            return int(value) if value else None

        return cls(int(fields.get("done") or -1), int(fields.get("pending") or -1), number("pending_max"),
                   number("max_ms"))


@dataclass(frozen=True)
class LiveWork:
    """What a real-time task needs; plain values (it travels to Spark's workers)."""

    #: The views and contracts; each span sets the watermarks.
    plan: BatchPlan
    claims: EventClaims | None
    target: RedisTarget
    job: str
    #: View -> seconds its keys live.
    ttls: Mapping[str, int]
    rejects: RejectsOutput


@lru_cache(maxsize=4)
def _store(target: RedisTarget, job: str) -> ViewStore:
    """One client per Python worker process (Spark reuses workers across tasks)."""
    return ViewStore(connect_to(target), job)


def write_live(batches: Iterator[pa.RecordBatch], work: LiveWork) -> Iterator[pa.RecordBatch]:
    """mapInArrow over Kafka rows (topic, partition, offset, timestamp, key, value): each Arrow
    batch written to the views before the next is read; one row per batch, its record count."""
    tune_for_throughput()
    forget_archives()
    store = _store(work.target, work.job)
    known: dict[tuple[str, int], Position] = {}
    batch_id = _batch_id()
    for batch in batches:
        by_partition: dict[tuple[str, int], list[Row]] = defaultdict(list)
        for row in kafka_rows(batch):
            by_partition[(row[0][0], row[0][1])].append(row)
        for (topic, partition), records in by_partition.items():
            if (topic, partition) not in known:
                known[(topic, partition)] = Position.of(store.client.hgetall(position_key(work.job, topic, partition)))
            known[(topic, partition)] = _write(work, store, batch_id, topic, partition, records,
                                               known[(topic, partition)])
        yield pa.RecordBatch.from_pydict({"records": [batch.num_rows]})


def _batch_id() -> int:
    """The real-time batch the task belongs to, for the rejects' headers (-1 outside Spark)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
    return int(batch) if batch else -1


def _write(work: LiveWork, store: ViewStore, batch_id: int, topic: str, partition: int,
           records: list[Row], position: Position) -> Position:
    fresh = [r for r in records if r[0][2] > position.done]
    unsure = [r for r in fresh if r[0][2] <= position.pending]
    notes = {"reread": len(records) - len(fresh), "recovered": len(unsure)}
    if any(notes.values()):
        pipe = store.client.pipeline(transaction=False)
        _note(pipe, work.job, notes)
        pipe.execute()
    if unsure:
        position = _span(work, store, batch_id, topic, partition, unsure, position, recovering=True)
    if len(fresh) > len(unsure):
        position = _span(work, store, batch_id, topic, partition, fresh[len(unsure):], position, recovering=False)
    return position


def _span(work: LiveWork, store: ViewStore, batch_id: int, topic: str, partition: int,
          records: list[Row], position: Position, recovering: bool) -> Position:
    """Write ``records`` (offsets past ``done``) and move ``done`` to the last of them."""
    last = records[-1][0][2]
    newest = position.pending_max if recovering else position.max_ms
    where = position_key(work.job, topic, partition)
    part = Partial(work.plan.after(newest), work.claims, per_record=recovering)
    for record, kafka_ms, header in records:
        part.add(record, kafka_ms, header)
    part.settle()
    if part.rejects:
        work.rejects.send(batch_id, tuple(part.rejects))
    deltas = part.deltas()
    entries = [(key, offset if recovering else last, work.ttls[view], fields)
               for (view, key, offset), fields in deltas.items()]
    if recovering:  # a key's records in offset order: each applies only past the key's fence
        entries.sort(key=lambda e: e[1])
    # A span's writes may stop half-way (a key chunk each call, slots on several nodes): ``pending``
    # goes first, so a restart knows which records to write one by one. Records written one by one
    # need no claim: a key that holds one skips it, whoever wrote it.
    if not recovering:
        store.begin(where, (position.done, position.pending), last, newest)
    applied = store.write(fence_field(topic, partition), entries)
    written_ms = time.time_ns() // 1_000_000
    horizon = None if part.max_ms is None else min(part.max_ms, written_ms)
    counters = {"records": len(records), "applied": sum(part.times.values()), **part.reject_counts()}
    if part.duplicates:
        counters["duplicates"] = part.duplicates
    pipe = store.client.pipeline(transaction=False)
    store.queue_commit(pipe, where, "done", last, horizon, counters, expected=position.done)
    views = {key: view for view, key, _ in deltas}
    _note(pipe, work.job, {"keys": applied.written,
                           **Counter(f"saturated:{views[key]}" for key in applied.saturated),
                           **{f"ms:{latency_bucket(ms)}": n for ms, n in latencies(part.times, written_ms).items()}})
    pipe.execute()
    # What the commit script keeps: the newer of the two event times.
    newest_done = max((t for t in (position.max_ms, horizon) if t is not None), default=None)
    return Position(last, max(position.pending, last), newest, newest_done)


def _note(pipe: Any, job: str, counts: Mapping[str, int]) -> None:
    key = diagnostics_key(job)
    for name, count in counts.items():
        if count:
            pipe.hincrby(key, name, count)
    pipe.expire(key, DIAGNOSTICS_TTL)
