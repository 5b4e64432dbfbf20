"""Helpers of the balance and throttle tests (and bench): topics with a given assignment, a producer
that records every acknowledgement, per-broker counts."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform
from conveyor.ops.balance.live import read_metadata
from conveyor.kafka_tools import KafkaTools
from tests.conftest import eventually


def create_topic(platform: Platform, cluster: str, partitions: int, factor: int, min_insync: int = 1) -> str:
    name = f"bal-{uuid.uuid4().hex[:10]}"
    admin = kafka.admin(platform, cluster)
    admin.create_topics([NewTopic(name, partitions, factor, config={"min.insync.replicas": str(min_insync)})])[name] \
        .result()
    return name


def delete_topics(platform: Platform, cluster: str, topics: list[str]) -> None:
    admin = kafka.admin(platform, cluster)
    for future in admin.delete_topics(topics).values():
        future.result()


def reassign_and_wait(platform: Platform, cluster: str, assignment: dict[tuple[str, int], tuple[int, ...]],
                      timeout: float = 120.0) -> None:
    """Move partitions with Kafka's tool, wait for full ISR, and make the first replica lead."""
    tools = KafkaTools(platform, cluster)
    tools.reassign_execute(assignment, throttle=None)
    admin = kafka.admin(platform, cluster)
    def moved() -> bool:
        partitions = read_metadata(platform, cluster, admin, {t for t, _ in assignment}).partitions
        return all(partitions[tp].replicas == r and set(partitions[tp].isr) >= set(r) for tp, r in assignment.items())

    eventually(moved, timeout, "the reassignment to complete with full ISRs", interval=0.5)
    assert tools.reassign_verify(assignment).done
    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(t, p) for t, p in assignment]).result()
    assert all(e is None or e.code() == KafkaError.ELECTION_NOT_NEEDED for e in results.values()), results
    # The election is done on the controller; the brokers' metadata follows a moment later.
    topics = {t for t, _ in assignment}
    eventually(lambda: all(read_metadata(platform, cluster, admin, topics).partitions[tp].leader == r[0]
                           for tp, r in assignment.items()), 30, "the first replicas to lead")


def counts(platform: Platform, cluster: str, topics: set[str]) -> tuple[Counter, Counter, dict]:
    """(replicas per broker, leaders per broker, replicas per partition) of ``topics``."""
    partitions = read_metadata(platform, cluster, topics=topics).partitions
    replicas = Counter(b for meta in partitions.values() for b in meta.replicas)
    leaders = Counter(meta.leader for meta in partitions.values())
    return replicas, leaders, {tp: meta.replicas for tp, meta in partitions.items()}


class AckedStream:
    """Produces to ``topics`` in a thread until stopped; keeps every value Kafka acknowledged."""

    def __init__(self, platform: Platform, cluster: str, topics: list[str], interval: float = 0.002) -> None:
        self.platform, self.cluster, self.topics, self.interval = platform, cluster, topics, interval
        self.acked: dict[str, set[bytes]] = {t: set() for t in topics}
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: KafkaError | None, msg) -> None:
        if err is None:
            self.acked[msg.topic()].add(msg.value())
        else:
            self.failures.append(err.str())

    def _run(self) -> None:
        producer = kafka.producer(self.platform, self.cluster, "balance-test-stream")
        i = 0
        while not self._stop.is_set():
            topic = self.topics[i % len(self.topics)]
            producer.produce(topic, f"{i}:{uuid.uuid4().hex}".encode(), str(i).encode(), on_delivery=self._delivered)
            producer.poll(0)
            i += 1
            time.sleep(self.interval)
        producer.flush(120)

    def __enter__(self) -> AckedStream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(180)


def preload(platform: Platform, cluster: str, topic: str, messages: int, size: int = 1000) -> None:
    """``messages`` incompressible values of ``size`` bytes, so that replica moves copy real bytes."""
    producer = kafka.producer(platform, cluster, "balance-preload", {"compression.type": "none"})
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, os.urandom(size), str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def wait_ports_free(ports: list[int], timeout: float = 120) -> None:
    """A port a stopped broker or exporter held can stay busy a while (a connection to it closing),
    and a broker or exporter started then fails to bind. Wait until each can be bound."""
    def bindable(port: int) -> bool:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return False
            return True

    deadline = time.monotonic() + timeout
    for port in ports:
        eventually(lambda: bindable(port), max(1.0, deadline - time.monotonic()), f"port {port} to be free",
                   interval=1)
