"""A round trip through one cluster: create a scratch topic, produce with the platform's producer,
read everything back with its consumer, compare, delete the topic."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform
from conveyor.errors import ConveyorError

SMOKE_TOPIC = "_conveyor_smoke"


class SmokeError(ConveyorError):
    """The round trip lost, changed or could not deliver messages."""


@dataclass(frozen=True)
class SmokeResult:
    cluster: str
    produced: int
    consumed: int
    produce_seconds: float
    consume_seconds: float


def smoke(platform: Platform, cluster_name: str, messages: int = 100, timeout: float = 30.0) -> SmokeResult:
    cluster = platform.cluster(cluster_name)
    topic = f"{SMOKE_TOPIC}_{uuid.uuid4().hex[:8]}"
    admin = kafka.admin(platform, cluster_name)
    factor, min_insync = cluster.default_replication_factor, cluster.default_min_insync
    partitions = 3
    try:
        admin.create_topics(
            [NewTopic(topic, partitions, factor, config={"min.insync.replicas": str(min_insync)})]
        )[topic].result()
    except KafkaException as exc:
        raise SmokeError(f"{cluster_name}: could not create {topic}: {exc.args[0].str()}") from None
    try:
        return _round_trip(platform, cluster_name, topic, partitions, messages, timeout)
    finally:
        admin.delete_topics([topic])[topic].result()


def _round_trip(platform: Platform, cluster: str, topic: str, partitions: int, messages: int,
                timeout: float) -> SmokeResult:
    sent = {f"{i}".encode(): uuid.uuid4().bytes for i in range(messages)}
    failures: list[KafkaError] = []
    producer = kafka.producer(platform, cluster, "conveyor-smoke")
    started = time.monotonic()
    for key, value in sent.items():
        producer.produce(topic, value, key, on_delivery=lambda err, _msg: err and failures.append(err))
    left = producer.flush(timeout)
    produce_seconds = time.monotonic() - started
    if left or failures:
        reason = failures[0].str() if failures else f"{left} message(s) still queued after {timeout:.0f} s"
        raise SmokeError(f"{cluster}: produce failed: {reason}")

    consumer = kafka.consumer(platform, cluster, f"conveyor-smoke-{uuid.uuid4().hex[:8]}", "conveyor-smoke")
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    received: dict[bytes, bytes] = {}
    started = time.monotonic()
    try:
        while len(received) < messages and time.monotonic() - started < timeout:
            for message in consumer.consume(500, 1.0):
                if message.error():
                    raise SmokeError(f"{cluster}: consume failed: {message.error().str()}")
                received[message.key()] = message.value()
    finally:
        consumer.close()
    consume_seconds = time.monotonic() - started
    if received != sent:
        missing = len(set(sent) - set(received))
        changed = sum(1 for k in received if k in sent and received[k] != sent[k])
        raise SmokeError(f"{cluster}: read back {len(received)} of {messages} messages "
                         f"({missing} missing, {changed} changed)")
    return SmokeResult(cluster, messages, len(received), produce_seconds, consume_seconds)
