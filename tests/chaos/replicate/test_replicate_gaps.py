"""Retention deleting what the replicator had not copied yet is a recorded gap: logged, counted
(from zero, so that Prometheus's ReplicationGap sees the first one), written to the route topic and
shown by `conveyor replicate status`."""

from __future__ import annotations

import copy
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import TopicPartition

from conveyor import kafka
from tests.conftest import eventually, free_port, platform_variant
from tests.replicatekit import create_topic, read_records, wait_until_led, wait_until_replicated

pytestmark = pytest.mark.chaos




def _gap_records_metric(port: int, route: str, topic: str) -> float | None:
    """The worker's count of gap records for the topic; None while its page has no such series."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return next((s.value for f in text_string_to_metric_families(page) for s in f.samples
                 if s.name == "conveyor_replicate_gap_records_total" and s.labels == {"route": route, "topic": topic}),
                None)


def _gaps_of(status, topic: str) -> tuple:
    """The route's recorded gaps in ``topic`` (the route topic outlives a test's topics)."""
    return tuple(g for g in status.gaps if g.topic == topic)


def test_offsets_retention_deleted_before_they_were_copied_are_a_recorded_gap(provisioned, platform_data,
                                                                              platform_file, tmp_path):
    """Retention deleting what the copier had not copied yet, while the worker runs (frozen for a
    moment) and while it is stopped: each gap is logged, counted, written to the route topic and
    shown by `conveyor replicate status` with its exact offsets, also after the workers are gone;
    every record after a gap is copied exactly once, in order."""
    from conveyor.replicate.plan import Gap
    from conveyor.replicate.status import route_status

    route, topic = "dc1-gap", f"gap-{uuid.uuid4().hex[:6]}"
    data = copy.deepcopy(platform_data)
    data["routes"] = {route: {"source": "dc1", "destination": "central", "pattern": "gap-.*", "buckets": 2}}
    path = platform_file.parent / "replicate-gap.yaml"
    platform = platform_variant(data, path)
    create_topic(platform, "dc1", topic, 3)
    producer = kafka.producer(platform, "dc1", "gap", {"linger.ms": 0})
    wait_until_led(producer, topic, 3)
    admin = kafka.admin(platform, "dc1")
    ends = {0: 0, 1: 0, 2: 0}
    misplaced: list[tuple[int, int, bytes]] = []

    def delivered(err, msg) -> None:
        if err is not None or msg.value() != f"{msg.partition()}-{msg.offset()}".encode():
            misplaced.append((msg.partition(), msg.offset(), msg.value()))

    def produce(partition: int, count: int) -> None:
        """Records whose value is their own offset on the source ("partition-offset")."""
        for _ in range(count):
            producer.produce(topic, f"{partition}-{ends[partition]}".encode(), partition=partition,
                             on_delivery=delivered)
            ends[partition] += 1
        assert producer.flush(30) == 0 and not misplaced, misplaced

    def delete_before(partition: int, offset: int) -> None:
        """What retention does, on purpose: the partition's earliest offset becomes ``offset``."""
        deleted = admin.delete_records([TopicPartition(topic, partition, offset)])
        assert [f.result().low_watermark for f in deleted.values()] == [offset]

    def copied() -> dict[int, list[bytes]]:
        found: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
        for _, partition, _, value in sorted(read_records(platform, [topic], decode=bytes), key=lambda r: (r[1], r[2])):
            found[partition].append(value)
        return found

    def wait_for(expected: dict[int, list[int]]) -> None:
        wanted = {p: [f"{p}-{o}".encode() for o in offsets] for p, offsets in expected.items()}
        eventually(lambda: copied() == wanted, 90, f"central to hold {wanted}", interval=1)

    port = free_port()

    def start() -> subprocess.Popen:
        log = open(tmp_path / "worker.log", "ab")
        return subprocess.Popen([sys.executable, "-m", "conveyor", "replicate", "worker", "--route", route, "--id",
                                 f"{route}-w0", "--platform", str(path), "--metrics-port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT)

    worker = start()
    try:
        wait_until_replicated(platform, topic)
        produce(0, 10)
        produce(1, 10)
        wait_for({0: list(range(10)), 1: list(range(10)), 2: []})  # partition 2 is empty, but known
        # At zero before any gap: a counter that first appears at its first gap shows Prometheus's
        # increase() no increase, and ReplicationGap would never fire for that gap.
        assert _gap_records_metric(port, route, topic) == 0

        # While the worker runs: frozen past a fetch's wait, so no fetch in flight sees the records.
        worker.send_signal(signal.SIGSTOP)
        time.sleep(1.5)
        produce(1, 20)  # offsets 10..29
        delete_before(1, 25)
        worker.send_signal(signal.SIGCONT)
        copied_before = {0: list(range(10)), 1: [*range(10), *range(25, 30)], 2: []}
        wait_for(copied_before)

        # While it is stopped.
        worker.terminate()
        assert worker.wait(60) == 0
        produce(0, 20)  # 10..29
        delete_before(0, 25)
        produce(0, 5)  # 30..34
        produce(2, 10)  # 0..9: written after the worker had stored where partition 2 starts
        delete_before(2, 6)
        worker = start()
        wait_for({0: [*range(10), *range(25, 35)], 1: copied_before[1], 2: list(range(6, 10))})
        expected_gaps = (Gap(topic, 0, 10, 24), Gap(topic, 1, 10, 24), Gap(topic, 2, 0, 5))
        assert _gaps_of(route_status(platform, route), topic) == expected_gaps
        # This process found two of the three gaps: 15 + 6 offsets.
        eventually(lambda: _gap_records_metric(port, route, topic) == 15 + 6, 30,
                   "the gap records metric to count 21 offsets", interval=0.5)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGCONT)
            worker.terminate()
            worker.wait(60)

    # Durable: shown with no worker running, recorded once although two workers found them in turn.
    assert _gaps_of(route_status(platform, route), topic) == expected_gaps
    shown = subprocess.run([sys.executable, "-m", "conveyor", "replicate", "status", "--route", route, "--platform",
                            str(path)], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    for gap in expected_gaps:
        assert (f"DATA LOST: route {route}: {topic}[{gap.partition}] offsets {gap.first}..{gap.last} "
                f"({gap.count} records) were deleted by the source's retention") in shown.stdout, shown.stdout
    logs = (tmp_path / "worker.log").read_text(errors="replace")
    for gap in expected_gaps:
        assert f"DATA LOST: {topic}[{gap.partition}] offsets {gap.first}..{gap.last} ({gap.count} records)" in logs
