"""The position feed: readers that keep their positions outside consumer groups show them to ops.

The lake keeps its offsets in the Iceberg snapshot summary, the replicator in its route topic, the
real-time job in its Spark checkpoint: each for exactly-once reasons, and each invisible to lag
evaluation, rewind detection and the throttle, which read consumer groups (the blind spot of the 4x
read incident of docs/architecture.md, section 4). So each of them also commits its position, for
monitoring only, to a consumer group named after the part and its route or view
(:func:`group_name`), with commit metadata naming where the real position lives (``{"monitor-only":
"iceberg"}``). Nothing ever resumes from these groups.

Committed as a standalone consumer commits (OffsetCommit with no member and no generation), from a
consumer handle of the monitoring group that never joins it: nobody subscribes with its name. The
coordinator accepts such a commit for an empty group, and accepts a lower offset than before, which
a rolled-back table needs (its REWIND must show). Not through the admin API's
AlterConsumerGroupOffsets: librdkafka 2.16 aborts the whole process when a broker restarts under
that call (``rd_kafka_enq_once_del_source_return: eonce->refcnt > 0``), which took down the
replicator's workers in a soak; the consumer's commit goes through its group handle, which waits
for the coordinator instead. Should someone start a consumer under a monitoring group's name, the
coordinator refuses the commit (the group is not empty); that failure, like every publishing
failure, is logged and counted and never fails the reader.

The metadata also names the client ids of the reader's real Kafka clients (``"client-ids"``), so
the throttle, which sets quotas by client id, can act on a reader it sees only through this feed:
the replicator's copier consumer (``<worker>-b<bucket>``), the share dispatcher's consumers
(``conveyor-dispatch@<host:port>``, one per node), the lake's and the real-time job's Spark
consumers (one ``kafka.client.id`` for every consumer the query opens, driver and executors,
:func:`spark_client_id`). A reader whose client id is not fixed says why under ``"unquotable"``.
Each partition's commit carries its own metadata: the copiers of one route read different
partitions under different client ids.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Counter

from conveyor import kafka
from conveyor.config import Platform

log = logging.getLogger(__name__)

#: The commit metadata's key; its value names the store that holds the real position.
MONITOR_ONLY = "monitor-only"
#: The client ids of the reader's Kafka clients, a list: what the throttle quotas.
CLIENT_IDS = "client-ids"
#: Why the reader has no client id to quota, when it has none.
UNQUOTABLE = "unquotable"
#: (topic, partition) -> the next offset the reader will read.
Positions = Mapping[tuple[str, int], int]

_COUNTERS: dict[int, Counter] = {}
_COUNTERS_LOCK = threading.Lock()


def group_name(part: str, name: str) -> str:
    """The monitoring group of a part's route, view or topic: ``conveyor.lake.events``."""
    return f"conveyor.{part}.{name}"


def spark_client_id(part: str, name: str) -> str:
    """The ``kafka.client.id`` of a Spark reader's consumers: ``conveyor-lake.events``. Spark's Kafka
    source hands ``kafka.*`` options to every consumer it opens, on the driver and the executors, so
    one quota on this id covers the whole query."""
    return f"conveyor-{part}.{name}"


def metadata(store: str, client_ids: Sequence[str] = (), unquotable: str | None = None) -> str:
    value: dict[str, object] = {MONITOR_ONLY: store, CLIENT_IDS: sorted(set(client_ids))}
    if unquotable is not None:
        value[UNQUOTABLE] = unquotable
    return json.dumps(value)


def _decoded(commit_metadata: str | None) -> dict | None:
    if not commit_metadata or MONITOR_ONLY not in commit_metadata:
        return None
    try:
        value = json.loads(commit_metadata)
    except ValueError:
        return None
    return value if isinstance(value, dict) and MONITOR_ONLY in value else None


def kept_in(commit_metadata: str | None) -> str | None:
    """Where the real position of a group lives, from its commit metadata; None for an ordinary group."""
    value = _decoded(commit_metadata)
    return None if value is None else str(value[MONITOR_ONLY])


def client_ids(commit_metadata: str | None) -> tuple[str, ...]:
    """The client ids a monitoring commit names for its reader; () for an ordinary group's commit,
    an unquotable reader, or a feed written before client ids were named."""
    value = _decoded(commit_metadata)
    ids = value.get(CLIENT_IDS) if value is not None else None
    return tuple(str(i) for i in ids if i) if isinstance(ids, list) else ()


def publish_counter(registry: CollectorRegistry) -> Counter:
    """``conveyor_position_feed_publishes_total{group,result}`` in ``registry``, made once per registry
    (every copier of a replicator worker shares its worker's)."""
    with _COUNTERS_LOCK:
        counter = _COUNTERS.get(id(registry))
        if counter is None:
            counter = _COUNTERS[id(registry)] = Counter(
                "conveyor_position_feed_publishes", "Positions published to monitoring groups, by result",
                ["group", "result"], registry=registry)
        return counter


class PositionFeed:
    """Publishes one reader's positions to its monitoring group on ``cluster``, at most once every
    ``min_interval`` seconds (a copier commits many transactions a second; ops samples every few
    seconds). Constructing it does no I/O; :meth:`close` releases its consumer handle."""

    def __init__(self, platform: Platform, cluster: str, group: str, store: str, min_interval: float = 0.0,
                 registry: CollectorRegistry | None = None, timeout: float = 10.0, client_ids: Sequence[str] = (), unquotable: str | None = None) -> None:
        self.platform, self.cluster, self.group, self.store = platform, cluster, group, store
        self.unquotable = unquotable
        self.metadata = metadata(store, client_ids, unquotable)
        self.min_interval = min_interval
        self.timeout = timeout
        self._consumer: Consumer | None = None
        #: Futures of the commits sent, oldest first: their answers come back in that order.
        self._waiting: deque[Future] = deque()
        self._counter = publish_counter(registry) if registry is not None else None
        self._last = -float("inf")
        #: What the last publish sent, with its metadata: an unchanged position is not sent again.
        self._sent: tuple[dict[tuple[str, int], int], str] | None = None
        self.published = 0
        self.failures = 0

    def _committer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = kafka.consumer(self.platform, self.cluster, self.group, "conveyor-position-feed",
                                            {"on_commit": self._answered})
        return self._consumer

    def _answered(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The commit's answer (librdkafka's on_commit, served by :meth:`_serve`)."""
        if not self._waiting:
            return
        future = self._waiting.popleft()
        if error is not None:
            future.set_exception(KafkaException(error))
        else:
            future.set_result(partitions)

    def _serve(self, timeout: float = 0.0) -> None:
        if self._consumer is not None:
            self._consumer.poll(timeout)  # no assignment: it only serves the commits' answers

    def close(self) -> None:
        """Release the consumer handle (commits still unanswered are given up)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def name_clients(self, client_ids: Sequence[str]) -> None:
        """The reader's client ids changed (a dispatcher node joined or left): the next publish
        sends them even if the positions did not move."""
        self.metadata = metadata(self.store, client_ids, self.unquotable)

    def due(self) -> bool:
        """Whether a publish now would be sent: a hot loop asks before building its positions."""
        return time.monotonic() - self._last >= self.min_interval

    def publish(self, positions: Positions, force: bool = False) -> Future | None:
        """Commit ``positions`` (a lower offset than before included) unless the last publish was
        less than ``min_interval`` ago or sent the same; the commit's future, already watched for
        failures. A reader that calls it on every pass of its loop therefore publishes its final
        position at most ``min_interval`` after it stopped moving."""
        if not positions or (not force and not self.due()):
            return None
        self._last = time.monotonic()  # an unchanged position is looked at again after min_interval too
        if not force and self._sent == (dict(positions), self.metadata):
            return None
        self._sent = (dict(positions), self.metadata)
        offsets = [TopicPartition(topic, partition, offset, metadata=self.metadata)
                   for (topic, partition), offset in sorted(positions.items())]
        consumer = self._committer()
        self._serve()
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            self._failed(exc)
            return None
        future: Future = Future()
        future.add_done_callback(self._done)
        self._waiting.append(future)
        return future

    def committed(self) -> dict[tuple[str, int], int]:
        """What the monitoring group holds now (every reader's last publish); raises KafkaException."""
        return {(tp.topic, tp.partition): tp.offset
                for tp in kafka.committed(self.platform, self.cluster, self.group, timeout=self.timeout)
                if tp.offset >= 0}

    def publish_and_wait(self, positions: Positions, attempts: int = 3) -> bool:
        """Publish now and wait for the answer, trying again after a failure (a new group's
        coordinator answers NOT_COORDINATOR until its lookup settles); True once it is committed.
        For readers that publish rarely (a lake run, a query's last batch), where a lost publish
        would leave the position stale until the next one."""
        for attempt in range(attempts):
            failures = self.failures
            future = self.publish(positions, force=True)
            if future is not None:
                deadline = time.monotonic() + self.timeout
                while not future.done() and time.monotonic() < deadline:
                    self._serve(0.1)
                if future.done() and self.failures == failures:
                    return True
            time.sleep(0.5 * (attempt + 1))
        return False

    def _done(self, future: Future) -> None:
        error = future.exception()
        if error is not None:
            self._failed(error)
            return
        failed = [tp for tp in future.result() if tp.error is not None]
        if failed:
            self._failed(failed[0].error)
        else:
            self.published += 1
            if self._counter is not None:
                self._counter.labels(self.group, "ok").inc()

    def _failed(self, error: object) -> None:
        self._sent = None  # sent again on the next call
        self.failures += 1
        if self._counter is not None:
            self._counter.labels(self.group, "failed").inc()
        log.warning("position of %s not published to its monitoring group on %s: %s", self.group, self.cluster, error)
