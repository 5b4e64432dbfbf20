"""RF 3 and min ISR 2 on the central cluster, proved by killing brokers.

One broker SIGKILLed while a producer streams: every write still succeeds. A second one killed:
writes fail with NOT_ENOUGH_REPLICAS instead of being accepted on a single copy. Both restarted:
every acknowledged message is there, once, with its content.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest
from confluent_kafka import KafkaError, TopicPartition

from conveyor import kafka
from conveyor.config import Platform
from conveyor.runtime.local import LocalPlatform
from tests.conftest import eventually, wait_full_isr

pytestmark = pytest.mark.chaos


class AckLog:
    """What the producer was told: acknowledged values and failures, from delivery callbacks."""

    def __init__(self) -> None:
        self.acked: dict[bytes, bytes] = {}
        self.failed: list[KafkaError] = []
        self._lock = threading.Lock()

    def callback(self, err: KafkaError | None, msg) -> None:
        with self._lock:
            if err is None:
                self.acked[msg.key()] = msg.value()
            else:
                self.failed.append(err)


def _stream(platform: Platform, topic: str, log: AckLog, stop: threading.Event, sent: list[bytes]) -> None:
    producer = kafka.producer(platform, "central", "chaos-stream")
    while not stop.is_set():
        key = uuid.uuid4().hex.encode()
        sent.append(key)
        producer.produce(topic, key[::-1], key, on_delivery=log.callback)
        producer.poll(0)
        time.sleep(0.002)
    assert producer.flush(60) == 0


def _leader_partition(platform: Platform, topic: str, broker_id: int) -> int:
    partitions = kafka.admin(platform, "central").list_topics(topic, timeout=10).topics[topic].partitions
    return next(p for p, meta in partitions.items() if meta.leader == broker_id)


def _read_all(platform: Platform, topic: str, partitions: int) -> dict[bytes, list[bytes]]:
    consumer = kafka.consumer(platform, "central", f"chaos-check-{uuid.uuid4().hex[:6]}", "chaos-check")
    admin = kafka.admin(platform, "central")
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[bytes, list[bytes]] = {}
    positions = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + 60
    while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
        for message in consumer.consume(1000, 1.0):
            assert message.error() is None, message.error()
            seen.setdefault(message.key(), []).append(message.value())
            positions[message.partition()] = message.offset() + 1
    consumer.close()
    del admin
    return seen


def test_one_broker_down_writes_go_on_two_down_writes_stop_nothing_acked_is_lost(
    platform: Platform, local: LocalPlatform, topic_factory, chaos_rng: random.Random
):
    partitions = 6
    topic = topic_factory("central", partitions)
    log, stop, sent = AckLog(), threading.Event(), []
    streamer = threading.Thread(target=_stream, args=(platform, topic, log, stop, sent))
    streamer.start()
    try:
        time.sleep(chaos_rng.uniform(0.5, 2.0))
        local.kill_broker("central", 3)  # SIGKILL mid-stream
        time.sleep(chaos_rng.uniform(8.0, 10.0))  # past the session timeout: broker 3 is fenced
    finally:
        stop.set()
        streamer.join()
    assert not log.failed, f"writes failed with one broker down: {log.failed[:3]}"
    assert len(log.acked) == len(sent) > 100

    # Second broker down: only broker 1 is left in the ISR, below min.insync.replicas=2.
    local.kill_broker("central", 2)
    strict = kafka.producer(platform, "central", "chaos-strict",
                            {"enable.idempotence": False, "retries": 0, "message.timeout.ms": 10_000})
    errors: list[KafkaError] = []

    def refused() -> bool:
        outcome = AckLog()
        strict.produce(topic, b"must-not-land", b"strict", partition=_leader_partition(platform, topic, 1),
                       on_delivery=outcome.callback)
        strict.flush(15)
        errors.extend(outcome.failed)
        assert not outcome.acked, "a write was acknowledged with one in-sync replica"
        return bool(errors) and errors[-1].code() == KafkaError.NOT_ENOUGH_REPLICAS

    eventually(refused, 45, "a write refused with NOT_ENOUGH_REPLICAS", interval=1)
    assert "NOT_ENOUGH_REPLICAS" in errors[-1].name()

    local.start_brokers("central", 2, 3)
    wait_full_isr(platform, topic)

    landed = _read_all(platform, topic, partitions)
    missing = [k for k in log.acked if k not in landed]
    assert not missing, f"{len(missing)} acknowledged messages lost"
    assert all(landed[k] == [v] for k, v in log.acked.items()), "an acknowledged message changed or repeated"
    assert set(landed) <= set(sent) | {b"strict"}
