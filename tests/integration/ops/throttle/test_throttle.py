"""The throttle controller on real brokers, reading their produce p99 from a real Prometheus that
scrapes their exporters: with the brokers marked busy (a p99 threshold of 0 ms, which every broker
reporting a p99 meets), the client of a group far behind gets a consumer_byte_rate
quota and a consumer at the tail does not; with the brokers healthy the quota is lifted. The quotas
are read back with Kafka's own ConfigCommand. The partition advisor, fed by the same lagging group,
sends a backlog the partitions cannot drain in time to the dispatcher. A reader seen only through
the position feed is throttled on the client id its monitoring commits name."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from typer.testing import CliRunner

from conveyor import kafka
from conveyor.cli import app, throttle_cmd
from conveyor.config import Platform
from conveyor.kafka_tools import KafkaTools
from conveyor.ops.throttle.controller import ThrottleController
from conveyor.ops.throttle.policy import Action, ThrottlePolicy
from conveyor.positions import PositionFeed, group_name, spark_client_id
from conveyor.runtime.local import LocalPlatform
from tests.balancekit import create_topic, delete_topics, preload
from tests.conftest import eventually
from tests.opskit import monitored, wait_scraped

pytestmark = pytest.mark.integration
CLUSTER = "central"
MESSAGES = 3000


class Member(threading.Thread):
    """A group member that stays in its group; a lagging one commits offset 0 and pauses,
    a tail one reads to the end and commits."""

    def __init__(self, platform: Platform, topic: str, lagging: bool) -> None:
        super().__init__(daemon=True)
        self.group = f"{'lag' if lagging else 'tail'}-{uuid.uuid4().hex[:8]}"
        self.client_id = f"{self.group}-client"
        self.consumer = kafka.consumer(platform, CLUSTER, self.group, self.client_id)
        self.topic, self.lagging = topic, lagging
        self.ready, self.stop = threading.Event(), threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        positions: dict[int, int] = {}
        while not self.stop.is_set():
            for message in self.consumer.consume(500, 0.2):
                positions[message.partition()] = message.offset() + 1
            assignment = self.consumer.assignment()
            if self.ready.is_set() or not assignment:
                continue
            if self.lagging:
                self.consumer.pause(assignment)
                self.consumer.commit(offsets=[TopicPartition(tp.topic, tp.partition, 0) for tp in assignment],
                                     asynchronous=False)
                self.ready.set()
            elif sum(positions.values()) >= MESSAGES:
                self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in positions.items()],
                                     asynchronous=False)
                self.ready.set()
        self.consumer.close()


@pytest.fixture(scope="module")
def scraped(platform_data: dict[str, Any], platform_file: Path, tmp_path_factory: pytest.TempPathFactory,
            local_platform: LocalPlatform | None) -> Iterator[tuple[Path, Platform]]:
    """The session's platform with a Prometheus scraping its brokers: that variant's file and platform."""
    with monitored(platform_data, platform_file, tmp_path_factory.mktemp("prometheus"), alertmanager=False,
                   watcher=False) as (path, variant):
        wait_scraped(variant)
        yield path, variant


@pytest.fixture
def members(platform: Platform, local_platform: LocalPlatform | None):
    topic = create_topic(platform, CLUSTER, 3, 3, min_insync=2)
    preload(platform, CLUSTER, topic, MESSAGES, size=200)
    lagging, tail = Member(platform, topic, True), Member(platform, topic, False)
    for member in (lagging, tail):
        member.start()
    for member in (lagging, tail):
        assert member.ready.wait(60), f"{member.group} did not get ready"
    yield lagging, tail
    for member in (lagging, tail):
        member.stop.set()
        member.join(30)
    delete_topics(platform, CLUSTER, [topic])


def test_a_busy_broker_throttles_the_lagging_client_but_not_the_tail_one_and_lifts_it_when_healthy(
        platform: Platform, scraped: tuple[Path, Platform], members: tuple[Member, Member]) -> None:
    lagging, tail = members  # the lagging group is MESSAGES / 3 behind on each of 3 partitions
    tools = KafkaTools(platform, CLUSTER)
    busy = ThrottlePolicy(p99_busy_ms=0, lag_far=MESSAGES // 6, lag_tail=10, quota_bytes=65536)
    controller = ThrottleController(scraped[1], CLUSTER, busy, tools)
    try:
        result = controller.cycle()
        assert result.busy, "every broker reports a p99, and p99 >= 0 ms"
        ours = [d for d in result.decisions if d.client_id in (lagging.client_id, tail.client_id)]
        assert [(d.action, d.client_id, d.rate) for d in ours] == [(Action.SET, lagging.client_id, 65536)]
        assert "records behind" in ours[0].reason
        assert result.spared[tail.client_id] == f"at the tail (group {tail.group}): never throttled"
        quotas = tools.client_quotas()
        assert quotas.get(lagging.client_id) == {"consumer_byte_rate": 65536.0}
        assert tail.client_id not in quotas

        healthy = ThrottlePolicy(p99_busy_ms=1e9, disk_busy=2.0, lag_far=MESSAGES // 6, lag_tail=10)
        controller.policy = healthy
        lifted = controller.cycle()
        assert [(d.action, d.client_id) for d in lifted.decisions if d.client_id == lagging.client_id] == [
            (Action.LIFT, lagging.client_id)]
        assert lagging.client_id not in tools.client_quotas()
    finally:
        controller.close()

    logged = [json.loads(line) for line in controller.log_file.read_text().splitlines()]
    mine = [(e["action"], e["reason"]) for e in logged if e["client_id"] == lagging.client_id]
    assert [action for action, _ in mine][-2:] == ["set", "lift"] and all(reason for _, reason in mine)


@pytest.fixture
def coordinator_moving(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every admin client's first description of consumer groups is refused with NOT_COORDINATOR, as
    a loaded suite's broker answered; the sizes of the refused requests."""
    refused: list[int] = []

    class CoordinatorMoving:
        def __init__(self, real: Any) -> None:
            self.real = real

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

        def describe_consumer_groups(self, groups: list[str], **options: Any) -> Any:
            if not refused:
                refused.append(len(groups))
                raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))
            return self.real.describe_consumer_groups(groups, **options)

    real_admin = kafka.admin
    monkeypatch.setattr(kafka, "admin", lambda *args, **kwargs: CoordinatorMoving(real_admin(*args, **kwargs)))
    return refused


def test_a_round_asks_again_while_a_groups_coordinator_moves(
        platform: Platform, scraped: tuple[Path, Platform], members: tuple[Member, Member],
        coordinator_moving: list[int]) -> None:
    lagging, _ = members
    busy = ThrottlePolicy(p99_busy_ms=0, lag_far=MESSAGES // 6, lag_tail=10, quota_bytes=65536)
    controller = ThrottleController(scraped[1], CLUSTER, busy, KafkaTools(platform, CLUSTER))
    try:
        result = controller.cycle()
        assert coordinator_moving, "the coordinator's refusal was never met"
        assert lagging.client_id in {d.client_id for d in result.decisions}
    finally:
        controller.close()


def test_the_command_runs_one_round_and_says_why(platform: Platform, scraped: tuple[Path, Platform],
                                                 members: tuple[Member, Member]) -> None:
    lagging, _ = members
    cli = typer.Typer()
    cli.command()(throttle_cmd.throttle)
    args = ["-p", str(scraped[0]), "--cluster", CLUSTER, "--once", "--yes", "--lag-far", str(MESSAGES // 6),
            "--lag-tail", "10"]
    healthy = CliRunner().invoke(cli, [*args, "--p99-ms", "1000000000", "--disk-util", "2"])
    assert healthy.exit_code == 0, healthy.output
    assert "busy: none" in healthy.output and lagging.client_id not in healthy.output

    busy = CliRunner().invoke(cli, [*args, "--p99-ms", "0", "--quota", "64KiB"])
    assert busy.exit_code == 0, busy.output
    assert f"set quota on client {lagging.client_id} consumer_byte_rate=65,536" in busy.output
    lifted = CliRunner().invoke(cli, [*args, "--p99-ms", "1000000000", "--disk-util", "2"])
    assert f"lift quota on client {lagging.client_id}" in lifted.output
    assert lagging.client_id not in KafkaTools(platform, CLUSTER).client_quotas()


def _advise(scraped: tuple[Path, Platform], topic: str, max_lag: str) -> Any:
    """`conveyor advise partitions` for ``topic``, its members taking 50 ms a message."""
    return CliRunner().invoke(app, ["advise", "partitions", "-p", str(scraped[0]), "--cluster", CLUSTER,
                                    "--topic", topic, "--processing-ms", "50", "--sample-seconds", "1",
                                    "--max-lag", max_lag])


def test_the_advisor_sends_a_backlog_that_the_partitions_cannot_drain_in_time_to_the_dispatcher(
        scraped: tuple[Path, Platform], members: tuple[Member, Member]) -> None:
    lagging, _ = members
    relaxed = _advise(scraped, lagging.topic, "10m")  # 3,000 behind x 50 ms on 3 partitions: 50 s
    assert relaxed.exit_code == 0, relaxed.output
    assert "enough partitions" in relaxed.output and f"{MESSAGES:,}" in relaxed.output
    tight = _advise(scraped, lagging.topic, "10s")  # 15 consumers needed, 3 partitions
    assert tight.exit_code == 0, tight.output
    assert "use the dispatcher" in tight.output


def test_the_advisor_asks_again_while_a_groups_coordinator_moves(
        scraped: tuple[Path, Platform], members: tuple[Member, Member], coordinator_moving: list[int]) -> None:
    lagging, _ = members
    advised = _advise(scraped, lagging.topic, "10m")
    assert coordinator_moving, "the coordinator's refusal was never met"
    assert advised.exit_code == 0, advised.output
    assert "enough partitions" in advised.output


def test_a_reader_seen_only_through_the_position_feed_is_throttled_on_the_client_id_it_names(
        platform: Platform, scraped: tuple[Path, Platform]) -> None:
    topic = create_topic(platform, CLUSTER, 3, 3, min_insync=2)
    preload(platform, CLUSTER, topic, MESSAGES, size=200)
    client_id = spark_client_id("lake", topic)  # what the lake's Spark consumers connect as
    feed = PositionFeed(platform, CLUSTER, group_name("lake", topic), "iceberg", client_ids=[client_id])
    # All of it still to land; a fresh cluster's group coordinators may still be loading.
    eventually(lambda: feed.publish_and_wait({(topic, p): 0 for p in range(3)}), 60, "the lake's position published")
    tools = KafkaTools(platform, CLUSTER)
    controller = ThrottleController(scraped[1], CLUSTER, ThrottlePolicy(p99_busy_ms=0, lag_far=MESSAGES // 6,
                                                                      lag_tail=10, quota_bytes=65536), tools)
    try:
        result = controller.cycle()
        assert [(d.action, d.rate) for d in result.decisions if d.client_id == client_id] == [(Action.SET, 65536)]
        assert tools.client_quotas().get(client_id) == {"consumer_byte_rate": 65536.0}
        controller.policy = ThrottlePolicy(p99_busy_ms=1e9, disk_busy=2.0, lag_far=MESSAGES // 6, lag_tail=10)
        controller.cycle()
        assert client_id not in tools.client_quotas()
    finally:
        controller.close()
        delete_topics(platform, CLUSTER, [topic])
