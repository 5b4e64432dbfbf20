"""What the dispatcher's integration and chaos tests share: a platform that declares the test's
topic, producing numbered messages, a ledger of deliveries and confirmed acks, waiting."""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.dispatch.server import DispatchNode
from tests.conftest import eventually, platform_variant

MAILER_TOKEN = "demo-mailer-token"
NOTIFIER_TOKEN = "demo-notifier-token"


def dispatch_platform(platform_file: Path, platform_data: dict[str, Any], topic: str,
                      consumers: tuple[str, ...] = ("mailer",), **dispatch: Any) -> tuple[Path, Platform]:
    """The test platform plus ``topic`` (read by ``consumers``) and ``dispatch`` settings,
    written next to the session's platform file so that subprocesses can load it too."""
    data = copy.deepcopy(platform_data)
    data["topics"][topic] = {"partitions": 3, "producers": ["notifier"], "consumers": list(consumers),
                             "clusters": ["central"]}
    data["dispatch"] = {**data.get("dispatch", {}), **dispatch}
    path = platform_file.parent / f"dispatch-{topic}.yaml"
    return path, platform_variant(data, path)


def topic_maker(platform_file: Path, platform_data: dict[str, Any], topic_factory: Callable[..., str],
                **defaults: Any) -> Callable[..., tuple[Platform, str]]:
    """``make(**dispatch)``: a fresh 3-partition topic on central, declared for mailer (or
    ``consumers``), and the platform with ``defaults`` and ``dispatch`` as its dispatch settings."""
    def make(consumers: tuple[str, ...] = ("mailer",), **dispatch: Any) -> tuple[Platform, str]:
        topic = topic_factory("central", 3)
        _, platform = dispatch_platform(platform_file, platform_data, topic, consumers,
                                        **{**defaults, **dispatch})
        return platform, topic
    return make


@pytest.fixture
def setup(platform_file: Path, platform_data: dict[str, Any], provisioned: Platform,
          topic_factory: Callable[..., str]) -> Callable[..., tuple[Platform, str]]:
    """A fresh 3-partition topic on central, declared for mailer, with the classic backend's
    dispatch settings (a test module with another backend defines its own)."""
    return topic_maker(platform_file, platform_data, topic_factory, commit_interval="200ms")


@pytest.fixture
def nodes() -> Iterator[list[DispatchNode]]:
    """Dispatcher nodes a test started, stopped after it."""
    started: list[DispatchNode] = []
    yield started
    for node in started:
        node.close(grace=1)


def start_node(platform: Platform) -> DispatchNode:
    # Port 0: the node binds what the OS gives; a port probed free first can be taken (by one of the
    # many Kafka client connections) before the node binds it.
    node = DispatchNode(platform, port=0, metrics_port=0)
    node.start()
    return node


def produce(platform: Platform, topic: str, count: int, start: int = 0) -> list[bytes]:
    """``count`` messages whose values are their numbers, spread over the partitions by key."""
    producer = kafka.producer(platform, "central", "dispatch-test")
    values = [str(i).encode() for i in range(start, start + count)]
    for value in values:
        producer.produce(topic, value, key=value)
        producer.poll(0)
    assert producer.flush(60) == 0
    return values


class Ledger:
    """Deliveries and confirmed acks by message id, from any number of threads."""

    def __init__(self) -> None:
        self.deliveries: Counter[tuple[int, int]] = Counter()
        self.values: dict[tuple[int, int], bytes] = {}
        self.confirmed: set[tuple[int, int]] = set()
        self.by_client: Counter[int] = Counter()
        self._lock = threading.Lock()

    def delivered(self, client: int, partition: int, offset: int, value: bytes) -> None:
        with self._lock:
            self.deliveries[(partition, offset)] += 1
            self.values[(partition, offset)] = value
            self.by_client[client] += 1

    def committed(self, ids: list[tuple[int, int]]) -> None:
        with self._lock:
            self.confirmed.update(ids)

    def counts(self) -> str:
        """How far the clients got: to say where a stream stalled."""
        with self._lock:
            return (f"{len(self.values)} delivered ({sum(self.deliveries.values())} deliveries), "
                    f"{len(self.confirmed)} confirmed")

    def confirmed_values(self) -> set[bytes]:
        with self._lock:
            return {self.values[i] for i in self.confirmed if i in self.values}


def thirty_clients_read_everything(sent: set[bytes], subscribe: Callable[[int, Ledger], Any],
                                   timeout: float) -> Ledger:
    """30 subscribers (``subscribe(i, ledger)`` makes number i) until every message in ``sent``
    is acked and confirmed; each must have been delivered exactly once, to every client."""
    ledger = Ledger()
    subs = [subscribe(i, ledger) for i in range(30)]
    for sub in subs:
        sub.start()
    try:
        try:
            eventually(lambda: ledger.confirmed_values() >= sent, timeout, "every message acked and confirmed")
        except AssertionError as slow:
            raise AssertionError(f"{slow}: of {len(sent)} sent, {ledger.counts()}") from None
    finally:
        for sub in subs:
            sub.stop()
    assert set(ledger.values.values()) == sent
    assert sum(ledger.deliveries.values()) == len(sent), "no fault, so no message is delivered twice"
    assert len(ledger.by_client) == 30, f"round-robin reaches every client: {sorted(ledger.by_client.items())}"
    return ledger


def committed_offsets(platform: Platform, topic: str, group: str) -> dict[int, tuple[int, str]]:
    """The group's committed (offset, metadata) per partition, as Kafka stores them. A coordinator
    that is moving or loading (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) is asked again."""
    from confluent_kafka import KafkaException, TopicPartition

    consumer = kafka.consumer(platform, "central", group, "dispatch-test-inspect")
    try:
        tps = eventually(lambda: consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10),
                         30, f"the committed offsets of {group}", errors=(KafkaException,))
    finally:
        consumer.close()
    return {tp.partition: (tp.offset, tp.metadata or "") for tp in tps}


def unacked_in_share_group(platform: Platform, topic: str, group: str, expected: set[tuple[int, int]],
                           grace: float = 5.0, timeout: float = 60.0) -> set[tuple[int, int]]:
    """What a share consumer of ``group`` can still acquire: the records nobody acked. It takes
    them (explicit mode allows no next poll before), so ask once, at the end of a test. Reads until
    ``expected`` has come and ``grace`` seconds more passed (a new member's first assignment takes
    a heartbeat or more), at most ``timeout`` seconds."""
    from confluent_kafka import AcknowledgeType

    consumer = kafka.share_consumer(platform, "central", group, "dispatch-test-leftovers")
    consumer.subscribe([topic])
    found: set[tuple[int, int]] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                if message.error() is None:
                    found.add((message.partition(), message.offset()))
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            if expected <= found:
                deadline = min(deadline, time.monotonic() + grace)
    finally:
        consumer.close()
    return found


def end_offsets(platform: Platform, topic: str) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    consumer = kafka.consumer(platform, "central", "dispatch-test-ends", "dispatch-test-ends")
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)}
    finally:
        consumer.close()
