"""Copies one bucket of a route: its source partitions into the destination, exactly once.

One transactional producer per bucket, its ``transactional.id`` derived from route and bucket:
``init_transactions`` on taking the bucket aborts whatever a previous owner left open and fences
it, so a zombie worker can never commit again. Each transaction holds the copied records and the
next source offset of every partition they came from, written to the bucket's partition of the
route topic; a new owner reads those back (read_committed) and resumes exactly there.

Nothing is skipped without a record. A partition the bucket starts copying gets its earliest offset
stored first, so every offset from then on is either copied or accounted for; and when the source's
retention deletes offsets before they are copied ("offset out of range", which the source consumer
reports instead of resetting), the gap is written to the route topic in the transaction that moves
the partition's offset past it, and copying resumes at the earliest offset.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from conveyor import kafka
from conveyor.config import Platform, ReplicationMode, Route
from conveyor.limits import PRODUCER_MESSAGE_MAX
from conveyor.positions import PositionFeed, group_name
from conveyor.replicate import plan
from conveyor.replicate.bookkeeping import read_bucket
from conveyor.replicate.errors import FENCE_CODES, CopyFailure, Fenced
from conveyor.replicate.metrics import ReplicateMetrics
from conveyor.replicate.plan import SourcePartition
from conveyor.replicate.topic_configs import COPY_BATCH_BYTES

log = logging.getLogger(__name__)
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}
_TIMEOUT = 60.0
#: Partitions named in the log line of a bucket's new partitions (a takeover can bring thousands).
_LOGGED_STARTS = 20
#: Seconds before the earliest offsets of new partitions are asked again after a failure.
_START_RETRY = 1.0
#: At most one commit to the route's monitoring group this often per bucket (ops samples every 5 s).
_FEED_INTERVAL = 2.0


@dataclass
class RouteState:
    """What every copier of a worker shares, kept current by the worker's discovery loop."""

    platform: Platform
    name: str
    route: Route
    worker_id: str
    metrics: ReplicateMetrics
    #: Partition counts per topic on the source and on the destination.
    source_counts: dict[str, int] = field(default_factory=dict)
    destination_counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bucket_partitions(self, bucket: int) -> set[SourcePartition]:
        with self.lock:
            ready = {t: n for t, n in self.source_counts.items() if self.destination_counts.get(t, 0) > 0}
        return plan.partitions_by_bucket(ready, self.route.buckets)[bucket]


def read_bucket_offsets(state: RouteState, bucket: int) -> dict[SourcePartition, int]:
    """The committed next offsets of a bucket's partitions (read_committed, to the end)."""
    return read_bucket(state.platform, state.name, state.route.destination, state.worker_id, bucket).offsets


class BucketCopier(threading.Thread):
    def __init__(self, state: RouteState, bucket: int) -> None:
        super().__init__(name=f"copy-{state.name}-{bucket}", daemon=True)
        self.state = state
        self.bucket = bucket
        self.next: dict[SourcePartition, int] = {}
        self.stopped: dict[SourcePartition, str] = {}
        self._assigned: set[SourcePartition] = set()
        self._stopping = threading.Event()
        self._last_copy: dict[SourcePartition, float] = {}
        self._had_backlog: dict[SourcePartition, bool] = {}
        self._lag_checked = 0.0
        self._starts_retry_at = 0.0
        #: Earliest offsets asked of the source for new partitions, not answered yet.
        self._asked_starts: dict[TopicPartition, Future] | None = None
        self._exactly_once = state.route.mode == ReplicationMode.exactly_once
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._stopping.set()

    # -- life ----------------------------------------------------------------------------------

    def run(self) -> None:
        while not self._stopping.is_set() and self._run_producer():
            self.state.metrics.errors.labels(self.state.name, "producer-restart").inc()

    def _run_producer(self) -> bool:
        """Copy with one producer until stopped; True when its state failed and a new one must take
        the bucket over."""
        route, name = self.state.route, self.state.name
        self._assigned, self._asked_starts = set(), None  # a new consumer starts with nothing assigned
        exactly_once = self._exactly_once
        # One request in flight: with several, librdkafka reports a batch that a just-created
        # partition's leader refused (NOT_LEADER, not written) as delivered when the next batch
        # succeeds ("implicitly acked"); the test's own producer lost events that way
        # (docs/replicate.md, "One request in flight"). It costs nothing measurable in records per
        # CPU-second (bench.replicate_vs_mm2).
        # message.max.bytes as every producer on the path has it: the gateway keeps room in it for
        # the origin header (conveyor.limits), so any event it accepted can be copied.
        overrides = {"linger.ms": 5, "batch.size": COPY_BATCH_BYTES, "max.in.flight.requests.per.connection": 1,
                     "message.max.bytes": PRODUCER_MESSAGE_MAX, "client.id": f"{self.state.worker_id}-b{self.bucket}"}
        if exactly_once:
            overrides |= {"transactional.id": plan.transactional_id(name, self.bucket),
                          "transaction.timeout.ms": 60_000, "message.timeout.ms": 30_000}
        self.producer = Producer(kafka.producer_config(self.state.platform, route.destination,
                                                       overrides["client.id"], overrides))
        self.consumer: Consumer | None = None
        owned = False
        try:
            if not self._take_over(exactly_once):
                return
            # librdkafka's own fetch wait (500 ms): a fetch returns as soon as a record arrives, so
            # the wait only paces idle polling. At 50 ms, two workers' idle copiers sent about 240
            # fetches a second to each source, and the brokers' CPU that took showed up as pauses.
            # auto.offset.reset "error", not a reset: offsets retention deleted before they were
            # copied are a gap to record (_past_deleted), never a silent jump to the earliest offset.
            self.consumer = kafka.consumer(self.state.platform, route.source, f"{plan.group_id(name)}-source",
                                           overrides["client.id"], {"auto.offset.reset": "error"})
            self.source_admin = kafka.admin(self.state.platform, route.source)
            self.feed = PositionFeed(self.state.platform, route.source, group_name("replicate", name), "route topic",
                                     _FEED_INTERVAL, self.state.metrics.registry, self.source_admin,
                                     client_ids=[overrides["client.id"]])
            self.state.metrics.buckets_owned.labels(name, self.state.worker_id).inc()
            owned = True
            log.info("bucket %d of %s: taken over with %d stored offsets", self.bucket, name, len(self.next))
            while not self._stopping.is_set():
                self._sync_assignment()
                messages = self.consumer.consume(route.batch_records, route.batch_wait)
                batch, out_of_range = self._sort(messages)
                rewound = self._copy(batch, exactly_once) if batch else set()
                # A partition a failed batch rewound fetches from its offset again and fails again there.
                out_of_range = {p: at for p, at in out_of_range.items() if p not in rewound and p in self._assigned}
                if out_of_range:
                    self._past_deleted(out_of_range)
                self._measure_lag()
                if self.feed.due():
                    self.feed.publish(self._positions())
        except Fenced as fence:
            if not fence.by_newer_owner:
                log.warning("bucket %d of %s: producer failed (%s); taking the bucket over again", self.bucket,
                            name, fence)
                return True
            log.warning("bucket %d of %s: fenced by a newer owner; stopping", self.bucket, name)
        except BaseException as err:  # surfaced by the worker, which exits non-zero
            self.error = err
            log.exception("bucket %d of %s failed", self.bucket, name)
        finally:
            if owned:
                self.state.metrics.buckets_owned.labels(name, self.state.worker_id).dec()
                self.feed.publish_and_wait(self._positions(), attempts=1)  # the last one, not throttled
            if self.consumer is not None:
                self.consumer.close()
                self.consumer = None
            try:
                self.producer.flush(10)
            except KafkaException:  # a fatal producer has nothing left to deliver
                pass
        return False

    def _positions(self) -> dict[tuple[str, int], int]:
        return {(source.topic, source.partition): offset for source, offset in self.next.items()}

    def _take_over(self, exactly_once: bool) -> bool:
        """Fence the previous owner and read the bucket's offsets, retrying while the destination
        does not answer; False when asked to stop first."""
        backoff = 1.0
        while not self._stopping.is_set():
            try:
                if exactly_once:
                    self.producer.init_transactions(_TIMEOUT)
                self.next = read_bucket_offsets(self.state, self.bucket)
                return True
            except (KafkaException, TimeoutError) as err:
                error = err.args[0] if isinstance(err, KafkaException) and err.args else None
                if isinstance(error, KafkaError) and error.fatal():
                    raise Fenced(error) from err
                log.warning("bucket %d of %s: takeover retried in %.0f s (%s)", self.bucket, self.state.name,
                            backoff, err)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 30.0)
        return False

    def _sync_assignment(self) -> None:
        assert self.consumer is not None
        wanted = self.state.bucket_partitions(self.bucket) - set(self.stopped)
        new = wanted - self._assigned
        unknown = {p for p in new if p not in self.next}
        if unknown:
            self._store_starts(unknown)
            new = {p for p in new if p in self.next}
        if new:
            starts = [TopicPartition(p.topic, p.partition, self.next[p]) for p in sorted(
                new, key=lambda p: (p.topic, p.partition))]
            self.consumer.incremental_assign(starts)
            shown = ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in starts[:_LOGGED_STARTS])
            more = f" and {len(starts) - _LOGGED_STARTS} more" if len(starts) > _LOGGED_STARTS else ""
            log.info("bucket %d of %s: copying %s%s", self.bucket, self.state.name, shown, more)
            self._assigned |= new
            for p in new:
                self._last_copy.setdefault(p, time.monotonic())

    def _store_starts(self, partitions: set[SourcePartition]) -> None:
        """Store the earliest offset of partitions the route has no offset for, before copying them:
        offsets retention deletes from then on, even while no worker runs, are then a recorded gap.
        Asked without waiting, since a partition too new to have a leader can hold the answer back
        and the bucket's other partitions must go on copying meanwhile; stored on a later round."""
        now = time.monotonic()
        if self._asked_starts is None:
            if now >= self._starts_retry_at:
                self._asked_starts = self.source_admin.list_offsets(
                    {TopicPartition(p.topic, p.partition): OffsetSpec.earliest() for p in partitions},
                    request_timeout=_TIMEOUT)
            return
        if not all(future.done() for future in self._asked_starts.values()):
            return
        asked, self._asked_starts = self._asked_starts, None
        try:
            earliest = {SourcePartition(tp.topic, tp.partition): f.result().offset for tp, f in asked.items()}
        except KafkaException as exc:  # no leader yet, a source away: asked again
            log.info("%s bucket %d: earliest offsets of %d new partition(s) not known yet (%s)", self.state.name,
                     self.bucket, len(asked), exc.args[0].str() if exc.args else exc)
            self._starts_retry_at = now + _START_RETRY
            return
        # Partitions the bucket lost meanwhile (a partition never shrinks, but a topic can go) are left.
        earliest = {p: offset for p, offset in earliest.items() if p in partitions}
        records = [plan.offset_record(p.topic, p.partition, offset) for p, offset in earliest.items()]
        if records and not self._store(records):
            self._starts_retry_at = now + _START_RETRY
            return
        self.next.update(earliest)

    def _sort(self, messages: list[Message]) -> tuple[list[Message], dict[SourcePartition, int]]:
        """The records to copy, and the partitions whose fetch position retention (or a truncation) has
        put out of range, each with that position."""
        batch, out_of_range = [], {}
        for message in messages:
            error = message.error()
            if error is None:
                batch.append(message)
            elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                out_of_range[SourcePartition(message.topic(), message.partition())] = message.offset()
            elif error.code() != KafkaError._PARTITION_EOF:
                self.state.metrics.errors.labels(self.state.name, "source").inc()
                log.warning("%s: source error on %s[%s]: %s", self.state.name, message.topic(), message.partition(),
                            error.str())
        return batch, out_of_range

    def _past_deleted(self, out_of_range: dict[SourcePartition, int]) -> None:
        """Record the offsets retention deleted before they were copied, then go on from the earliest.
        The gap and the partition's new offset are committed together: killed before, the next
        owner finds the same gap again; after, it resumes past it."""
        assert self.consumer is not None
        state = self.state
        for source, at in sorted(out_of_range.items(), key=lambda item: (item[0].topic, item[0].partition)):
            position = self.next.get(source, at)
            try:
                low, high = self.consumer.get_watermark_offsets(TopicPartition(source.topic, source.partition),
                                                                timeout=_TIMEOUT)
            except KafkaException as exc:
                log.warning("%s: %s[%d] out of range at %d, and its offsets cannot be read now (%s); tried again",
                            state.name, source.topic, source.partition, position, exc)
                self._reposition(source, position)
                continue
            resume = plan.after_out_of_range(source, position, low, high)
            if resume.gap is not None:
                gap = replace(resume.gap, found_ms=int(time.time() * 1000))
                records = [plan.gap_record(gap), plan.offset_record(source.topic, source.partition, resume.offset)]
                if not self._store(records):
                    self._reposition(source, position)  # fails the same way again, and is retried
                    continue
                self.next[source] = resume.offset
                state.metrics.gaps.labels(state.name, source.topic).inc()
                state.metrics.gap_records.labels(state.name, source.topic).inc(gap.count)
                log.error("%s: DATA LOST: %s[%d] offsets %d..%d (%d records) were deleted by the source's "
                          "retention before they were copied; recorded in %s, copying resumes at %d",
                          state.name, source.topic, source.partition, gap.first, gap.last, gap.count,
                          plan.route_topic(state.name), resume.offset)
            elif resume.truncated:
                state.metrics.errors.labels(state.name, "truncated").inc()
                log.warning("%s: %s[%d] offset %d is beyond the source's end %d (a truncated log or a topic created "
                            "again); copying again from its earliest offset %d", state.name, source.topic,
                            source.partition, position, high, low)
            self._reposition(source, resume.offset)

    def _reposition(self, source: SourcePartition, offset: int) -> None:
        """Fetch ``source`` from ``offset`` next."""
        assert self.consumer is not None
        tp = TopicPartition(source.topic, source.partition, offset)
        try:
            self.consumer.seek(tp)
        except KafkaException:
            # After "offset out of range" librdkafka stops fetching the partition and refuses a seek
            # (_STATE) until it is assigned again.
            self.consumer.incremental_unassign([TopicPartition(source.topic, source.partition)])
            self.consumer.incremental_assign([tp])

    # -- copying -------------------------------------------------------------------------------

    def _copy(self, batch: list[Message], exactly_once: bool) -> set[SourcePartition]:
        """Copy a batch; the partitions rewound to their committed offsets when it failed."""
        state, producer = self.state, self.producer
        with state.lock:
            source_counts, destination_counts = dict(state.source_counts), dict(state.destination_counts)
        failures: list[CopyFailure] = []
        # Every partition of the batch, even those after a produce that raised, is rewound on failure:
        # the consumer's position is already past all of them.
        first: dict[SourcePartition, int] = {}
        for message in batch:
            first.setdefault(SourcePartition(message.topic(), message.partition()), message.offset())
        touched: dict[SourcePartition, int] = {}
        if exactly_once:
            producer.begin_transaction()
        for message in batch:
            source = SourcePartition(message.topic(), message.partition())
            target = plan.destination_partition(source.partition, source_counts.get(source.topic, 0),
                                                destination_counts.get(source.topic, 0))
            headers = [*(message.headers() or []),
                       (plan.ORIGIN_HEADER, plan.origin(state.route.source, source.topic, source.partition,
                                                        message.offset()))]
            extra = {"partition": target} if target is not None else {}
            try:
                self._produce(source.topic, message.value(), message.key(), headers=headers,
                              timestamp=message.timestamp()[1],
                              on_delivery=functools.partial(_collect, failures, source, message.offset()), **extra)
            except KafkaException as exc:
                failures.append(CopyFailure(exc.args[0], source, message.offset()))
                break
            touched[source] = message.offset() + 1
        if not failures and not exactly_once:
            # At least once: the copies are on the destination before the offsets that pass them are
            # written. In one flush, a worker killed mid-way could leave the offsets without the copies.
            failures += self._flushed()
        if not failures:
            for source, next_offset in touched.items():
                key, value = plan.offset_record(source.topic, source.partition, next_offset)
                self._produce(plan.route_topic(state.name), value, key, partition=self.bucket)
            failures += self._finish(exactly_once)
        if failures:
            self._undo(exactly_once, first, failures)
            return set(first)
        now = time.monotonic()
        self.next.update(touched)
        for message in batch:
            state.metrics.copied(state.name, message, now)
        for source in touched:
            if self._had_backlog.get(source):
                state.metrics.pause(state.name, source, now - self._last_copy.get(source, now))
            self._last_copy[source] = now
        return set()

    def _store(self, records: list[tuple[bytes, bytes]]) -> bool:
        """Write records of the bucket's partition of the route topic on their own (in a transaction
        of their own when exactly once); False when they were not written."""
        failures: list[CopyFailure] = []
        if self._exactly_once:
            self.producer.begin_transaction()
        for key, value in records:
            self._produce(plan.route_topic(self.state.name), value, key, partition=self.bucket,
                          on_delivery=functools.partial(_collect, failures, None, None))
        failures += self._finish(self._exactly_once)
        if failures:
            if self._exactly_once:
                self._abort()
            self.state.metrics.errors.labels(self.state.name, "aborted").inc()
            log.warning("%s bucket %d: bookkeeping records not written (%s); tried again", self.state.name,
                        self.bucket, "; ".join(sorted({f.error.str() for f in failures})))
            self._stopping.wait(0.2)
            return False
        return True

    def _produce(self, topic: str, value, key, **kwargs) -> None:
        while True:
            try:
                self.producer.produce(topic, value, key, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.05)

    def _flushed(self) -> list[CopyFailure]:
        """Wait for every delivery (failed ones reach the batch's failures through ``_collect``); a
        failure if some are still undelivered."""
        left = self.producer.flush(_TIMEOUT)
        return [CopyFailure(KafkaError(KafkaError._TIMED_OUT))] if left else []

    def _finish(self, exactly_once: bool) -> list[CopyFailure]:
        """Commit the transaction (or flush); the failures that make it void, if any."""
        if not exactly_once:
            return self._flushed()
        while True:
            try:
                self.producer.commit_transaction(_TIMEOUT)
                return []
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.fatal() or error.code() in FENCE_CODES:
                    raise Fenced(error) from exc
                if error.txn_requires_abort():
                    return [CopyFailure(error)]
                if not error.retriable():
                    raise
                self.state.metrics.errors.labels(self.state.name, "commit-retry").inc()
                log.warning("%s bucket %d: commit retried (%s)", self.state.name, self.bucket, error.str())
                time.sleep(1.0)

    def _abort(self) -> None:
        try:
            self.producer.abort_transaction(_TIMEOUT)
        except KafkaException as exc:
            if exc.args[0].fatal():
                raise Fenced(exc.args[0]) from exc
            raise

    def _undo(self, exactly_once: bool, first: dict[SourcePartition, int], failures: list[CopyFailure]) -> None:
        """Abort, rewind every partition of the batch to its last committed offset, and stop a
        partition whose record the destination can never take (nothing is skipped)."""
        assert self.consumer is not None
        if exactly_once:
            self._abort()
        rewound = {source: self.next.get(source, offset) for source, offset in first.items()}
        for source, offset in rewound.items():
            self._reposition(source, offset)
        log.warning("%s bucket %d: batch not copied (%s); rewound %s", self.state.name, self.bucket,
                    "; ".join(sorted({f.error.str() for f in failures})),
                    ", ".join(f"{s.topic}[{s.partition}]@{o}" for s, o in rewound.items()))
        for failure in failures:
            source, error = failure.source, failure.error
            if source is not None and error.code() in _TOO_LARGE:
                reason = (f"{source.topic}[{source.partition}] offset {failure.offset}: record too large for "
                          f"{self.state.route.destination} ({error.str()}); this partition is stopped and nothing "
                          "was skipped: raise max.message.bytes of the destination topic, then restart the worker")
                self.stopped[source] = reason
                self.consumer.incremental_unassign([TopicPartition(source.topic, source.partition)])
                self._assigned.discard(source)
                self.state.metrics.stopped.labels(self.state.name, source.topic, str(source.partition)).set(1)
                log.error("%s: %s", self.state.name, reason)
        self.state.metrics.errors.labels(self.state.name, "aborted").inc()
        self._stopping.wait(0.2)

    def _measure_lag(self) -> None:
        now = time.monotonic()
        if now - self._lag_checked < 1.0 or self.consumer is None:
            return
        self._lag_checked = now
        for source in self._assigned:
            _, high = self.consumer.get_watermark_offsets(TopicPartition(source.topic, source.partition),
                                                          cached=True) or (None, -1)
            if high is None or high < 0:
                continue
            lag = max(0, high - self.next.get(source, 0))
            self._had_backlog[source] = lag > 0
            self.state.metrics.lag.labels(self.state.name, source.topic, str(source.partition)).set(lag)


def _collect(failures: list[CopyFailure], source: SourcePartition | None, offset: int | None,
             error: KafkaError | None, _msg: Message) -> None:
    if error is not None:
        failures.append(CopyFailure(error, source, offset))
