"""The offset manager and the position feed against real brokers.

- A compacted topic whose compaction is held back (min.cleanable.dirty.ratio 1.0: the cleaner never
  takes it), filled with dirty records, drives the brokers' real LogCleanerManager max-dirty-percent
  up; the watcher's scrape of the JMX exporters raises offsets_compaction_stalled. Letting the
  cleaner at it again clears the alert, so the alert is about this stall and nothing else.
- A reader's monitoring-only group (conveyor.positions) shows in the watcher with its lag and
  where its real position lives; publishing a lower position shows REWIND with the exact amount
  and the group's committed offsets before and after.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from conveyor import kafka
from conveyor.config import Platform
from conveyor.ops.health import Rule
from conveyor.ops.lag import Status
from conveyor.ops.report import cluster_json
from conveyor.ops.rewind import FindingKind
from conveyor.ops.watch import ClusterWatch
from conveyor.positions import PositionFeed, group_name
from tests.conftest import eventually
from tests.opskit import cluster_watch, ops_platform_with

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ops_platform(platform_data, platform_file: Path, local_platform) -> Platform:
    return ops_platform_with(platform_data, platform_file, interval="1s", window=6, offsets_dirty_warn=90,
                             offsets_dirty_hold="3s")


@pytest.fixture
def watch(ops_platform: Platform) -> Iterator[ClusterWatch]:
    with cluster_watch(ops_platform) as watch:
        yield watch


def _stalled(watch: ClusterWatch) -> list:
    report = watch.cycle()
    return [f for f in report.health.findings if f.rule is Rule.COMPACTION_STALLED]


def test_held_back_compaction_of_dirty_records_raises_the_stall_alert(ops_platform, watch, topic_factory):
    baseline = [_stalled(watch) for _ in range(3)][-1]
    assert baseline == [], f"the cluster was already stalled before the test: {baseline}"
    readings = [b.reading for b in watch.cycle().health.brokers if b.reading.up]
    # The exporter rules for the cleaner and the group coordinator match Kafka 4's MBeans.
    assert any(r.cleaner_dirty_percent is not None and r.cleaner_idle_ms is not None for r in readings)
    assert any(r.offset_commit_rate is not None and r.offset_commits is not None and r.groups is not None
               for r in readings)

    # Compaction held back on a compacted topic, as a stopped cleaner leaves __consumer_offsets.
    topic = topic_factory("central", partitions=1, config={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.0", "min.compaction.lag.ms": "0",
        "segment.ms": "100"})
    producer = kafka.producer(ops_platform, "central", "ops-test")
    for batch in range(8):  # each batch in a segment of its own: every closed segment is dirty
        for key in range(20):
            producer.produce(topic, key=f"k{key}".encode(), value=b"v" * 2000)
        assert producer.flush(30) == 0
        time.sleep(0.2)
    # The cleaner re-reads its gauges every log.cleaner.backoff.ms (15 s).
    found = eventually(lambda: _stalled(watch), 90, "offsets_compaction_stalled", interval=1.0)
    assert found[0].value > 90 and found[0].limit == 90
    alert = next(a for a in watch.cycle().alerts if a.rule == "offsets_compaction_stalled")
    assert "dirty" in alert.message and "__consumer_offsets" in alert.message

    # Let the cleaner at it: the log is compacted, the ratio falls, the alert clears.
    admin = kafka.admin(ops_platform, "central")
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", "0.5", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result()
    producer.produce(topic, key=b"roll", value=b"v")  # rolls the segment so the config is read on it
    assert producer.flush(30) == 0
    eventually(lambda: not _stalled(watch), 90, "the stall alert to clear after compaction", interval=1.0)


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
