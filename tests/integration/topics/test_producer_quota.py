"""A logs cluster holds every producer to a quota instead of letting one take its brokers:
`topics plan` shows the quota platform.yaml asks for, `topics apply` sets it as the client-id default
with Kafka's own kafka-configs, and the broker then throttles a producer writing past it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from conveyor import kafka
from conveyor.kafka_tools import KafkaTools
from tests.conftest import logs_dc2_variant

pytestmark = pytest.mark.integration
QUOTA = 256 * 1024


def _topics(command: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conveyor", "topics", command, "--cluster", "dc2", "--platform",
                           str(path), "--output", "json"], capture_output=True, text=True, timeout=300)


def _most_throttled_ms(platform, topic: str) -> float:
    """Write 3 MiB as fast as the broker takes it; the longest throttle the broker asked for. (A
    broker measures a rate over at least ten of its one-second samples, so a quota of 256 KiB/s
    throttles only past 2.5 MiB.)"""
    throttles: list[float] = []

    def stats(text: str) -> None:
        throttles.extend(b["throttle"]["max"] for b in orjson.loads(text)["brokers"].values() if b.get("throttle"))

    producer = kafka.producer(platform, "dc2", "quota-test", {"statistics.interval.ms": 200, "stats_cb": stats,
                                                              "linger.ms": 20})
    payloads = random.Random(768)  # incompressible bytes, the same in every run
    for i in range(768):
        producer.produce(topic, payloads.randbytes(4096), f"k{i}".encode())
        producer.poll(0)
    assert producer.flush(120) == 0
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:  # the statistics after the last response
        producer.poll(0.2)
    return max(throttles, default=0.0)


def test_a_logs_cluster_gets_its_producer_quota_and_throttles_a_producer_past_it(
        provisioned, platform_data, platform_file, tmp_path, topic_factory):
    path = tmp_path / "logs.yaml"
    platform = logs_dc2_variant(platform_data, platform_file, path, producer_quota="256KiB")
    tools = KafkaTools(platform, "dc2")
    assert tools.default_producer_quota() is None
    topic = topic_factory("dc2", 1)
    unthrottled = _most_throttled_ms(platform, topic)
    try:
        planned = _topics("plan", path)
        assert planned.returncode == 2, planned.stderr
        assert json.loads(planned.stdout)["quotas"] == [
            {"cluster": "dc2", "now": "none", "wanted": "0.25 MiB/s", "change": "set"}]
        applied = _topics("apply", path)
        assert applied.returncode == 0, applied.stderr
        assert tools.default_producer_quota() == QUOTA
        assert _topics("plan", path).returncode == 0  # in sync now

        throttled = _most_throttled_ms(platform, topic)
        assert unthrottled == 0 and throttled > 0, (unthrottled, throttled)

        # -1: the quota is removed.
        logs_dc2_variant(platform_data, platform_file, path, producer_quota=-1)
        assert _topics("apply", path).returncode == 0
        assert tools.default_producer_quota() is None
    finally:  # the session's dc2 serves the other tests without one
        if tools.default_producer_quota() is not None:
            tools.set_default_producer_quota(None)
