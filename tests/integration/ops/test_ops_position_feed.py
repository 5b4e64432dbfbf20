"""The position feed against real brokers.

- A reader's monitoring-only group (conveyor.positions) shows in the watcher with its lag and
  where its real position lives; publishing a lower position shows REWIND with the exact amount
  and the group's committed offsets before and after.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.ops.lag import Status
from conveyor.ops.report import cluster_json
from conveyor.ops.rewind import FindingKind
from conveyor.ops.watch import ClusterWatch
from conveyor.positions import PositionFeed, group_name
from tests.opskit import cluster_watch, ops_platform_with

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ops_platform(platform_data, platform_file: Path, local_platform) -> Platform:
    return ops_platform_with(platform_data, platform_file, interval="1s", window=6)


@pytest.fixture
def watch(ops_platform: Platform) -> Iterator[ClusterWatch]:
    with cluster_watch(ops_platform) as watch:
        yield watch


def test_a_monitoring_group_shows_its_lag_and_a_published_rewind(ops_platform, watch, topic_factory):
    topic = topic_factory("central", partitions=2)
    producer = kafka.producer(ops_platform, "central", "ops-test")
    for i in range(300):
        producer.produce(topic, value=b"x" * 50, partition=i % 2)
    assert producer.flush(30) == 0  # 150 records per partition
    group = group_name("lake", topic)
    feed = PositionFeed(ops_platform, "central", group, "iceberg")
    for position in (100, 120):
        assert feed.publish_and_wait({(topic, 0): position, (topic, 1): position})
        report = watch.cycle()
    monitored = next(g for g in report.groups if g.group == group)
    assert monitored.kept_in == "iceberg"
    assert monitored.status.total_lag == 2 * (150 - 120)

    # The table rolled back: the lake publishes its lower position (the admin commit moves back).
    assert feed.publish_and_wait({(topic, 0): 90, (topic, 1): 120})
    report = watch.cycle()
    rewound = next(g for g in report.groups if g.group == group)
    assert rewound.status.status is Status.REWIND
    assert [(f.kind, f.partition, f.from_offset, f.to_offset, f.records) for f in rewound.findings.offsets] == [
        (FindingKind.REWIND, 0, 120, 90, 30)]
    # The evidence outlives watchers (it is kept in Kafka), so other tests' rewinds on this cluster show too.
    evidence = [e for e in cluster_json(report)["rewinds"] if e["group"] == group]
    assert len(evidence) == 1 and evidence[0]["records"] == 30
    assert evidence[0]["before_ms"] < evidence[0]["after_ms"] == report.at_ms
    assert [p["committed"] for p in evidence[0]["before"]] == [120, 120]
    assert [p["committed"] for p in evidence[0]["after"]] == [90, 120]
