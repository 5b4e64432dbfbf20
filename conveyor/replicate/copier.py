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

What to do at each turn is decided by the bucket's state machine (conveyor.replicate.bucket_state,
pure and unit-tested); this module does the I/O: clients, transactions, metrics and log lines.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import Future

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from conveyor import kafka
from conveyor.config import ReplicationMode
from conveyor.limits import PRODUCER_MESSAGE_MAX
from conveyor.positions import PositionFeed, group_name
from conveyor.replicate import bucket_state, plan
from conveyor.replicate.bookkeeping import read_bucket
from conveyor.replicate.bucket_state import (
    AFTER_ABORT, AbortBatch, AbortFailed, AskStarts, Assign, AssignFrom, BucketState, CommitFailed, Copied,
    Decision, DropProducer, Event, Fail, Failed, FindStarts, GapStored, LagMeasured, Lags, NotCopied, OutOfRange,
    Pauses, Phase, ProducerLost, RecordGap, RetryCommit, RetryTakeover, Rewind, StartsAnswer, StartsStored,
    StartsUnknown, Stop, StoreStarts, TakenOver, TakeoverFailed, Truncated,
)
from conveyor.replicate.errors import CopyFailure, Fenced, producer_error
from conveyor.replicate.plan import SourcePartition
from conveyor.replicate.route_state import RouteState
from conveyor.replicate.topic_configs import COPY_BATCH_BYTES

log = logging.getLogger(__name__)
_TIMEOUT = 60.0
#: Partitions named in the log line of a bucket's new partitions (a takeover can bring thousands).
_LOGGED_STARTS = 20
#: At most one commit to the route's monitoring group this often per bucket (ops samples every 5 s).
_FEED_INTERVAL = 2.0


class _Source:
    """The source side of one producer's ownership: its consumer, the admin client that asks the
    earliest offsets of new partitions, the position feed, and the earliest offsets asked and not
    answered yet."""

    def __init__(self, shared: RouteState, client_id: str) -> None:
        name = shared.name
        # librdkafka's own fetch wait (500 ms): a fetch returns as soon as a record arrives, so
        # the wait only paces idle polling. At 50 ms, two workers' idle copiers sent about 240
        # fetches a second to each source, and the brokers' CPU that took showed up as pauses.
        # auto.offset.reset "error", not a reset: offsets retention deleted before they were
        # copied are a gap to record (_past_deleted), never a silent jump to the earliest offset.
        self.consumer = kafka.consumer(shared.platform, shared.route.source, f"{plan.group_id(name)}-source",
                                       client_id, {"auto.offset.reset": "error"})
        try:
            self.admin = kafka.admin(shared.platform, shared.route.source)
            self.feed = PositionFeed(shared.platform, shared.route.source, group_name("replicate", name),
                                     "route topic", _FEED_INTERVAL, shared.metrics.registry, client_ids=[client_id])
        except BaseException:  # the copier closes the consumer of a whole _Source only
            self.consumer.close()
            raise
        self.asked: dict[TopicPartition, Future] = {}


class BucketCopier(threading.Thread):
    """Copies the topics of one bucket that are copied in one mode. A bucket whose topics differ in
    delivery has two copiers in its owner, both keeping their offsets in the bucket's partition of
    the route topic (their topics differ, so their records never overlap): a topic whose delivery
    changes is taken up where the other mode left it."""

    def __init__(self, state: RouteState, bucket: int, mode: ReplicationMode,
                 after: BucketCopier | None = None) -> None:
        """``after``: the bucket's exactly-once copier, whose takeover this one waits for."""
        super().__init__(name=f"copy-{state.name}-{bucket}-{mode.value}", daemon=True)
        self.shared = state
        self.bucket = bucket
        self.mode = mode
        self._after = after
        #: Set once the bucket's offsets are read (or the copier ended without).
        self.taken_over = threading.Event()
        self._exactly_once = mode is ReplicationMode.exactly_once
        # The exactly-once copier keeps the client id a bucket had before copiers were per mode.
        self._client_id = f"{state.worker_id}-b{bucket}" + ("" if self._exactly_once else f"-{mode.value}")
        self._stopping = threading.Event()
        #: Replaced by _apply alone, in this copier's thread; the worker reads its failure from its own.
        self._state = BucketState()

    @property
    def error(self) -> BaseException | None:
        """What failed the copier (the worker then exits non-zero)."""
        return self._state.failure

    def stop(self) -> None:
        self._stopping.set()

    def _apply(self, event: Event) -> Decision | None:
        step = bucket_state.step(self._state, event)
        self._state = step.state
        return step.decision

    # -- life ----------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while self._state.phase is Phase.taking_over:
                if self._stopping.is_set():
                    self._apply(Stop())
                else:
                    self._own()
        finally:
            self.taken_over.set()

    def _own(self) -> None:
        """Take the bucket over with a new producer and copy until stopped, fenced or failed; a
        producer whose own state failed leaves the bucket to be taken over again."""
        shared, name = self.shared, self.shared.name
        # One request in flight: with several, librdkafka reports a batch that a just-created
        # partition's leader refused (NOT_LEADER, not written) as delivered when the next batch
        # succeeds ("implicitly acked"); the test's own producer lost events that way
        # (docs/replicate.md, "One request in flight"). It costs nothing measurable in records per
        # CPU-second (bench.replicate_vs_mm2).
        # message.max.bytes as every producer on the path has it: the gateway keeps room in it for
        # the origin header (conveyor.limits), so any event it accepted can be copied.
        overrides = {"linger.ms": 5, "batch.size": COPY_BATCH_BYTES, "max.in.flight.requests.per.connection": 1,
                     "message.max.bytes": PRODUCER_MESSAGE_MAX, "client.id": self._client_id}
        if self._exactly_once:
            overrides |= {"transactional.id": plan.transactional_id(name, self.bucket),
                          "transaction.timeout.ms": 60_000, "message.timeout.ms": 30_000}
        producer = Producer(kafka.producer_config(shared.platform, shared.route.destination, self._client_id,
                                                  overrides))
        source: _Source | None = None
        try:
            if not self._take_over(producer):
                self._apply(Stop())
                return
            source = _Source(shared, self._client_id)
            shared.metrics.buckets_owned.labels(name, shared.worker_id, self.mode.value).inc()
            log.info("bucket %d of %s (%s): taken over with %d stored offsets", self.bucket, name, self.mode.value,
                     len(self._state.next))
            while not self._stopping.is_set():
                self._round(producer, source)
            self._apply(Stop())
        except Fenced as fence:
            self._apply(ProducerLost(fence.by_newer_owner))
            if self._state.phase is Phase.taking_over:
                log.warning("bucket %d of %s: producer failed (%s); taking the bucket over again", self.bucket,
                            name, fence)
                shared.metrics.errors.labels(name, "producer-restart").inc()
            else:
                log.warning("bucket %d of %s: fenced by a newer owner; stopping", self.bucket, name)
        except BaseException as err:  # surfaced by the worker, which exits non-zero
            self._apply(Failed(err))
            log.exception("bucket %d of %s failed", self.bucket, name)
        finally:
            if source is not None:
                shared.metrics.buckets_owned.labels(name, shared.worker_id, self.mode.value).dec()
                source.feed.publish_and_wait(_positions(self._state), attempts=1)  # the last one, not throttled
                source.feed.close()
                source.consumer.close()
            try:
                producer.flush(10)
            except KafkaException:  # a fatal producer has nothing left to deliver
                pass

    def _take_over(self, producer: Producer) -> bool:
        """Fence the previous owner and read the bucket's offsets, retrying while the destination
        does not answer; False when asked to stop first."""
        shared = self.shared
        fenced = not self._exactly_once
        if self._after is not None:
            # A previous owner's open transaction holds read_committed reads of the bucket's partition
            # back, and this copier's latest offsets may lie past it: read once the bucket's
            # exactly-once copier has aborted it, rather than copy again what those offsets passed.
            while not (self._after.taken_over.wait(0.5) or self._stopping.is_set()):
                pass
        while not self._stopping.is_set():
            try:
                # Once only: a second init_transactions on a ready producer fails (_STATE) for good,
                # and the fence it set stands while the bucket's offsets are read again.
                if not fenced:
                    producer.init_transactions(_TIMEOUT)
                    fenced = True
                stored = read_bucket(shared.platform, shared.name, shared.route.destination, self._client_id,
                                     self.bucket).offsets
                self._apply(TakenOver({p: o for p, o in stored.items() if shared.copy_mode(p.topic) is self.mode}))
                self.taken_over.set()
                return True
            except (KafkaException, TimeoutError) as err:
                error = err.args[0] if isinstance(err, KafkaException) and err.args else None
                error = error if isinstance(error, KafkaError) else None
                decision = self._apply(TakeoverFailed(producer_error(error) if error is not None else None))
                if isinstance(decision, DropProducer):
                    raise Fenced(error) from err
                assert isinstance(decision, RetryTakeover)
                log.warning("bucket %d of %s: takeover retried in %.0f s (%s)", self.bucket, shared.name,
                            decision.after, err)
                self._stopping.wait(decision.after)
        return False

    def _round(self, producer: Producer, source: _Source) -> None:
        route = self.shared.route
        self._sync_assignment(producer, source)
        messages = source.consumer.consume(route.batch_records, route.batch_wait)
        batch, out_of_range = self._sort(messages)
        rewound = self._copy(producer, source, batch) if batch else frozenset()
        for partition, at in bucket_state.to_resolve(self._state, out_of_range, rewound):
            self._past_deleted(producer, source, partition, at)
        self._measure_lag(source)
        if source.feed.due():
            source.feed.publish(_positions(self._state))

    def _sync_assignment(self, producer: Producer, source: _Source) -> None:
        """Fetch the bucket's partitions the consumer does not fetch yet, storing the earliest offset
        of those the route has none for first."""
        name = self.shared.name
        wanted = frozenset(self.shared.bucket_partitions(self.bucket, self.mode))
        now = time.monotonic()
        decision = self._apply(FindStarts(wanted, now, _answer(source.asked)))
        if self._state.asked is None:  # answered (or never asked): the futures go with the question
            source.asked.clear()
        if isinstance(decision, AskStarts):
            source.asked.update(source.admin.list_offsets(
                {TopicPartition(p.topic, p.partition): OffsetSpec.earliest() for p in decision.partitions},
                request_timeout=_TIMEOUT))
        elif isinstance(decision, StartsUnknown):
            log.info("%s bucket %d: earliest offsets of %d new partition(s) not known yet (%s)", name,
                     self.bucket, len(decision.partitions), decision.error)
        elif isinstance(decision, StoreStarts):
            records = [plan.offset_record(p.topic, p.partition, offset) for p, offset in decision.earliest.items()]
            stored = not records or self._store(producer, records)
            self._apply(StartsStored(decision.earliest, stored, now))
        decision = self._apply(Assign(wanted, now))
        if isinstance(decision, AssignFrom):
            starts = [TopicPartition(p.topic, p.partition, offset) for p, offset in decision.starts]
            source.consumer.incremental_assign(starts)
            shown = ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in starts[:_LOGGED_STARTS])
            more = f" and {len(starts) - _LOGGED_STARTS} more" if len(starts) > _LOGGED_STARTS else ""
            log.info("bucket %d of %s: copying %s%s", self.bucket, name, shown, more)

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
                self.shared.metrics.errors.labels(self.shared.name, "source").inc()
                log.warning("%s: source error on %s[%s]: %s", self.shared.name, message.topic(),
                            message.partition(), error.str())
        return batch, out_of_range

    def _past_deleted(self, producer: Producer, source: _Source, partition: SourcePartition, at: int) -> None:
        """Record the offsets retention deleted before they were copied, then go on from the earliest.
        The gap and the partition's new offset are committed together: killed before, the next
        owner finds the same gap again; after, it resumes past it."""
        shared = self.shared
        unreadable: KafkaException | None = None
        bounds = None
        try:
            low, high = source.consumer.get_watermark_offsets(TopicPartition(partition.topic, partition.partition),
                                                              timeout=_TIMEOUT)
            bounds = (low, high)
        except KafkaException as exc:
            unreadable = exc
        decision = self._apply(OutOfRange(partition, at, bounds, int(time.time() * 1000)))
        if isinstance(decision, RecordGap):
            gap = decision.gap
            records = [plan.gap_record(gap), plan.offset_record(gap.topic, gap.partition, decision.resume)]
            stored = self._store(producer, records)
            decision = self._apply(GapStored(gap, decision.resume, stored))
            if stored:
                shared.metrics.gaps.labels(shared.name, gap.topic).inc()
                shared.metrics.gap_records.labels(shared.name, gap.topic).inc(gap.count)
                log.error("%s: DATA LOST: %s[%d] offsets %d..%d (%d records) were deleted by the source's "
                          "retention before they were copied; recorded in %s, copying resumes at %d",
                          shared.name, gap.topic, gap.partition, gap.first, gap.last, gap.count,
                          plan.route_topic(shared.name), decision.offset)
        elif isinstance(decision, Truncated):
            shared.metrics.errors.labels(shared.name, "truncated").inc()
            log.warning("%s: %s[%d] offset %d is beyond the source's end %d (a truncated log or a topic created "
                        "again); copying again from its earliest offset %d", shared.name, partition.topic,
                        partition.partition, decision.position, bounds[1], decision.offset)
        elif unreadable is not None:
            log.warning("%s: %s[%d] out of range at %d, and its offsets cannot be read now (%s); tried again",
                        shared.name, partition.topic, partition.partition, decision.offset, unreadable)
        self._reposition(source, partition, decision.offset)

    def _reposition(self, source: _Source, partition: SourcePartition, offset: int) -> None:
        """Fetch ``partition`` from ``offset`` next."""
        tp = TopicPartition(partition.topic, partition.partition, offset)
        try:
            source.consumer.seek(tp)
        except KafkaException:
            # After "offset out of range" librdkafka stops fetching the partition and refuses a seek
            # (_STATE) until it is assigned again.
            source.consumer.incremental_unassign([TopicPartition(partition.topic, partition.partition)])
            source.consumer.incremental_assign([tp])

    # -- copying -------------------------------------------------------------------------------

    def _copy(self, producer: Producer, source: _Source, batch: list[Message]) -> frozenset[SourcePartition]:
        """Copy a batch; the partitions rewound to their committed offsets when it failed."""
        shared = self.shared
        with shared.lock:
            source_counts, destination_counts = dict(shared.source_counts), dict(shared.destination_counts)
        failures: list[CopyFailure] = []
        # Every partition of the batch, even those after a produce that raised, is rewound on failure:
        # the consumer's position is already past all of them.
        first: dict[SourcePartition, int] = {}
        for message in batch:
            first.setdefault(SourcePartition(message.topic(), message.partition()), message.offset())
        touched: dict[SourcePartition, int] = {}
        if self._exactly_once:
            producer.begin_transaction()
        for message in batch:
            partition = SourcePartition(message.topic(), message.partition())
            target = plan.destination_partition(partition.partition, source_counts.get(partition.topic, 0),
                                                destination_counts.get(partition.topic, 0))
            headers = [*(message.headers() or []),
                       (plan.ORIGIN_HEADER, plan.origin(shared.route.source, partition.topic, partition.partition,
                                                        message.offset()))]
            extra = {"partition": target} if target is not None else {}
            try:
                self._produce(producer, partition.topic, message.value(), message.key(), headers=headers,
                              timestamp=message.timestamp()[1],
                              on_delivery=functools.partial(_collect, failures, partition, message.offset()),
                              **extra)
            except KafkaException as exc:
                failures.append(CopyFailure(exc.args[0], partition, message.offset()))
                break
            touched[partition] = message.offset() + 1
        if not failures and not self._exactly_once:
            # At least once: the copies are on the destination before the offsets that pass them are
            # written. In one flush, a worker killed mid-way could leave the offsets without the copies.
            failures += self._flushed(producer)
        if not failures:
            for partition, next_offset in touched.items():
                key, value = plan.offset_record(partition.topic, partition.partition, next_offset)
                self._produce(producer, plan.route_topic(shared.name), value, key, partition=self.bucket)
            failures += self._finish(producer)
        if failures:
            return self._undo(producer, source, first, failures)
        now = time.monotonic()
        decision = self._apply(Copied(touched, now))
        assert isinstance(decision, Pauses)
        for message in batch:
            shared.metrics.copied(shared.name, message, now)
        for partition, seconds in decision.seconds.items():
            shared.metrics.pause(shared.name, partition, seconds)
        return frozenset()

    def _store(self, producer: Producer, records: list[tuple[bytes, bytes]]) -> bool:
        """Write records of the bucket's partition of the route topic on their own (in a transaction
        of their own when exactly once); False when they were not written."""
        failures: list[CopyFailure] = []
        if self._exactly_once:
            producer.begin_transaction()
        for key, value in records:
            self._produce(producer, plan.route_topic(self.shared.name), value, key, partition=self.bucket,
                          on_delivery=functools.partial(_collect, failures, None, None))
        failures += self._finish(producer)
        if failures:
            if self._exactly_once:
                self._abort(producer)
            self.shared.metrics.errors.labels(self.shared.name, "aborted").inc()
            log.warning("%s bucket %d: bookkeeping records not written (%s); tried again", self.shared.name,
                        self.bucket, "; ".join(sorted({f.error.str() for f in failures})))
            self._stopping.wait(AFTER_ABORT)
            return False
        return True

    @staticmethod
    def _produce(producer: Producer, topic: str, value, key, **kwargs) -> None:
        while True:
            try:
                producer.produce(topic, value, key, **kwargs)
                return
            except BufferError:
                producer.poll(0.05)

    @staticmethod
    def _flushed(producer: Producer) -> list[CopyFailure]:
        """Wait for every delivery (failed ones reach the batch's failures through ``_collect``); a
        failure if some are still undelivered."""
        left = producer.flush(_TIMEOUT)
        return [CopyFailure(KafkaError(KafkaError._TIMED_OUT))] if left else []

    def _finish(self, producer: Producer) -> list[CopyFailure]:
        """Commit the transaction (or flush); the failures that make it void, if any."""
        if not self._exactly_once:
            return self._flushed(producer)
        while True:
            try:
                producer.commit_transaction(_TIMEOUT)
                return []
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                decision = self._apply(CommitFailed(producer_error(error)))
                if isinstance(decision, DropProducer):
                    raise Fenced(error) from exc
                if isinstance(decision, AbortBatch):
                    return [CopyFailure(error)]
                if isinstance(decision, Fail):
                    raise
                assert isinstance(decision, RetryCommit)
                self.shared.metrics.errors.labels(self.shared.name, "commit-retry").inc()
                log.warning("%s bucket %d: commit retried (%s)", self.shared.name, self.bucket, error.str())
                time.sleep(decision.after)

    def _abort(self, producer: Producer) -> None:
        try:
            producer.abort_transaction(_TIMEOUT)
        except KafkaException as exc:
            if isinstance(self._apply(AbortFailed(producer_error(exc.args[0]))), DropProducer):
                raise Fenced(exc.args[0]) from exc
            raise

    def _undo(self, producer: Producer, source: _Source, first: dict[SourcePartition, int],
              failures: list[CopyFailure]) -> frozenset[SourcePartition]:
        """Abort, rewind every partition of the batch to its last committed offset, and stop a
        partition whose record the destination can never take (nothing is skipped); the partitions
        rewound."""
        shared = self.shared
        if self._exactly_once:
            self._abort(producer)
        refusals = tuple(failure.refusal() for failure in failures)
        decision = self._apply(NotCopied(first, refusals))
        assert isinstance(decision, Rewind)
        for partition, offset in decision.offsets.items():
            self._reposition(source, partition, offset)
        log.warning("%s bucket %d: batch not copied (%s); rewound %s", shared.name, self.bucket,
                    "; ".join(sorted({r.error for r in refusals})),
                    ", ".join(f"{s.topic}[{s.partition}]@{o}" for s, o in decision.offsets.items()))
        for partition, refusal in decision.stop.items():
            source.consumer.incremental_unassign([TopicPartition(partition.topic, partition.partition)])
            shared.metrics.stopped.labels(shared.name, partition.topic, str(partition.partition)).set(1)
            log.error("%s: %s[%s] offset %s: record too large for %s (%s); this partition is stopped and nothing "
                      "was skipped: raise max.message.bytes of the destination topic, then restart the worker",
                      shared.name, partition.topic, partition.partition, refusal.offset, shared.route.destination,
                      refusal.error)
        shared.metrics.errors.labels(shared.name, "aborted").inc()
        self._stopping.wait(decision.wait)
        return frozenset(decision.offsets)

    def _measure_lag(self, source: _Source) -> None:
        now = time.monotonic()
        if not bucket_state.lag_due(self._state, now):
            return
        ends = {}
        for partition in self._state.assigned:
            _, high = source.consumer.get_watermark_offsets(TopicPartition(partition.topic, partition.partition),
                                                            cached=True) or (None, -1)
            if high is not None and high >= 0:
                ends[partition] = high
        decision = self._apply(LagMeasured(ends, now))
        assert isinstance(decision, Lags)
        for partition, lag in decision.records.items():
            self.shared.metrics.lag.labels(self.shared.name, partition.topic, str(partition.partition)).set(lag)


def _positions(state: BucketState) -> dict[tuple[str, int], int]:
    return {(source.topic, source.partition): offset for source, offset in state.next.items()}


def _answer(asked: dict[TopicPartition, Future]) -> StartsAnswer | None:
    """The source's answer once every earliest offset asked is answered; None before."""
    if not asked or not all(future.done() for future in asked.values()):
        return None
    try:
        return StartsAnswer({SourcePartition(tp.topic, tp.partition): f.result().offset for tp, f in asked.items()})
    except KafkaException as exc:  # no leader yet, a source away: asked again
        return StartsAnswer(error=exc.args[0].str() if exc.args else str(exc))


def _collect(failures: list[CopyFailure], source: SourcePartition | None, offset: int | None,
             error: KafkaError | None, _msg: Message) -> None:
    if error is not None:
        failures.append(CopyFailure(error, source, offset))
