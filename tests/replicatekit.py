"""Helpers of the replicator's chaos tests (tests/chaos/replicate/); test modules import them.

Routes copy dc1 and dc2 into central; :class:`Workers` runs their worker processes and kills them at
will, :class:`Traffic` writes keyed events with per-key sequence numbers and remembers what was
acknowledged, and the readers compare what central holds with what the sources hold.
"""

from __future__ import annotations

import copy
import logging
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform
from tests.conftest import eventually, platform_variant
from tests.processkit import track

ROUTES = ("dc1-central", "dc2-central")
BASE = "rep-base"


def route_platform_file(platform_data, platform_file: Path, pattern: str, mode: str) -> tuple[Platform, Path]:
    data = copy.deepcopy(platform_data)
    for name in ROUTES:
        # The session's buckets: its route topic (one partition a bucket) may exist already, made by
        # another test's worker of the same route, and Kafka cannot shrink it to fewer.
        data["routes"][name] = {**data["routes"][name], "topics": [], "pattern": pattern, "mode": mode}
    path = platform_file.parent / f"replicate-{pattern.split('-')[0]}-{mode}.yaml"
    return platform_variant(data, path), path


class Workers:
    """Worker processes of both routes, killed and restarted at will."""

    def __init__(self, platform_file: Path, log_dir: Path, rng: random.Random) -> None:
        self.platform_file, self.log_dir = platform_file, log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.rng = rng

    def start(self, name: str) -> None:
        """Worker ``<route>-w<i>`` of one route, or ``all-w<i>``, a worker of every route."""
        route = name.rsplit("-w", 1)[0]
        routes = [] if route == "all" else ["--route", route]
        log = open(self.log_dir / f"{name}.log", "ab")
        self.procs[name] = track(subprocess.Popen(
            [sys.executable, "-m", "conveyor", "replicate", "worker", *routes, "--id", name,
             "--platform", str(self.platform_file)], stdout=log, stderr=subprocess.STDOUT))

    def kill_one(self) -> str:
        name = self.rng.choice(sorted(self.procs))
        self.procs[name].kill()
        self.procs[name].wait()
        return name

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            proc.wait(120)


def wait_until_led(producer, topic: str, partitions: int | None = None) -> list[int]:
    """Until the producer's metadata has every partition of ``topic`` (``partitions`` of them, or
    any number) with a leader; their numbers. Producers here write to a new topic only then, as a
    service writes only to provisioned topics: one acked event was once missing from a topic
    written to within its first second (docs/replicate.md, "One request in flight")."""
    def led() -> list[int] | None:
        found = producer.list_topics(topic, timeout=10).topics[topic]
        expected = partitions if partitions is not None else max(1, len(found.partitions))
        if found.error is None and len(found.partitions) == expected and all(
                p.leader >= 0 for p in found.partitions.values()):
            return sorted(found.partitions)
        return None

    return eventually(led, 30, f"the producer to see {topic} with {partitions or 'all its'} partitions led")


class Traffic:
    """Keyed events with per-key sequence numbers into dc1 and dc2; remembers what was acked."""

    def __init__(self, platform: Platform, rng: random.Random, base: str = BASE, log_dir: Path | None = None) -> None:
        self.platform, self.log_dir = platform, log_dir
        # One generator per data centre's thread, each seeded from the test's: the same seed sends
        # the same sequence from each, whatever the threads' interleaving.
        self.rngs = {dc: random.Random(rng.randrange(1 << 32)) for dc in ("dc1", "dc2")}
        self.topics = {"dc1": [base], "dc2": [base]}
        self.acked: Counter[tuple[str, str, str, int]] = Counter()
        #: Where each acked event was written on its source: (partition, offset).
        self.written: dict[tuple[str, str, str, int], tuple[int, int]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.producers = {dc: self._producer(dc) for dc in ("dc1", "dc2")}
        self.threads = [threading.Thread(target=self._run, args=(dc,)) for dc in ("dc1", "dc2")]

    def _producer(self, dc: str):
        # librdkafka's own account of metadata and idempotence, kept for when an acked event is missing.
        debug = {}
        if self.log_dir is not None:
            handler = logging.FileHandler(self.log_dir / f"producer-{dc}.log")
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            client_log = logging.getLogger(f"chaos-producer-{dc}-{uuid.uuid4().hex[:6]}")
            client_log.addHandler(handler)
            client_log.setLevel(logging.DEBUG)
            client_log.propagate = False
            debug = {"debug": "topic,metadata,eos,msg", "logger": client_log}
        # One request in flight: with two, librdkafka was seen to report a batch refused by a new
        # partition's not-yet-ready leader (NOT_LEADER, not persisted) as delivered, because the
        # next batch succeeded ("implicitly acked"); the source never held those events.
        return kafka.producer(self.platform, dc, f"chaos-{dc}", {**debug, "max.in.flight.requests.per.connection": 1})

    def _run(self, dc: str) -> None:
        producer = self.producers[dc]
        seq: Counter[tuple[str, str]] = Counter()

        def acked(err, msg) -> None:
            if err is None:
                event = orjson.loads(msg.value())
                with self._lock:
                    self.acked[(dc, msg.topic(), event["key"], event["seq"])] += 1
                    self.written[(dc, msg.topic(), event["key"], event["seq"])] = (msg.partition(), msg.offset())

        rng = self.rngs[dc]
        while not self._stop.is_set():
            with self._lock:
                topic = rng.choice(self.topics[dc])
            key = f"k{rng.randrange(40)}"
            seq[(topic, key)] += 1
            value = {"key": key, "seq": seq[(topic, key)], "src": dc}
            producer.produce(topic, orjson.dumps(value), key.encode(), on_delivery=acked)
            producer.poll(0)
            time.sleep(0.002)
        assert producer.flush(60) == 0

    def add_topic(self, dc: str, topic: str, partitions: int) -> None:
        wait_until_led(self.producers[dc], topic, partitions)
        with self._lock:
            self.topics[dc].append(topic)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self.threads:
            if thread.ident is not None:
                thread.join()


def create_topic(platform: Platform, cluster: str, topic: str, partitions: int) -> None:
    admin = kafka.admin(platform, cluster)
    admin.create_topics([NewTopic(topic, partitions, platform.cluster(cluster).default_replication_factor)])[
        topic].result()


# librdkafka does not flag a watermark query answered by a former leader as retriable, though a metadata
# refresh finds the new one.
_LEADER_MOVED = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH}


def _end_offset(consumer: Any, tp: TopicPartition) -> int:
    """The partition's end offset; asked again while its leader moves (tests that stop brokers)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=10)[1]
        except KafkaException as err:
            error = err.args[0]
            if not (error.retriable() or error.code() in _LEADER_MOVED) or time.monotonic() > deadline:
                raise
            time.sleep(1)


def read_records(platform: Platform, topics: list[str], isolation: str = "read_committed", cluster: str = "central",
             decode: Callable[[bytes], Any] = orjson.loads) -> list[tuple[str, int, int, Any]]:
    consumer = kafka.consumer(platform, cluster, f"verify-{uuid.uuid4().hex[:6]}", "verify",
                              {"isolation.level": isolation})
    metadata = consumer.list_topics(timeout=10)
    assignment, ends = [], {}
    for topic in topics:
        for partition in metadata.topics[topic].partitions:
            tp = TopicPartition(topic, partition, 0)
            assignment.append(tp)
            ends[(topic, partition)] = _end_offset(consumer, tp)
    consumer.assign(assignment)
    records = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for message in consumer.consume(2000, 0.5):
            if message.error() is None:
                records.append((message.topic(), message.partition(), message.offset(), decode(message.value())))
        # Positions, not record offsets: transaction markers take offsets no record is returned for.
        # An empty partition has no position yet (negative), and nothing to wait for.
        positions = consumer.position(assignment)
        if all(max(tp.offset, 0) >= ends[(tp.topic, tp.partition)] for tp in positions):
            break
    consumer.close()
    return records


def copies_of(records: list[tuple[str, int, int, dict]]) -> Counter[tuple[str, str, str, int]]:
    """Copies per event, keyed as Traffic.acked is."""
    return Counter((v["src"], topic, v["key"], v["seq"]) for topic, _, _, v in records)


def on_sources(platform: Platform, traffic: Traffic, topics: list[str]) -> Counter[tuple[str, str, str, int]]:
    """The events dc1 and dc2 hold, read back: what the replicator had to copy. Fails when they
    lack an event the producer saw acknowledged, which is a loss before the replicator."""
    events: Counter[tuple[str, str, str, int]] = Counter()
    for dc in ("dc1", "dc2"):
        events += copies_of(read_records(platform, [t for t in topics if t in traffic.topics[dc]], cluster=dc))
    lost = traffic.acked - events
    if lost:
        pytest.fail(f"{sum(lost.values())} acknowledged events are not on their source cluster, so the loss "
                    "happened before the replicator; the producers' librdkafka logs are in the test's folder: "
                    + "; ".join(f"{e} acked at (partition, offset) {traffic.written.get(e)}" for e in sorted(lost)[:5]))
    return events


def missing_on_central(platform: Platform, expected: Counter, topics: list[str]) -> Counter | None:
    """Source events not on central yet; None while a topic is absent there."""
    consumer = kafka.consumer(platform, "central", "count", "count")
    metadata = consumer.list_topics(timeout=10)
    # read_committed end offsets include commit markers, so compare by reading the records instead.
    present = all(t in metadata.topics for t in topics)
    consumer.close()
    if not present:
        return None
    return expected - copies_of(read_records(platform, topics))


def explain_missing(platform: Platform, missing: Counter, topics: list[str],
                     written: dict[tuple[str, str, str, int], tuple[int, int]]) -> str:
    """How many events miss per (source, topic), and where the first ones are: their place on the
    source, and whether central holds them uncommitted (an aborted or still open transaction)."""
    per_topic: Counter[tuple[str, str]] = Counter()
    for (src, topic, _, _), n in missing.items():
        per_topic[(src, topic)] += n
    uncommitted = {(v["src"], topic, v["key"], v["seq"]): (partition, offset)
                   for topic, partition, offset, v in read_records(platform, topics, "read_uncommitted")}
    return f"missing per (source, topic): {dict(per_topic)}; " + "; ".join(
        f"{event} (source partition, offset {written.get(event)}): "
        + (f"on central uncommitted at {uncommitted[event]}" if event in uncommitted else "not on central")
        for event in sorted(missing)[:5])


def wait_until_replicated(platform: Platform, topic: str) -> None:
    """Until the replicator has created ``topic`` on central."""
    eventually(lambda: topic in kafka.admin(platform, "central").list_topics(timeout=10).topics, 90,
               f"the replicator to create {topic} on central", interval=0.5)


def start_route_workers(platform: Platform, platform_file: Path, tmp_path: Path, rng: random.Random,
                        base: str = BASE) -> Workers:
    for dc in ("dc1", "dc2"):
        create_topic(platform, dc, base, 6)
    workers = Workers(platform_file, tmp_path, rng)
    for route in ROUTES:
        for i in range(2):
            workers.start(f"{route}-w{i}")
    wait_until_replicated(platform, base)
    return workers


def wait_until_copied(platform: Platform, traffic: Traffic, topics: list[str], workers: Workers) -> Counter:
    """The source events, once central has every one of them."""
    try:
        expected = on_sources(platform, traffic, topics)
        deadline = time.monotonic() + 300
        while (missing := missing_on_central(platform, expected, topics)) != Counter():
            if time.monotonic() > deadline:
                pytest.fail("central did not receive every source event in time; " + (
                    "a topic is absent on central" if missing is None
                    else explain_missing(platform, missing, topics, traffic.written)))
            time.sleep(3)
        return expected
    finally:
        workers.stop_all()


class InProcessWorker:
    """A route's worker in this process, copying until the ``with`` block ends."""

    def __init__(self, platform: Platform, route: str) -> None:
        from conveyor.replicate.worker import Worker

        self.worker = Worker(platform, route, f"{route}-w0")
        self.thread = threading.Thread(target=self.worker.run, daemon=True)

    def __enter__(self) -> Any:
        self.thread.start()
        return self.worker

    def __exit__(self, *_exc: object) -> None:
        self.worker.stop()
        self.thread.join(120)
        assert not self.thread.is_alive(), "the worker did not stop"
