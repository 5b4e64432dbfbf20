"""What every backend of a (topic, group) on a node shares: the fan-out to its clients, the
frames clients send, the reader thread's life, and dead letters.

A backend (``reader.GroupReader``: a consumer group with acks in the commit metadata;
``share_reader.ShareReader``: a KIP-932 share group) subclasses ``Source`` and provides the
thread's body (``_run``) and how nodes find each other (``membership``). gRPC threads reach the
shared state only through ``handle``/``connect``/``disconnect``, under one lock. A stopped
source takes no new client, so a node can retire one that has been idle (``retire_if_idle``)
while a stream is about to connect to it: that stream gets ``ReaderStopped`` and a fresh reader.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from conveyor.config import Dispatch, Platform
from conveyor.dispatch.deadletter import (
    QUEUE_FULL_WAIT,
    UNWRITABLE,
    dead_letter_headers,
    dead_letter_producer,
    send,
)
from conveyor.dispatch.errors import ReaderStopped
from conveyor.dispatch.fanout import Client, Fanout
from conveyor.dispatch.metrics import ReaderMetrics
from conveyor.dispatch.partition import DeadLetter, Record
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor.limits import PRODUCER_MESSAGE_MAX, record_size

log = logging.getLogger(__name__)

#: Members of a dispatcher's group carry ``client.id = CLIENT_ID_PREFIX + host:port``; Discovery
#: reads the addresses back from the group's membership.
CLIENT_ID_PREFIX = "conveyor-dispatch@"
#: Seconds before dead letters are written again after a write failed for a reason that may pass
#: (the topic unreachable, a full queue): no tight loop of failing writes meanwhile.
DEAD_LETTER_RETRY = 1.0


@dataclass(frozen=True)
class MembershipSource:
    """Where Discovery finds the nodes serving a pair: the consumer group whose members they
    are, and whether a member serves only while it holds partitions of the topic."""

    group: str
    needs_partitions: bool


def fetched(messages: list[Message], what: str) -> list[tuple[Message, Record]]:
    """The records among fetched ``messages``; a fatal error raises, others are logged."""
    out: list[tuple[Message, Record]] = []
    for message in messages:
        error = message.error()
        if error is not None:
            if error.fatal():
                raise KafkaException(error)
            log.warning("fetch of %s: %s", what, error.str())
            continue
        headers = tuple((k, v or b"") for k, v in message.headers() or ())
        out.append((message, Record(message.key(), message.value() or b"", headers, message.timestamp()[1])))
    return out


class Source:
    def __init__(self, platform: Platform, cluster: str, topic: str, group: str, advertise: str,
                 metrics: ReaderMetrics) -> None:
        settings: Dispatch = platform.dispatch
        self.topic, self.group = topic, group
        self.dead_letter_topic = settings.dead_letter_topic.format(topic=topic, group=group)
        self._platform, self._cluster, self._advertise = platform, cluster, advertise
        self._settings = settings
        self._metrics = metrics
        self._lock = threading.Lock()
        self._fanout = Fanout(metrics, settings.batch, settings.max_credit)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Producer | None = None
        #: The dead-letter producer hit a fatal error: replaced before the next write.
        self._producer_failed = False
        self._dead_retry_at = 0.0
        self._failed: BaseException | None = None
        #: Monotonic time since which no client has been connected; None while one is.
        self._idle_since: float | None = time.monotonic()

    @property
    def membership(self) -> MembershipSource:
        raise NotImplementedError

    # -- called from gRPC threads -------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._guarded, name=f"reader-{self.topic}-{self.group}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Settle what was acked, leave the group, end the streams."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def failure(self) -> BaseException | None:
        """Why the reader thread died, if it did."""
        return self._failed

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        """Stopped or stopping: it takes no new client."""
        return self._stop.is_set()

    def touch(self, now: float) -> None:
        """A client asked for the pair (Locate): it counts as use, so the reader is kept."""
        with self._lock:
            if self._idle_since is not None:
                self._idle_since = max(self._idle_since, now)

    def retire_if_idle(self, now: float, idle_for: float) -> bool:
        """Begin stopping (``stop`` then waits for the end) if no client has been connected for
        ``idle_for`` seconds; whether it did. Under the lock, so no client connects meanwhile."""
        with self._lock:
            if self._fanout.clients or self._idle_since is None or now - self._idle_since < idle_for:
                return False
            self._stop.set()
            return True

    def partitions(self) -> list[int]:
        with self._lock:
            return sorted(self._fanout.partitions)

    def connect(self, client: Client) -> None:
        """Serve ``client``; raises ReaderStopped if this reader stops or has stopped."""
        with self._lock:
            if self._stop.is_set():
                raise ReaderStopped(f"the reader of {self.topic}/{self.group} has stopped")
            self._idle_since = None
            self._fanout.add_client(client)
            self._fanout.dispatch(time.monotonic(), time.time())

    def disconnect(self, client: Client) -> None:
        with self._lock:
            self._fanout.remove_client(client, time.monotonic())
            if not self._fanout.clients and self._idle_since is None:
                self._idle_since = time.monotonic()
            self._fanout.dispatch(time.monotonic(), time.time())

    def handle(self, client: Client, request: pb.ReadRequest) -> None:
        """Acks, nacks and credit of one frame, then send what that frees up."""
        now = time.monotonic()
        with self._lock:
            if request.HasField("acks"):
                self._fanout.ack(client, request.acks)
            for nack in request.nacks:
                self._fanout.nack(client, nack, now)
            if request.credit:
                self._fanout.give_credit(client, request.credit)
            self._fanout.dispatch(now, time.time())

    # -- the reader thread ----------------------------------------------------------------------

    def _run(self) -> None:
        raise NotImplementedError

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # the node reports a dead reader on /healthz and replaces it
            self._failed = exc
            log.exception("reader of %s/%s failed", self.topic, self.group)
        finally:
            if self._producer is not None:
                self._producer.flush(30)
                self._producer = None
            with self._lock:  # end the streams: their clients locate again and reconnect
                self._stop.set()  # and take no new one: it would wait for frames that never come
                for client in list(self._fanout.clients):
                    client.outbox.put(None)

    def _take_dead(self) -> list[tuple[int, DeadLetter]]:
        """Under the lock: the messages out of attempts, by partition; none while a failed write
        waits to be retried."""
        if time.monotonic() < self._dead_retry_at:
            return []
        return [(p, letter) for p, q in self._fanout.partitions.items() for letter in q.take_dead()]

    def _dead_letter(self, dead: list[tuple[int, DeadLetter]]) -> None:
        """Write ``dead`` to the dead-letter topic. Never raises: the reader thread serves the
        partitions' other messages, and a letter not written now is retried or given up on."""
        producer = self._dead_letter_producer() if dead else self._producer
        if producer is None:
            for partition_id, letter in dead:
                self._write_failed(partition_id, letter, None)
            return
        give_up_at = time.monotonic() + QUEUE_FULL_WAIT
        for partition_id, letter in dead:
            headers = dead_letter_headers(self.topic, self.group, partition_id, letter)
            error = send(producer, self.dead_letter_topic, letter, headers,
                         self._dead_lettered(partition_id, letter), give_up_at)
            if error is not None:
                self._write_failed(partition_id, letter, error)
        producer.poll(0)

    def _dead_letter_producer(self) -> Producer | None:
        """The producer, created with the topic on first use, and again after a fatal error."""
        if self._producer is not None and self._producer_failed:
            self._producer.purge()  # its letters' reports come back as failures: retried
            self._producer.flush(0)
            self._producer, self._producer_failed = None, False
        if self._producer is None:
            try:
                self._producer = dead_letter_producer(self._platform, self._cluster, self.dead_letter_topic,
                                                      self.group)
            except KafkaException as exc:
                log.warning("cannot create dead-letter topic %s: %s", self.dead_letter_topic, exc.args[0].str())
        return self._producer

    def _dead_lettered(self, partition_id: int, letter: DeadLetter) -> Callable[[KafkaError | None, Message], None]:
        def settle(error: KafkaError | None, _: Message) -> None:
            if error is not None:
                self._write_failed(partition_id, letter, error)
                return
            with self._lock:
                partition = self._fanout.partitions.get(partition_id)
                if partition is None:
                    return  # revoked meanwhile: the next owner delivers it again
                partition.dead_lettered(letter)
            self._metrics.dead_lettered.inc()
        return settle

    def _write_failed(self, partition_id: int, letter: DeadLetter, error: KafkaError | None) -> None:
        """A letter not written (``error`` None: no producer): given up on when no retry can write
        it, else handed back to be written again after ``DEAD_LETTER_RETRY``."""
        if error is not None and error.code() in UNWRITABLE:
            self._unwritable(partition_id, letter, error)
            return
        if error is not None and (error.fatal() or error.code() == KafkaError._FATAL):
            self._producer_failed = True
        if error is not None and error.code() != KafkaError._QUEUE_FULL:
            log.warning("dead-lettering %s/%d@%d failed: %s; retrying", self.topic, partition_id, letter.offset,
                        error.str())
        with self._lock:
            self._dead_retry_at = time.monotonic() + DEAD_LETTER_RETRY
            partition = self._fanout.partitions.get(partition_id)
            if partition is not None:  # else revoked meanwhile: the next owner delivers it again
                partition.dead_again(letter)

    def _unwritable(self, partition_id: int, letter: DeadLetter, error: KafkaError) -> None:
        """Settle a letter no retry can write as if written, so the partition's commit moves past it.
        Holding the commit instead would pin it there for ever (a record above the producer's limit
        never fits) and hand the record to the handlers again after every takeover. The record stays
        in the topic until retention, at the coordinates this logs and the metrics keep."""
        with self._lock:
            partition = self._fanout.partitions.get(partition_id)
            if partition is None:
                return  # revoked meanwhile: the next owner meets it again
            partition.dead_lettered(letter)
        self._metrics.unwritable.record(partition_id, letter.offset)
        size = record_size(letter.record.key, letter.record.value,
                           dead_letter_headers(self.topic, self.group, partition_id, letter))
        log.error("%s/%d@%d cannot be dead-lettered to %s (%s; %d bytes with its dead-letter headers, the producer "
                  "takes up to %d, the topic's max.message.bytes decides on the broker): committed past it without "
                  "a copy; read it from the topic at that offset before retention removes it",
                  self.topic, partition_id, letter.offset, self.dead_letter_topic, error.str(), size,
                  PRODUCER_MESSAGE_MAX)
