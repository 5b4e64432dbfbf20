"""One Kafka consumer per (topic, group) on a node, feeding the node's clients.

Nodes share a topic's partitions through Kafka's own group protocol (cooperative-sticky, from
``conveyor.kafka``), so no other consensus is needed. On assignment a partition's committed offset
and metadata seed its ack tracker, so what was acked before a takeover is skipped; on revocation
the last commit is written before the partition goes. The reader thread owns the consumer and the
dead-letter producer (``source.Source`` has what the backends share).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from conveyor import kafka
from conveyor.config import Platform
from conveyor.dispatch.acktracker import PartitionAcks
from conveyor.dispatch.errors import AckMetadataError
from conveyor.dispatch.fanout import Client, CommitPoint, Unconfirmed
from conveyor.dispatch.metrics import ReaderMetrics
from conveyor.dispatch.partition import Limits, PartitionQueue
from conveyor.dispatch.source import CLIENT_ID_PREFIX, MembershipSource, Source, fetched

log = logging.getLogger(__name__)

#: Longest wait for Kafka in one turn of the loop; deadlines and nack delays are checked as often.
_POLL_WAIT = 0.05
#: The wait while a partition is paused: acks arriving meanwhile free room that only this loop can
#: resume, and a long wait here left the clients idle.
_PAUSED_POLL_WAIT = 0.005
_METRICS_EVERY = 1.0
#: Seconds to wait for Kafka's answer to a commit before sending the next one regardless.
_COMMIT_ANSWER_WAIT = 30.0
_CONSUMER_OVERRIDES = {
    # A dead node's partitions move after this; Kafka's 45 s default would stall them that long.
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 1_000,
}


class GroupReader(Source):
    def __init__(self, platform: Platform, cluster: str, topic: str, group: str, advertise: str,
                 metrics: ReaderMetrics) -> None:
        super().__init__(platform, cluster, topic, group, advertise, metrics)
        settings = self._settings
        self._limits = Limits(settings.ack_deadline, settings.max_attempts, settings.metadata_max_bytes,
                              settings.prefetch)
        self._consumer: Consumer | None = None
        self._paused: set[int] = set()
        #: The asynchronous commit awaiting Kafka's answer, with the acks it makes durable.
        self._in_flight: tuple[list[CommitPoint], Unconfirmed] | None = None
        self._in_flight_since = 0.0

    @property
    def membership(self) -> MembershipSource:
        return MembershipSource(self.group, needs_partitions=True)

    def start(self) -> None:
        consumer = kafka.consumer(self._platform, self._cluster, self.group, CLIENT_ID_PREFIX + self._advertise,
                                  {**_CONSUMER_OVERRIDES, "on_commit": self._on_commit})
        consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                           on_lost=self._on_lost)
        self._consumer = consumer
        super().start()

    # -- the reader thread ----------------------------------------------------------------------

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        next_commit = next_metrics = time.monotonic()
        try:
            while not self._stop.is_set():
                first = consumer.poll(_PAUSED_POLL_WAIT if self._paused else _POLL_WAIT)
                messages = [first, *consumer.consume(self._settings.batch, 0)] if first is not None else []
                now = time.monotonic()
                with self._lock:
                    self._ingest(messages)
                    self._fanout.expire(now)
                    self._fanout.dispatch(now, time.time())
                    dead = self._take_dead()
                    wanted = {p for p, q in self._queues().items() if not q.wants_fetch(p in self._paused)}
                self._dead_letter(dead)
                self._pause(wanted)
                if now >= next_commit:
                    self._commit_soon(consumer)
                    next_commit = now + self._settings.commit_interval
                if now >= next_metrics:
                    self._refresh_metrics()
                    next_metrics = now + _METRICS_EVERY
        finally:
            self._close(consumer)

    def _queues(self) -> dict[int, PartitionQueue[Client]]:
        """The fan-out's partitions, which this backend fills with its own queues only."""
        return self._fanout.partitions  # type: ignore[return-value]

    def _ingest(self, messages: list[Message]) -> None:
        partitions = self._queues()
        for message, record in fetched(messages, f"{self.topic}/{self.group}"):
            partition = partitions.get(message.partition())
            if partition is not None:  # else revoked since librdkafka fetched it
                partition.add(message.offset(), record)

    def _pause(self, wanted: set[int]) -> None:
        consumer = self._consumer
        assert consumer is not None
        pause, resume = wanted - self._paused, self._paused - wanted
        if pause:
            consumer.pause([TopicPartition(self.topic, p) for p in pause])
        if resume:
            consumer.resume([TopicPartition(self.topic, p) for p in resume])
        self._paused = wanted

    def _commit_soon(self, consumer: Consumer) -> None:
        """The periodic commit of (lowest unacked offset, acks above it) per partition. It is
        asynchronous, so fetching and delivering go on meanwhile; one at a time, settled in
        ``_on_commit``, after which each client hears which of its acks the commit carried."""
        if self._in_flight is not None:
            if time.monotonic() - self._in_flight_since > _COMMIT_ANSWER_WAIT:
                self._settle(KafkaError(KafkaError._TIMED_OUT))  # the acks go with the next one
            return
        with self._lock:
            points, snapshot = self._fanout.commit_points(None)
            if not points:
                # Nothing moved since the last commit, so every ack applied is in it already.
                self._fanout.committed([], snapshot)
                return
        self._in_flight, self._in_flight_since = (points, snapshot), time.monotonic()
        try:
            consumer.commit(offsets=_offsets(self.topic, points), asynchronous=True)
        except KafkaException as exc:
            self._settle(exc.args[0])

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        pending = self._in_flight
        if pending is None or {(tp.partition, tp.offset) for tp in partitions} != \
                {(p.partition, p.offset) for p in pending[0]}:
            return  # a synchronous commit's report, handled where it was made
        self._settle(error or next((tp.error for tp in partitions if tp.error is not None), None))

    def _settle(self, error: KafkaError | None) -> None:
        assert self._in_flight is not None
        points, snapshot = self._in_flight
        self._in_flight = None
        ok = self._commit_outcome(points, error)
        with self._lock:
            if ok:
                self._fanout.committed(points, snapshot)
            else:
                self._fanout.commit_failed(snapshot)

    def _commit_now(self, consumer: Consumer, points: list[CommitPoint]) -> bool:
        """A synchronous commit, for a partition about to go (revocation, shutdown)."""
        if not points:
            return True
        try:
            results = consumer.commit(offsets=_offsets(self.topic, points), asynchronous=False)
        except KafkaException as exc:
            return self._commit_outcome(points, exc.args[0])
        return self._commit_outcome(points, next((tp.error for tp in results or [] if tp.error is not None), None))

    def _commit_outcome(self, points: list[CommitPoint], error: KafkaError | None) -> bool:
        if error is not None and error.code() != KafkaError._NO_OFFSET:
            log.warning("commit of %s/%s failed: %s", self.topic, self.group, error.str())
            self._metrics.commit_failures.inc()
            return False
        if points:
            self._metrics.metadata_bytes.set(max(len(p.metadata) for p in points))
        return True

    # -- rebalance callbacks (run inside poll, on the reader thread) ----------------------------

    def _on_assign(self, consumer: Consumer, assigned: list[TopicPartition]) -> None:
        if not assigned:
            return
        with self._lock:
            # Assignments are incremental; a partition already served keeps its state.
            assigned = [tp for tp in assigned if tp.partition not in self._fanout.partitions]
        if not assigned:
            return
        committed = _committed(consumer, assigned, self._stop.is_set)
        queues: dict[int, PartitionQueue[Client]] = {}
        for tp in committed:
            acks: PartitionAcks | None = None
            if tp.offset >= 0:
                try:
                    acks = PartitionAcks.restore(tp.offset, tp.metadata or "")
                except AckMetadataError as exc:
                    log.warning("partition %s/%d: %s", self.topic, tp.partition, exc)
                    self._metrics.stale_metadata.inc()
                    acks = PartitionAcks(tp.offset)
            queues[tp.partition] = PartitionQueue(acks, self._limits)
        with self._lock:
            for partition_id, partition in queues.items():
                self._fanout.assign(partition_id, partition)
        log.info("%s/%s: assigned partitions %s", self.topic, self.group, sorted(queues))

    def _on_revoke(self, consumer: Consumer, revoked: list[TopicPartition]) -> None:
        ids = [tp.partition for tp in revoked]
        # The last commit's content and the drop happen at once: an ack arriving between them
        # would be applied and then never committed.
        with self._lock:
            points, snapshot = self._fanout.commit_points(ids)
            self._drop(ids)
        ok = self._commit_now(consumer, points)
        with self._lock:
            if ok:
                self._fanout.committed(points, snapshot)
        log.info("%s/%s: partitions %s revoked%s", self.topic, self.group, sorted(ids),
                 "" if ok else " (last commit failed: their latest acks will be redelivered)")

    def _on_lost(self, consumer: Consumer, lost: list[TopicPartition]) -> None:
        # Another node may own them already: a commit now could overwrite its progress.
        ids = [tp.partition for tp in lost]
        with self._lock:
            self._drop(ids)
        log.warning("%s/%s: partitions %s lost; acks since the last commit will be redelivered",
                    self.topic, self.group, sorted(ids))

    def _drop(self, ids: list[int]) -> None:
        for partition_id in ids:
            self._fanout.revoke(partition_id)
            self._paused.discard(partition_id)

    # -- housekeeping ---------------------------------------------------------------------------

    def _refresh_metrics(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        with self._lock:
            partitions = dict(self._queues())
            in_flight = sum(q.in_flight for q in partitions.values())
        backlog = 0
        for partition_id, partition in partitions.items():
            _, end = consumer.get_watermark_offsets(TopicPartition(self.topic, partition_id), cached=True)
            acks = partition.acks
            if end >= 0 and acks is not None:
                backlog += acks.backlog(end)
        self._metrics.backlog.set(backlog)
        self._metrics.in_flight.set(in_flight)
        self._metrics.paused.set(len(self._paused))

    def _close(self, consumer: Consumer) -> None:
        with self._lock:
            if self._in_flight is not None:  # its acks get confirmed by the last commit instead
                self._fanout.commit_failed(self._in_flight[1])
                self._in_flight = None
            points, snapshot = self._fanout.commit_points(None)
        try:
            if self._commit_now(consumer, points):
                with self._lock:
                    self._fanout.committed(points, snapshot)
            consumer.close()  # leaves the group: the other nodes take over at once
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing the reader of %s/%s: %s", self.topic, self.group, exc)


def _offsets(topic: str, points: list[CommitPoint]) -> list[TopicPartition]:
    return [TopicPartition(topic, p.partition, p.offset, metadata=p.metadata) for p in points]


def _committed(consumer: Consumer, partitions: list[TopicPartition],
               stopping: Callable[[], bool]) -> list[TopicPartition]:
    """The group's committed offsets and metadata; retried, since serving without them could hand
    out acked messages again."""
    while True:
        try:
            return consumer.committed(partitions, timeout=10)
        except KafkaException as exc:
            if stopping() or not exc.args[0].retriable():
                raise
            log.warning("reading committed offsets: %s; retrying", exc.args[0].str())
