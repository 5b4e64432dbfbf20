"""Balancing real brokers: a topic with every leader on one broker is planned, executed in throttled
batches (interrupted and resumed), and ends even, with every acknowledged message still there; a
plan made for a cluster that changed since is refused."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conveyor.cli import app
from conveyor.config import Platform
from conveyor.ops.balance import plan
from conveyor.ops.balance.errors import StalePlanError
from conveyor.ops.balance.execution import new_execution
from conveyor.ops.balance.executor import Executor, load_state, state_path
from conveyor.ops.balance.live import LiveCluster, live_cluster
from conveyor.runtime.local import LocalPlatform
from tests.balancekit import AckedStream, counts, create_topic, delete_topics, preload, reassign_and_wait
from tests.conftest import eventually, read_topic
from tests.opskit import monitored

pytestmark = pytest.mark.integration
CLUSTER = "central"


class Interrupted(Exception):
    pass


class InterruptInBatch:
    """Progress that stops the run (as Ctrl-C would) once ``batch`` is in flight."""

    def __init__(self, batch: int) -> None:
        self.stop_at, self.notes = batch, []

    def batch(self, index: int, total: int, partitions: int, bytes_to_move: int) -> None:
        self.current = index

    def moved(self, index: int, partitions_done: int) -> None:
        if index == self.stop_at:
            raise Interrupted

    def note(self, message: str) -> None:
        self.notes.append(message)


@pytest.fixture
def skewed(platform: Platform, local_platform: LocalPlatform | None):
    """8 partitions, RF 2, reassigned so that brokers 1 and 2 hold every replica and 1 leads all."""
    topic = create_topic(platform, CLUSTER, 8, 2)
    preload(platform, CLUSTER, topic, 4000)
    reassign_and_wait(platform, CLUSTER, {(topic, p): (1, 2) for p in range(8)})
    yield topic
    delete_topics(platform, CLUSTER, [topic])
    state_path(platform, CLUSTER).unlink(missing_ok=True)


def test_every_leader_on_one_broker_is_evened_out_in_resumed_batches_and_no_acked_message_is_lost(
        platform: Platform, platform_data: dict[str, Any], platform_file: Path, skewed: str, tmp_path: Path) -> None:
    replicas, leaders, _ = counts(platform, CLUSTER, {skewed})
    assert leaders == {1: 8} and replicas == {1: 8, 2: 8}

    with monitored(platform_data, platform_file, tmp_path, alertmanager=False, watcher=False) as (_, variant), \
            AckedStream(platform, CLUSTER, [skewed]) as stream:
        def measured() -> LiveCluster | None:
            """The plan's input once Prometheus holds two scrapes of the traffic: every partition led
            by broker 1 takes its share of broker 1's bytes in, and has its size."""
            live = live_cluster(variant, CLUSTER, [skewed], window_seconds=30)
            return live if all(p.bytes_in > 0 and p.size > 0 for p in live.model.partitions) else None

        live = eventually(measured, 90, "the skewed topic's traffic and sizes in Prometheus", interval=1)
        assert not live.notes, live.notes
        result = plan(live.model)
        assert result.moves, "a third broker with no replicas must receive some"
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        execution = new_execution(CLUSTER, result, live.assignment(), now, throttle=20 * 2**20, max_partitions=2)
        assert len(execution.batches) >= 2
        with pytest.raises(Interrupted):
            Executor(platform, CLUSTER).run(execution, InterruptInBatch(1))
        saved = load_state(state_path(platform, CLUSTER))
        assert saved is not None and (saved.done, saved.in_flight) == (1, True)

        resumed = CliRunner().invoke(app, ["balance", "execute", "--yes", "-p", str(platform_file), "--cluster", CLUSTER,
                                           "--topic", skewed], catch_exceptions=False)
        assert resumed.exit_code == 0, resumed.output
        # The interrupted batch may have finished moving before the resume looks (small partitions
        # on an idle machine): then there is nothing to resubmit and the run goes on after it.
        assert "resuming" in resumed.output and "(batch 2 of" in resumed.output, resumed.output
    finished = load_state(state_path(platform, CLUSTER))
    assert finished is not None and finished.finished

    replicas, leaders, assignment = counts(platform, CLUSTER, {skewed})
    assert sorted(replicas.values()) == [5, 5, 6], replicas  # 16 replicas on 3 brokers
    assert sorted(leaders.values()) == [2, 3, 3], leaders
    assert all(len(set(r)) == 2 for r in assignment.values())  # one broker per rack here: racks stay distinct

    assert not stream.failures and stream.acked[skewed]
    landed = {m.value() for m in read_topic(platform, CLUSTER, skewed)}
    assert stream.acked[skewed] <= landed, f"{len(stream.acked[skewed] - landed)} acknowledged messages lost"


def test_a_plan_for_a_cluster_that_changed_since_is_refused_and_nothing_moves(
        platform: Platform, platform_file: Path, local_platform: LocalPlatform | None, tmp_path: Path) -> None:
    topic = create_topic(platform, CLUSTER, 3, 2)
    try:
        reassign_and_wait(platform, CLUSTER, {(topic, p): (1, 2) for p in range(3)})
        saved = tmp_path / "plan.json"
        planned = CliRunner().invoke(app, ["balance", "plan", "-p", str(platform_file), "--cluster", CLUSTER,
                                           "--topic", topic, "--window", "0", "--out", str(saved)])
        assert planned.exit_code == 0, planned.output
        reassign_and_wait(platform, CLUSTER, {(topic, 0): (2, 1)})  # someone else moves a partition
        _, _, before = counts(platform, CLUSTER, {topic})

        refused = CliRunner().invoke(app, ["balance", "execute", "--yes", "-p", str(platform_file), "--cluster", CLUSTER,
                                           "--plan", str(saved)])
        assert isinstance(refused.exception, StalePlanError), refused.output
        assert [d.partition for d in refused.exception.drift] == [(topic, 0)]
        assert counts(platform, CLUSTER, {topic})[2] == before
    finally:
        delete_topics(platform, CLUSTER, [topic])
        state_path(platform, CLUSTER).unlink(missing_ok=True)
