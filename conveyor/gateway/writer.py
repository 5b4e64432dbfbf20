"""Writes accepted events to Kafka and waits for every acknowledgement, failing over between the
writable clusters: losing a data centre must not stop writes (docs/architecture.md, section 2).

The local cluster's producer gives up on a message after ``failover_after`` seconds; what it could
not deliver is written to the next writable cluster named in platform.yaml, and the gateway stays
there until a probe finds the local cluster answering again. A message that timed out may still
have reached the local cluster, so across a failover delivery is at-least-once: the event keeps
its ``event_id``, which the lake de-duplicates on.

A cluster of purpose logs is never waited on for longer than ``gateway.logs_wait``: written with
acks=1, what it has not acknowledged by then is shed, reported in the answer and the metrics and
never counted as accepted (it may still have landed: a loss or a copy a logs topic accepts).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from typing import NamedTuple

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from conveyor import kafka
from conveyor.config import Platform, Purpose
from conveyor.gateway.errors import Overloaded, Unavailable
from conveyor.limits import PRODUCER_MESSAGE_MAX, Headers
from conveyor_sdk.contract import EXTRA_FIELDS

log = logging.getLogger(__name__)

#: The producer's queue bounds, and the gateway's own, below them: a request that would pass ours
#: is refused before anything is queued, so librdkafka's (BufferError in the middle of a request,
#: after part of it was queued) is never reached.
QUEUE_LIMIT = 500_000
LIBRDKAFKA_QUEUE_KBYTES = 2_097_151
QUEUE_BYTES = 1 << 30


# Named tuples, not dataclasses: one of each is made per event on the hot path.
class Record(NamedTuple):
    key: bytes
    value: bytes
    #: The event has fields its contract version does not declare (conveyor_sdk.contract.EXTRA_FIELDS).
    extra_fields: bool = False


def _headers(record: Record, verdict: Headers | None) -> Headers | None:
    """The record's headers: the request's verdict, and the mark of fields outside it where the
    event has any (only beside a verdict: without one a reader checks every field itself)."""
    return [*verdict, EXTRA_FIELDS] if verdict and record.extra_fields else verdict


class Delivery(NamedTuple):
    cluster: str
    partition: int
    offset: int


class Accepted:
    """Where one request's records were acknowledged: per partition always (first and last offset,
    count), and per record when the answer lists each (``itemized``)."""

    def __init__(self, size: int, itemized: bool) -> None:
        self.size = size
        self.deliveries: list[Delivery | None] | None = [None] * size if itemized else None
        #: (cluster, partition) -> [first offset, last offset, count]
        self.spans: dict[tuple[str, int], list[int]] = {}
        #: Indices of the records a logs cluster did not acknowledge within the bound: shed.
        self.shed: list[int] = []

    def take(self, cluster: str, written: Written, indices: list[int]) -> None:
        """What ``cluster`` acknowledged of the records it was given (``indices`` into the request's)."""
        # Each cluster is written to once per request: its spans are new keys, nothing to merge.
        self.spans.update({(cluster, partition): span for partition, span in written.spans.items()})
        if self.deliveries is not None and written.acked is not None:
            for index, (partition, offset) in written.acked.items():
                self.deliveries[indices[index]] = Delivery(cluster, partition, offset)

    def by_cluster(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for (cluster, _), (_, _, count) in self.spans.items():
            counts[cluster] = counts.get(cluster, 0) + count
        return counts


def _widen(spans: dict, key: object, offset: int) -> None:
    span = spans.get(key)
    if span is None:
        spans[key] = [offset, offset, 1]
    else:
        if offset < span[0]:
            span[0] = offset
        elif offset > span[1]:
            span[1] = offset
        span[2] += 1


class Written(NamedTuple):
    """One cluster's answer for the records it was given (indices into them)."""
    #: partition -> [first offset, last offset, count] of the records acknowledged
    spans: dict[int, list[int]]
    #: index -> (partition, offset) of each acknowledged record; None when not itemized
    acked: dict[int, tuple[int, int]] | None
    failed: list[int]
    error: KafkaError | None


class _Batch:
    """Delivery reports of one request's records; resolves its future when all are in.

    Itemized, each record has its own callback (its index bound to it). Otherwise one callback
    serves the whole batch, which lets librdkafka take it in one call (``produce_batch``): an
    acknowledgement only widens its partition's span, and a failure keeps the record's bytes, by
    which it is found among the request's records to be written elsewhere."""

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int, itemized: bool) -> None:
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.acked: dict[int, tuple[int, int]] | None = {} if itemized else None
        self.spans: dict[int, list[int]] = {}
        self.failed: list[int] = []
        self.failed_bytes: list[tuple[bytes | None, bytes | None]] = []
        self.error: KafkaError | None = None
        self.pending = size

    # Both run wherever the producer is polled: the event loop, or the thread flushing at shutdown.
    def on_delivery(self, index: int, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed.append(index)
            self.error = err
        else:
            partition, offset = msg.partition(), msg.offset()
            self.acked[index] = (partition, offset)  # type: ignore[index]
            _widen(self.spans, partition, offset)
        self._settled()

    def on_delivery_summed(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed_bytes.append((msg.key(), msg.value()))
            self.error = err
        else:
            _widen(self.spans, msg.partition(), msg.offset())
        self._settled()

    def _settled(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def written(self, records: list[Record]) -> Written:
        failed = self.failed
        if self.failed_bytes:  # found by their bytes; identical records are interchangeable
            where: dict[tuple[bytes, bytes], list[int]] = {}
            for index, record in enumerate(records):
                where.setdefault((record.key, record.value), []).append(index)
            failed = [where[(key or b"", value or b"")].pop() for key, value in self.failed_bytes]
        return Written(self.spans, self.acked, sorted(failed), self.error)


#: How often the event loop serves delivery reports while messages await them; when none do, it
#: still polls this often for the producer's error and log callbacks.
REPORTS_TICK = 0.001
IDLE_TICK = 1.0


class ClusterProducer:
    """One idempotent producer to one cluster. Its delivery reports are served on the event loop:
    a poll thread would take the GIL back for every single report, and under load that hand-over
    cost more than the reports themselves."""

    def __init__(self, platform: Platform, cluster: str, client_id: str, timeout_s: float,
                 bounded: bool = False) -> None:
        """``bounded``: a request in flight is given up after ``timeout_s`` too, not only a queued
        message (a logs cluster's bound holds for a broker that takes requests and never answers)."""
        self.cluster = cluster
        self._config = kafka.producer_config(platform, cluster, client_id, {
            **({"request.timeout.ms": int(timeout_s * 1000)} if bounded else {}),
            "message.timeout.ms": int(timeout_s * 1000),
            # A request's answer waits for its acks, so lingering only adds latency: the batches
            # that waiting requests queue meanwhile fill the next produce request anyway.
            "linger.ms": 1,
            "queue.buffering.max.messages": QUEUE_LIMIT + 1,
            "queue.buffering.max.kbytes": LIBRDKAFKA_QUEUE_KBYTES,
            "message.max.bytes": PRODUCER_MESSAGE_MAX,
        })
        self._producer: Producer | None = None
        self._reports: asyncio.Task[None] | None = None
        self._written = asyncio.Event()
        #: Key and value bytes of the records queued and not yet reported delivered.
        self._queued_bytes = 0

    def start(self, batch_size: int = PRODUCER_MESSAGE_MAX) -> None:
        """On the event loop that will call :meth:`write`; ``batch_size`` from the topics' limits."""
        self._producer = Producer({**self._config, "batch.size": batch_size})
        self._reports = asyncio.get_running_loop().create_task(self._serve_reports(self._producer))

    async def _serve_reports(self, producer: Producer) -> None:
        while True:
            producer.poll(0)
            if len(producer):
                await asyncio.sleep(REPORTS_TICK)
                continue
            self._written.clear()
            try:
                await asyncio.wait_for(self._written.wait(), IDLE_TICK)
            except TimeoutError:
                pass

    async def stop(self, timeout: float = 30.0) -> int:
        """Deliver what is queued, then stop; returns how many messages were left undelivered."""
        if self._producer is None:
            return 0
        if self._reports is not None:
            self._reports.cancel()  # the flush serves the last reports, on its own thread
        producer, self._producer = self._producer, None
        left = await asyncio.to_thread(producer.flush, timeout)
        # Without a close, librdkafka's threads live on and keep reconnecting to the cluster.
        await asyncio.to_thread(producer.close)
        return left

    def reachable(self, timeout: float = 2.0) -> bool:
        producer = self._producer
        if producer is None:  # stopped
            return False
        try:
            metadata = producer.list_topics(timeout=timeout)
        except KafkaException:
            return False
        return bool(metadata.brokers)

    async def write(self, topic: str, records: list[Record], itemized: bool, headers: Headers | None = None) -> Written:
        assert self._producer is not None
        size = sum(len(r.key) + len(r.value) for r in records)
        if len(self._producer) + len(records) > QUEUE_LIMIT or self._queued_bytes + size > QUEUE_BYTES:
            raise Overloaded(f"cluster {self.cluster} has {len(self._producer)} messages "
                             f"({self._queued_bytes} bytes) queued; retry later", retry_after=1, topic=topic)
        batch = _Batch(asyncio.get_running_loop(), len(records), itemized)
        self._queued_bytes += size
        try:
            if itemized:
                for index, record in enumerate(records):
                    self._producer.produce(topic, record.value, record.key, headers=_headers(record, headers),
                                           on_delivery=functools.partial(batch.on_delivery, index))
            elif headers:  # produce_batch writes no headers (librdkafka's batch call takes none)
                for record in records:
                    self._producer.produce(topic, record.value, record.key, headers=_headers(record, headers),
                                           on_delivery=batch.on_delivery_summed)
            else:
                # One call and one callback for the request: a third of produce()'s cost per record.
                messages = [{"key": r.key, "value": r.value} for r in records]
                queued = self._producer.produce_batch(topic, messages, on_delivery=batch.on_delivery_summed)
                if queued != len(records):
                    refused = next(m["_error"] for m in messages if "_error" in m)
                    raise KafkaException(refused)
        except (BufferError, KafkaException) as err:
            # Unreachable through the checks above and the gateway's size limits; if it happens
            # anyway, the records already queued are delivered and the client's retry carries the
            # same event ids, which the lake and the views count once.
            self._queued_bytes -= size
            log.error("produce to %s refused part of a request of %d records after the checks passed: %s",
                      self.cluster, len(records), err)
            raise Unavailable(f"cluster {self.cluster} refused the request part-way ({err}); retry it",
                              topic=topic) from None
        self._written.set()
        try:
            await batch.future
        finally:
            self._queued_bytes -= size
        return batch.written(records)


class Writer:
    """The local writable cluster, then the failover clusters in their declared order; or, when
    the local cluster serves logs, that cluster alone, waited on for ``logs_wait`` at most."""

    def __init__(self, platform: Platform, local: str, failover: list[str], failover_after: float,
                 client_id: str, on_switch=None, logs_wait: float = 0.5) -> None:
        self.local = local
        #: A logs cluster never holds a request up: what it does not acknowledge in time is shed.
        self.sheds = platform.cluster(local).purpose is Purpose.logs
        self.order = [local] if self.sheds else [local, *failover]
        self.failover_after = failover_after
        timeout = logs_wait if self.sheds else failover_after if failover else 60.0
        self._producers = {
            cluster: ClusterProducer(platform, cluster, client_id, timeout if cluster == local else 60.0,
                                     bounded=self.sheds)
            for cluster in self.order
        }
        self.active = local
        self._on_switch = on_switch or (lambda old, new, why: None)
        self._probe: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self, batch_size: int = PRODUCER_MESSAGE_MAX) -> None:
        """On the event loop that will call :meth:`write`."""
        for producer in self._producers.values():
            producer.start(batch_size)

    async def stop(self) -> int:
        self._stopping.set()
        return sum([await p.stop() for p in self._producers.values()])

    async def write(self, topic: str, records: list[Record], itemized: bool = False,
                    headers: Headers | None = None) -> Accepted:
        """Every record acknowledged by some writable cluster, or :class:`Unavailable`. ``itemized``:
        where each record went, for an answer that lists them; else only per partition.
        ``headers``: every record's."""
        accepted = Accepted(len(records), itemized)
        if self.sheds:
            return await self._write_shedding(topic, records, accepted, headers)
        todo = list(range(len(records)))
        start = self.order.index(self.active)
        last_error: KafkaError | None = None
        for cluster in self.order[start:]:
            written = await self._producers[cluster].write(topic, [records[i] for i in todo], itemized, headers)
            accepted.take(cluster, written, todo)
            if not written.failed:
                return accepted
            todo = [todo[i] for i in written.failed]
            last_error = written.error
            if cluster == self.local and len(self.order) > 1:
                self._fail_over(last_error)
        reason = last_error.str() if last_error else "no writable cluster"
        raise Unavailable(f"{len(todo)} of {len(records)} events were not acknowledged by any writable cluster "
                          f"({reason}); none of this request counts as accepted, retry it", topic=topic)

    async def _write_shedding(self, topic: str, records: list[Record], accepted: Accepted,
                              headers: Headers | None) -> Accepted:
        """One try at the logs cluster, bounded by its producer's message timeout; a full queue
        sheds the whole request at once rather than push back on the producer."""
        try:
            written = await self._producers[self.local].write(topic, records, accepted.deliveries is not None, headers)
        except (Overloaded, Unavailable):
            accepted.shed = list(range(len(records)))
            return accepted
        accepted.take(self.local, written, list(range(len(records))))
        accepted.shed = written.failed
        return accepted

    def writable(self, timeout: float = 1.0) -> str | None:
        """The first cluster, the active one first, whose brokers answer a metadata request; None when
        none does. Blocking: up to ``timeout`` per cluster that does not answer."""
        for cluster in sorted(self.order, key=lambda c: c != self.active):
            if self._producers[cluster].reachable(timeout):
                return cluster
        return None

    def _fail_over(self, error: KafkaError | None) -> None:
        if self.active != self.local:
            return
        self.active = self.order[1]
        why = error.str() if error else "no acknowledgement"
        log.warning("failover: %s did not acknowledge within %.1f s (%s); writing to %s",
                    self.local, self.failover_after, why, self.active)
        self._on_switch(self.local, self.active, why)
        self._probe = threading.Thread(target=self._probe_local, name="failback-probe", daemon=True)
        self._probe.start()

    def _probe_local(self) -> None:
        producer = self._producers[self.local]
        while not self._stopping.is_set():
            if producer.reachable():
                previous, self.active = self.active, self.local
                log.warning("failback: %s answers again; writing to it instead of %s", self.local, previous)
                self._on_switch(previous, self.local, "local cluster recovered")
                return
            self._stopping.wait(1.0)
