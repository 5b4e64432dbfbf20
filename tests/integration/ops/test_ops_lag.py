"""Lag evaluation against real brokers: a stopped consumer goes STOP, a slow one WARN, and a group
whose offsets are reset backwards raises REWIND with rewind and reset findings, whose evidence
keeps the group's commit records read from __consumer_offsets; the evidence outlives the watcher,
and a rewind made while no watcher ran is found by the next one. A reader's monitoring-only group
(conveyor.positions) shows with its lag and where its real position lives; publishing a lower
position shows REWIND with the exact amount and the group's committed offsets before and after.

Each test drives one cluster's watcher round by round (``ClusterWatch.cycle``), producing and
committing between rounds, so what each window holds is decided by the test, not by timing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from typer.testing import CliRunner

from conveyor import kafka
from conveyor.cli import app
from conveyor.config import Part, Platform
from conveyor.ops.commit_log import java_hash, read_commits
from conveyor.ops.lag import Status
from conveyor.ops.report import cluster_json
from conveyor.ops.rewind import FindingKind
from conveyor.ops.tracker import GroupReport
from conveyor.ops.watch import COMMIT_LOG_LEAD_MS, ClusterReport, ClusterWatch
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


def produce(producer: Producer, topic: str, count: int, partitions: int = 1) -> None:
    for i in range(count):
        producer.produce(topic, value=b"x" * 100, partition=i % partitions)
    assert producer.flush(30) == 0


def consume_and_commit(platform: Platform, group: str, consumer: Consumer, topic: str, count: int) -> None:
    """Read ``count`` records of a one-partition topic and commit past them for ``group``, as its
    consumer does."""
    last = None
    while count:
        for message in consumer.consume(count, 1.0):
            assert message.error() is None, message.error()
            last, count = message.offset(), count - 1
    kafka.commit_as(platform, "central", group, [TopicPartition(topic, 0, last + 1)])


@pytest.fixture
def one_partition(ops_platform: Platform, topic_factory, request) -> Iterator[tuple[str, str, Producer, Consumer]]:
    """A one-partition topic on central, its producer, and a consumer of a fresh group assigned to it."""
    topic = topic_factory("central", partitions=1)
    group = f"ops-{request.node.name[5:20]}-{uuid.uuid4().hex[:6]}"
    producer = kafka.producer(ops_platform, "central", "ops-test")
    consumer = kafka.consumer(ops_platform, "central", group, "ops-test")
    consumer.assign([TopicPartition(topic, 0, 0)])
    yield topic, group, producer, consumer
    consumer.close()


def group_in(report: ClusterReport, group: str) -> GroupReport:
    return next(g for g in report.groups if g.group == group)


def test_a_slow_consumer_goes_warn(ops_platform, watch, one_partition):
    topic, group, producer, consumer = one_partition
    statuses = []
    for _ in range(6):
        produce(producer, topic, 60)
        consume_and_commit(ops_platform, group, consumer, topic, 20)  # reads a third of what is written
        report = watch.cycle()
        statuses.append(group_in(report, group).status.status)
        if statuses[-1] is Status.WARN:
            break
    assert statuses[-1] is Status.WARN, statuses
    assert Status.STOP not in statuses and Status.ERR not in statuses
    assert "not shrinking across the window" in group_in(report, group).status.message

    # `conveyor lag` sampling by itself shows the group and every partition.
    result = CliRunner().invoke(app, ["lag", "--group", group, "--cluster", "central", "--samples", "1",
                                      "--platform", str(ops_platform.root / "platform.yaml")])
    assert result.exit_code == 0, result.output
    assert group in result.output and f"{topic}" in result.output


def test_a_stopped_consumer_goes_stop(ops_platform, watch, one_partition):
    topic, group, producer, consumer = one_partition
    for _ in range(3):
        produce(producer, topic, 40)
        consume_and_commit(ops_platform, group, consumer, topic, 20)
        last_commit_round = watch.cycle()
    consumer.unassign()  # the consumer stops; producers go on
    statuses = []
    for _ in range(12):
        produce(producer, topic, 40)
        report = watch.cycle()
        statuses.append(group_in(report, group).status.status)
        if statuses[-1] is Status.STOP:
            break
    assert statuses[-1] is Status.STOP, statuses
    stopped = group_in(report, group)
    assert stopped.state == "EMPTY"
    assert stopped.status.problems[0].since_ms == last_commit_round.at_ms  # when the last commit was seen


def test_resetting_offsets_backwards_raises_rewind(ops_platform, watch, topic_factory):
    topic = topic_factory("central", partitions=2)
    # A group whose Java hash is negative: its coordinator partition is where Kafka's abs and a sign
    # mask disagree, so reading the commits proves the partition is the broker's.
    group = next(g for g in (f"ops-rewind-{uuid.uuid4().hex[:6]}" for _ in range(1000)) if java_hash(g) < 0)
    produce(kafka.producer(ops_platform, "central", "ops-test"), topic, 200, partitions=2)
    for offset in (50, 80):
        kafka.commit_as(ops_platform, "central", group, [TopicPartition(topic, p, offset) for p in (0, 1)])
        report = watch.cycle()
    assert group_in(report, group).status.status is Status.OK

    # What `kafka-consumer-groups --reset-offsets` does: partition 0 back to 20, partition 1 to the start.
    admin = kafka.admin(ops_platform, "central")
    reset = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 20), TopicPartition(topic, 1, 0)])]
    admin.alter_consumer_group_offsets(reset)[group].result()
    report = watch.cycle()

    rewound = group_in(report, group)
    assert rewound.status.status is Status.REWIND
    found = {(f.partition, f.kind, f.from_offset, f.to_offset, f.records) for f in rewound.findings.offsets}
    assert found == {(0, FindingKind.REWIND, 80, 20, 60), (1, FindingKind.RESET_EARLIEST, 80, 0, 80)}
    assert watch.findings_total[(group, "rewind")] == 1

    watch.cycle()  # still in the window: reported again, counted once
    assert watch.findings_total[(group, "rewind")] == 1

    # The evidence keeps the group's commit records as __consumer_offsets held them when the move
    # was seen: each partition's commits in order, the reset's last, with the coordinator that wrote them.
    (evidence,) = [e for e in watch.rewinds if e.group == group and e.finding.partition == 0]
    assert evidence.commit_log_error is None
    log = evidence.commit_log
    assert [(c.topic, c.partition, c.offset) for c in log.commits if c.partition == 0] == [
        (topic, 0, 50), (topic, 0, 80), (topic, 0, 20)]
    assert [c.offset for c in log.commits if c.partition == 1] == [50, 80, 0]
    assert all(c.coordinator_epoch is not None and c.commit_ms and c.written_ms for c in log.commits)
    offsets_topic = admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    assert log.coordinator == offsets_topic.partitions[log.partition].leader
    # The ops principal may read it (its grants on a secured cluster), and finds the same records.
    as_ops = read_commits(ops_platform.acting_as(Part.ops), "central", group, evidence.before_ms - COMMIT_LOG_LEAD_MS)
    assert as_ops.commits == log.commits


def test_rewind_evidence_outlives_the_watcher_and_a_rewind_while_none_ran_is_found(ops_platform, topic_factory):
    topic = topic_factory("central", partitions=2)
    group = f"ops-restart-{uuid.uuid4().hex[:6]}"
    produce(kafka.producer(ops_platform, "central", "ops-test"), topic, 200, partitions=2)
    admin = kafka.admin(ops_platform, "central")

    def commit(*offsets: tuple[int, int]) -> None:
        kafka.commit_as(ops_platform, "central", group, [TopicPartition(topic, p, o) for p, o in offsets])

    def reset(partition: int, offset: int) -> None:
        moved = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition, offset)])]
        admin.alter_consumer_group_offsets(moved)[group].result()

    # A watcher sees partition 0 rewound, keeps the evidence, and stops.
    with cluster_watch(ops_platform) as first:
        commit((0, 50), (1, 50))
        first.cycle()
        commit((0, 80), (1, 80))
        first.cycle()
        reset(0, 20)
        first.cycle()
        (watched,) = [e for e in first.rewinds if e.group == group]
        assert (watched.found, watched.finding.from_offset, watched.finding.to_offset) == ("watched", 80, 20)
        first.cycle()  # the offsets it last saw are kept: partition 0 at 20, 1 at 80
    # While no watcher runs, partition 1 is rewound and then committed on past where it was.
    commit((1, 90))
    reset(1, 30)
    commit((1, 120))
    with cluster_watch(ops_platform) as second:
        second.cycle()
        kept = [e for e in second.rewinds if e.group == group]
        assert [(e.found, e.finding.partition, e.finding.from_offset, e.finding.to_offset) for e in kept] == [
            ("watched", 0, 80, 20), ("after a restart", 1, 90, 30)]
        # The restored evidence is the one the first watcher read, commit records included.
        assert kept[0].commit_log == watched.commit_log
        assert [c.offset for c in kept[1].commit_log.commits if c.partition == 1][-3:] == [90, 30, 120]
        assert second.findings_total[(group, "rewind")] == 1


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
