"""The share-group backend (KIP-932) of a (topic, group) on a node, behind the same gRPC API.

The node runs ``dispatch.share_consumers`` share consumers in share group ``group``; every node
serving the pair joins the same share group and the broker spreads the records, so no node owns a
partition. A client's ack is the record's ACCEPT, a nack (after its delay, held here) or a missed
deadline its RELEASE, and the broker's delivery count is the message's attempt. At
``max_attempts`` the record goes to the dead-letter topic and is then ACCEPTed; the group's
``share.delivery.count.limit`` is one more, so the broker never drops a record the node has not
dead-lettered (a record arriving past the limit, after a node died holding it, is dead-lettered at
once). Clients hear an ack confirmed once the broker has accepted the acknowledgement.

The Python client's share consumer (explicit mode) polls again only once every record of its last
poll is acknowledged, and a poll returns what it fetched (up to a partition's worth), whatever
``max.poll.records`` says: hence several consumers per node, each with a thread of its own.

The Python AdminClient cannot describe share groups, so Discovery reads the nodes from a presence
group: a plain consumer per node in ``conveyor-dispatch-nodes.<group>`` that never fetches. The
group's position reaches ops through the position feed (``share_positions``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    IllegalStateException,
    KafkaException,
    Message,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from conveyor import kafka
from conveyor.config import Dispatch, Platform
from conveyor.dispatch.errors import GroupInUse
from conveyor.dispatch.fanout import Client, Unconfirmed
from conveyor.dispatch.metrics import ReaderMetrics
from conveyor.dispatch.share_partition import Settle, ShareLimits, SharePartition
from conveyor.dispatch.share_positions import SharePositions
from conveyor.dispatch.source import CLIENT_ID_PREFIX, MembershipSource, Source, fetched

log = logging.getLogger(__name__)

PRESENCE_GROUP = "conveyor-dispatch-nodes.{group}"
#: The brokers' default bounds of a group's lock duration (group.share.min/max.record.lock.duration.ms).
LOCK_BOUNDS_MS = (15_000, 60_000)
#: Bounds of share.partition.max.record.locks (group.share.min/max.partition.max.record.locks).
RECORD_LOCK_BOUNDS = (100, 4_000)
#: The node settles a record this long before the broker's lock on it ends.
LOCK_MARGIN = 3.0
_WAIT = 0.02
_METRICS_EVERY = 1.0
_CONFIRMED_REMEMBERED = 8192
_PRESENCE_OVERRIDES = {"session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000}
_ACK_TYPE = {Settle.accept: AcknowledgeType.ACCEPT, Settle.release: AcknowledgeType.RELEASE}


def share_group_configs(settings: Dispatch) -> tuple[dict[str, str], ShareLimits]:
    """The share group's configs from the dispatch settings, and the limits the node keeps. Pure.

    The lock covers the ack deadline plus a margin, within the brokers' bounds: the node's own
    deadline always comes first, except when ``ack_deadline`` is above the largest lock allowed."""
    lock_ms = min(max(int(settings.ack_deadline * 1000 + LOCK_MARGIN * 1000), LOCK_BOUNDS_MS[0]), LOCK_BOUNDS_MS[1])
    configs = {
        # Like the classic backend's consumers: a new group starts at the beginning.
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": str(lock_ms),
        "share.delivery.count.limit": str(settings.max_attempts + 1),
        "share.partition.max.record.locks": str(min(max(settings.prefetch, RECORD_LOCK_BOUNDS[0]),
                                                    RECORD_LOCK_BOUNDS[1])),
    }
    return configs, ShareLimits(settings.ack_deadline, settings.max_attempts, lock_ms / 1000 - LOCK_MARGIN)


class ShareReader(Source):
    def __init__(self, platform: Platform, cluster: str, topic: str, group: str, advertise: str,
                 metrics: ReaderMetrics) -> None:
        super().__init__(platform, cluster, topic, group, advertise, metrics)
        self._configs, self._limits = share_group_configs(self._settings)
        self._consumers: list[ShareConsumer] = []
        self._workers: list[threading.Thread] = []
        self._presence: Consumer | None = None
        #: Accepted (partition, offset) -> the clients whose ack waits for the broker's answer.
        self._pending: dict[tuple[int, int], list[Client]] = {}
        self._confirmed: OrderedDict[tuple[int, int], None] = OrderedDict()
        self.positions = SharePositions(platform, cluster, topic, group, self.membership.group,
                                        self._settings.position_interval)

    @property
    def membership(self) -> MembershipSource:
        return MembershipSource(PRESENCE_GROUP.format(group=self.group), needs_partitions=False)

    def start(self) -> None:
        admin = kafka.admin(self._platform, self._cluster)
        existing = kafka.describe_groups(admin, [self.group])[self.group]
        if existing.state != ConsumerGroupState.DEAD:
            raise GroupInUse(f"group {self.group!r} is a consumer group already ({existing.state.name.lower()}), "
                             "for example of the classic backend: the share backend needs a group name no "
                             "consumer group uses")
        resource = ConfigResource(ResourceType.GROUP, self.group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in self._configs.items()])
        admin.incremental_alter_configs([resource])[resource].result(30)
        client_id = CLIENT_ID_PREFIX + self._advertise
        for index in range(self._settings.share_consumers):
            consumer = kafka.share_consumer(self._platform, self._cluster, self.group, client_id)
            consumer.set_acknowledgement_commit_callback(self._on_acknowledged)
            consumer.subscribe([self.topic])
            self._consumers.append(consumer)
            self._workers.append(threading.Thread(target=self._consume, args=(index,), daemon=True,
                                                  name=f"share-{self.topic}-{self.group}-{index}"))
        presence = kafka.consumer(self._platform, self._cluster, self.membership.group, client_id,
                                  _PRESENCE_OVERRIDES)
        presence.subscribe([self.topic], on_assign=_never_fetch)
        self._presence = presence
        for worker in self._workers:
            worker.start()
        self.positions.start()
        super().start()

    # -- the housekeeping thread: deadlines, dead letters, metrics, presence ------------------

    def _run(self) -> None:
        presence = self._presence
        assert presence is not None
        next_metrics = time.monotonic()
        try:
            while not self._stop.is_set():
                presence.poll(0.05)  # keeps the node in the presence group; nothing is fetched
                now = time.monotonic()
                with self._lock:
                    self._fanout.expire(now)
                    self._fanout.dispatch(now, time.time())
                    dead = self._take_dead()
                self._dead_letter(dead)
                if now >= next_metrics:
                    with self._lock:
                        in_flight = sum(q.in_flight for q in self._fanout.partitions.values())
                    self._metrics.in_flight.set(in_flight)
                    next_metrics = now + _METRICS_EVERY
                if self._failed is not None or any(not w.is_alive() for w in self._workers):
                    raise RuntimeError(f"a share consumer of {self.topic}/{self.group} stopped: {self._failed!r}")
        finally:
            self._stop.set()
            self.positions.stop()
            for worker in self._workers:
                worker.join(30)
            presence.close()

    # -- one thread per share consumer ----------------------------------------------------------

    def _consume(self, index: int) -> None:
        consumer = self._consumers[index]
        try:
            while not self._stop.is_set():
                with self._lock:
                    settled = self._settlements(index)
                    busy = any(q.unsettled(index) for q in self._queues().values())
                self._send(consumer, settled)
                if busy:
                    # Explicit mode: no poll until the last poll's records are all settled.
                    self._stop.wait(_WAIT)
                    continue
                messages = consumer.poll(0.1)
                if messages:
                    now = time.monotonic()
                    with self._lock:
                        self._ingest(index, messages, now)
                        self._fanout.dispatch(now, time.time())
        except BaseException as exc:
            self._failed = exc
            log.exception("share consumer %d of %s/%s failed", index, self.topic, self.group)
        finally:
            self._close(index, consumer)

    def _queues(self) -> dict[int, SharePartition[Client]]:
        """The fan-out's partitions, which this backend fills with its own queues only."""
        return self._fanout.partitions  # type: ignore[return-value]

    def _ingest(self, index: int, messages: list[Message], now: float) -> None:
        queues = self._queues()
        for message, record in fetched(messages, f"{self.topic}/{self.group} (share)"):
            queue = queues.get(message.partition())
            if queue is None:
                queue = SharePartition(self._limits)
                self._fanout.assign(message.partition(), queue)
            queue.add(message.offset(), record, message.delivery_count(), index, now)

    def _settlements(self, index: int) -> list[tuple[int, int, Settle]]:
        """Under the lock: what consumer ``index`` must send, and the acks the answer confirms."""
        settled = [(p, offset, how) for p, q in self._queues().items() for offset, how in q.take_settled(index)]
        snapshot = self._fanout.take_unconfirmed()
        confirmed_now: Unconfirmed = {}
        for partition_id, acks in snapshot.items():
            for client, offset in acks:
                key = (partition_id, offset)
                if key in self._confirmed:  # a repeated ack of one the broker has already
                    confirmed_now.setdefault(partition_id, []).append((client, offset))
                else:
                    self._pending.setdefault(key, []).append(client)
        if confirmed_now:
            self._fanout.committed([], confirmed_now)
        return settled

    def _send(self, consumer: ShareConsumer, settled: list[tuple[int, int, Settle]]) -> None:
        if not settled:
            return
        released = 0
        for partition_id, offset, how in settled:
            try:
                consumer.acknowledge_offset(self.topic, partition_id, offset, _ACK_TYPE[how])
            except IllegalStateException as exc:  # its lock ended and the client forgot it
                log.warning("acknowledging %s/%d@%d: %s", self.topic, partition_id, offset, exc)
            released += how is Settle.release
        if released:
            self._metrics.released.inc(released)
        try:
            # Synchronous on purpose: librdkafka 2.16 merges the acknowledgements of overlapping
            # asynchronous commits into one request the broker refuses (INVALID_REQUEST) when
            # clients ack out of order. The answer also reaches ``_on_acknowledged``.
            consumer.commit_sync()
        except KafkaException as exc:
            log.warning("acknowledgement commit of %s/%s: %s", self.topic, self.group, exc)

    def _on_acknowledged(self, offsets: dict[TopicPartition, set[int]], error: KafkaException | None) -> None:
        """The broker's answer to an acknowledgement commit (on the consumer's own thread)."""
        with self._lock:
            if error is not None:
                # Usually INVALID_RECORD_STATE: the lock ended first, so the broker lends the
                # record again and the clients' acks are not confirmed.
                log.warning("acknowledgements of %s/%s refused: %s", self.topic, self.group, error)
                self._metrics.commit_failures.inc()
                for tp, ids in offsets.items():
                    for offset in ids:
                        self._pending.pop((tp.partition, offset), None)
                return
            self._metrics.commits.inc()
            confirmed: Unconfirmed = {}
            for tp, ids in offsets.items():
                for offset in ids:
                    key = (tp.partition, offset)
                    for client in self._pending.pop(key, ()):
                        confirmed.setdefault(tp.partition, []).append((client, offset))
                    self._confirmed[key] = None
            while len(self._confirmed) > _CONFIRMED_REMEMBERED:
                self._confirmed.popitem(last=False)
            self._fanout.committed([], confirmed)

    def _close(self, index: int, consumer: ShareConsumer) -> None:
        """Give back what this consumer holds, so another node gets it now, and leave the group."""
        with self._lock:
            for queue in self._queues().values():
                queue.release_all(index)
            settled = self._settlements(index)
        try:
            self._send(consumer, settled)
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing share consumer %d of %s/%s: %s", index, self.topic, self.group, exc)


def _never_fetch(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """The presence consumer takes its partitions paused: membership is all it is for."""
    consumer.incremental_assign(partitions)
    consumer.pause(partitions)

