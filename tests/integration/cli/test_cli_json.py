"""``-o json`` against the session platform: `status`, `topics plan` and `ops lag` print one JSON
document alone on stdout (run as a script runs them, in a process of their own) and keep their exit
statuses."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaException, TopicPartition

from conveyor import kafka
from conveyor.config import Platform
from tests.conftest import eventually

pytestmark = pytest.mark.integration


def conveyor_json(*args: str) -> tuple[int, Any]:
    run = subprocess.run([sys.executable, "-m", "conveyor", *args, "-o", "json"], capture_output=True, text=True,
                         timeout=180)
    assert run.returncode in (0, 1, 2), run.stderr
    return run.returncode, json.loads(run.stdout)


def test_status_lists_every_running_process(platform: Platform, platform_file: Path, local_platform) -> None:
    code, document = conveyor_json("status", "--platform", str(platform_file))
    assert code == 0 and document["all_running"] is True
    brokers = {p["node"]: p for p in document["processes"] if p["roles"] and "broker" in p["roles"]}
    assert len(brokers) == sum(c.brokers for c in platform.clusters.values())
    assert all(p["running"] and isinstance(p["pid"], int) and isinstance(p["client_port"], int)
               for p in brokers.values())


def test_topics_plan_is_in_sync_then_lists_a_change_with_exit_2(provisioned: Platform, platform_data,
                                                                   platform_file: Path) -> None:
    code, document = conveyor_json("topics", "plan", "--platform", str(platform_file), "--strict")
    assert (code, document["exit_code"]) == (0, 0) and document["warnings"] == []
    assert {(r["cluster"], r["change"]) for r in document["changes"]} == {(c, "in sync") for c in
                                                                          provisioned.clusters}
    grown = copy.deepcopy(platform_data)
    grown["topics"]["notifications"]["partitions"] += 1
    path = platform_file.parent / "grown.yaml"
    path.write_text(yaml.safe_dump(grown, sort_keys=False))
    code, document = conveyor_json("topics", "plan", "--platform", str(path), "--cluster", "central")
    assert (code, document["exit_code"]) == (2, 2)
    assert [(r["cluster"], r["topic"], r["change"]) for r in document["changes"]] == [
        ("central", "notifications", "add partitions")]

    # A durability warning fails the plan only with --strict (conveyor/topics/lint.py).
    fragile = copy.deepcopy(platform_data)
    fragile["topics"]["notifications"]["min_insync_replicas"] = 3
    fragile["topics"]["notifications"]["clusters"] = ["central"]
    path.write_text(yaml.safe_dump(fragile, sort_keys=False))
    code, document = conveyor_json("topics", "plan", "--platform", str(path), "--cluster", "central", "--strict")
    assert code == 1, document
    assert [(w["topic"], w["cluster"], w["rule"]) for w in document["warnings"]] == [
        ("notifications", "central", "min-isr-equals-replicas")]


def test_ops_lag_shows_a_group_with_its_partitions(platform: Platform, platform_file: Path, topic_factory) -> None:
    topic = topic_factory("central", partitions=2)
    group = f"json-{uuid.uuid4().hex[:6]}"
    producer = kafka.producer(platform, "central", "test")
    for i in range(10):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    consumer = kafka.consumer(platform, "central", group, "test")
    try:
        # The group coordinator of a fresh cluster answers "load in progress" for a while.
        eventually(lambda: consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 2)],
                                           asynchronous=False), 60, "the group's commit", (KafkaException,))
    finally:
        consumer.close()
    code, document = conveyor_json("ops", "lag", "--group", group, "--cluster", "central", "--samples", "1",
                                   "--platform", str(platform_file))
    assert code == 0
    [found] = document["groups"]
    assert (found["cluster"], found["group"], found["total_lag"]) == ("central", group, 3)
    lags = {p["partition"]: (p["committed"], p["end"], p["lag"]) for p in found["partitions"] if p["topic"] == topic}
    assert lags == {0: (5, 5, 0), 1: (2, 5, 3)}
    assert isinstance(document["alerts"], list)
