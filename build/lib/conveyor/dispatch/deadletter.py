"""The dead-letter topic of a (topic, group): where messages go after ``max_attempts`` deliveries,
with why in their headers.

A dead letter is the event's key and value unchanged, its headers and the dispatcher's own (kept
within ``conveyor.limits.HOP_HEADERS_MAX``), through a producer whose ``message.max.bytes`` is the
platform's, so the largest event the gateway accepts always fits. Writing one never raises out of
the reader: a full local queue is waited out for a bounded time, and a letter that no retry can
write (larger than the producer or the dead-letter topic takes) is reported as ``UNWRITABLE``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform
from conveyor.dispatch.partition import DeadLetter
from conveyor.limits import PRODUCER_MESSAGE_MAX, fit_headers

log = logging.getLogger(__name__)

#: Errors no retry cures: the record is larger than the producer (raised by ``produce``) or the
#: dead-letter topic (the broker's answer) accepts, until an operator changes a limit.
UNWRITABLE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE,
                        KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD})
#: Longest wait for room in a full local queue in one turn of a reader's loop: the loop also
#: delivers and commits, so letters that still find the queue full wait for a later turn.
QUEUE_FULL_WAIT = 2.0

Delivered = Callable[[KafkaError | None, Message], None]


def dead_letter_producer(platform: Platform, cluster_name: str, topic: str, group: str) -> Producer:
    """A producer for ``topic``, created first if missing (one partition, the cluster's replication)."""
    admin = kafka.admin(platform, cluster_name)
    cluster = platform.cluster(cluster_name)
    spec = NewTopic(topic, 1, cluster.default_replication_factor,
                    config={"min.insync.replicas": str(cluster.default_min_insync)})
    try:
        admin.create_topics([spec])[topic].result(30)
        log.info("created dead-letter topic %s", topic)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    # One record per batch: the broker refuses a batch above the topic's max.message.bytes whole, so
    # a refusal then says that this record cannot be written, not that its neighbours made it too large.
    return kafka.producer(platform, cluster_name, f"conveyor-dispatch-dead-letter-{group}",
                          {"message.max.bytes": PRODUCER_MESSAGE_MAX, "batch.num.messages": 1})


def dead_letter_headers(topic: str, group: str, partition: int, letter: DeadLetter) -> list[tuple[str, bytes]]:
    """The event's own headers, then the dispatcher's, which ``fit_headers`` keeps within one hop's share."""
    return [*letter.record.headers, *fit_headers([
        ("conveyor-dead-letter-reason", letter.reason.value.encode()),
        ("conveyor-dead-letter-attempts", str(letter.attempts).encode()),
        ("conveyor-dead-letter-topic", topic.encode()),
        ("conveyor-dead-letter-partition", str(partition).encode()),
        ("conveyor-dead-letter-offset", str(letter.offset).encode()),
        ("conveyor-dead-letter-group", group.encode()),
    ])]


def send(producer: Producer, topic: str, letter: DeadLetter, headers: list[tuple[str, bytes]],
         on_delivery: Delivered, give_up_at: float) -> KafkaError | None:
    """Queue ``letter``; None once queued (``on_delivery`` then hears Kafka's answer), else why not:
    ``_QUEUE_FULL`` while the queue stays full until ``give_up_at``, or the error ``produce`` raised."""
    while True:
        try:
            producer.produce(topic, letter.record.value, letter.record.key, headers=headers, on_delivery=on_delivery)
            return None
        except BufferError:
            if time.monotonic() >= give_up_at:
                return KafkaError(KafkaError._QUEUE_FULL)
            producer.poll(0.1)  # delivery reports free room
        except KafkaException as exc:
            return exc.args[0]
