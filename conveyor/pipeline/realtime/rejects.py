"""The views' side output: each rejected event's record as it came (key and value byte for byte)
on ``pipeline.realtime.rejects_topic``, with why in its headers.

The platform's limits (``conveyor.limits``) leave an accepted event room for one hop's headers and
no more: so the record keeps the event's key and value unchanged and nothing else, and the
headers (kind, view, source coordinates, batch, reason) are fitted within ``HOP_HEADERS_MAX``.
A JSON envelope around the value could not carry the largest accepted event (escaping alone can
double a value).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform
from conveyor.limits import PRODUCER_MESSAGE_MAX, fit_headers, record_size
from conveyor.pipeline.errors import PipelineError
from conveyor.pipeline.realtime.deltas import Reject

log = logging.getLogger("conveyor.realtime")

#: Header names: ``conveyor-reject-<field>``; a field without a value (a malformed event's view) is left out.
HEADER_PREFIX = "conveyor-reject-"
#: Free text last: fit_headers cuts the last values first.
FIELDS = ("kind", "view", "topic", "partition", "offset", "batch", "value-omitted", "reason")
#: Seconds a full local queue is waited on per attempt while its records are delivered.
QUEUE_WAIT = 1.0


def reject_headers(reject: Reject, batch_id: int, omitted: int | None = None) -> list[tuple[str, bytes]]:
    values = {"kind": reject.kind, "view": reject.view, "topic": reject.topic, "partition": reject.partition,
              "offset": reject.offset, "batch": batch_id, "value-omitted": omitted, "reason": reject.reason}
    return fit_headers([(HEADER_PREFIX + name, str(values[name]).encode()) for name in FIELDS
                        if values[name] is not None])


def reject_fields(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """What a side-output record's headers say: ``kind``, ``view`` (absent for a malformed or
    future event), ``topic``, ``partition``, ``offset``, ``batch``, ``reason`` and, only for a
    record too large to copy, ``value-omitted`` (its size; its value is then empty)."""
    return {name.removeprefix(HEADER_PREFIX): (value or b"").decode(errors="replace")
            for name, value in headers or () if name.startswith(HEADER_PREFIX)}


class RejectsOutput:
    """One record per rejected event and view; the exact counts are in the job's Redis state."""

    def __init__(self, platform: Platform, cluster: str, topic: str) -> None:
        self.topic = topic
        spec = platform.cluster(cluster)
        declared = platform.topics.get(topic)
        admin = kafka.admin(platform, cluster)
        new = NewTopic(topic, declared.partitions if declared else 3, spec.default_replication_factor,
                       config={"min.insync.replicas": str(spec.default_min_insync)})
        try:
            admin.create_topics([new])[topic].result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise kafka.KafkaOperationError.from_exception(f"creating {topic} on {cluster}", exc) from None
        self.config = kafka.producer_config(platform, cluster, "conveyor-realtime-rejects",
                                            {"message.max.bytes": PRODUCER_MESSAGE_MAX})
        self.producer: Producer | None = Producer(self.config)

    def __getstate__(self) -> dict[str, object]:
        # The real-time mode sends rejects from Spark's tasks: the producer is made again where it lands.
        return {"topic": self.topic, "config": self.config}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.producer = Producer(self.config)

    def close(self) -> None:
        # Spark may keep the batch function referenced; the producer (threads, sockets) must not wait for that.
        self.producer = None

    def send(self, batch_id: int, rejects: tuple[Reject, ...]) -> None:
        """Write ``rejects`` and wait for every acknowledgement; a failure fails the batch, which
        Spark replays (at least once: a replay may write a reject again, same headers)."""
        producer = self.producer
        if producer is None:
            raise PipelineError("the side output is closed: the job has stopped")
        failed: list[KafkaError] = []

        def delivered(err: KafkaError | None, _: object) -> None:
            if err is not None:
                failed.append(err)

        for r in rejects:
            key, value, headers = r.key, r.raw, reject_headers(r, batch_id)
            if record_size(key, value, headers) > PRODUCER_MESSAGE_MAX:
                # Not an event the gateway accepted (written to the source cluster another way):
                # its coordinates still name it, and the topic still has it.
                log.warning("reject %s[%d]@%d: %d bytes of key and value, too large to copy; written without its "
                            "value", r.topic, r.partition, r.offset, len(key or b"") + len(value or b""))
                value, headers = None, reject_headers(r, batch_id, len(value or b""))
            while True:
                try:
                    producer.produce(self.topic, value, key, headers=headers, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: wait for deliveries to make room
                    producer.poll(QUEUE_WAIT)
            producer.poll(0)
        remaining = producer.flush(60)
        if remaining or failed:
            # Failing the batch makes Spark replay it: the rejects are sent again, never lost.
            raise PipelineError(f"side output {self.topic}: {remaining} undelivered, {len(failed)} failed "
                                f"({failed[0].str() if failed else 'timeout'})")
