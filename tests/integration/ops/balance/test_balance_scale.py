"""Scale-out and broker failure on real brokers, with an isolated topic.

The local runtime cannot grow a running cluster by itself, so the test declares a platform variant
whose central cluster has a 4th broker (rack r4, tagged ``money`` like brokers 2 and 3), starts it
with ``LocalPlatform(variant).up()`` (which starts only what is missing) and runs
``conveyor balance add-broker``. Then it kills that broker and runs ``balance execute``: the plan
moves every replica off the dead broker and the isolated topic stays on tagged brokers. Producers
write throughout; every acknowledged message must be there at the end. The 4th broker is stopped
and unregistered afterwards, so the rest of the session sees the 3-broker cluster again.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from conveyor.cli import app
from conveyor.config import Platform, load_platform, load_resolved_platform
from conveyor.ops.balance.executor import state_path
from conveyor.ops.balance.live import ClusterUnreachableError, read_metadata
from conveyor.kafka_tools import KafkaTools
from conveyor.runtime.local import LocalPlatform
from conveyor.topics.provisioner import ensure_topics
from tests.balancekit import AckedStream, counts, create_topic, delete_topics, preload, wait_ports_free
from tests.conftest import eventually, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.chaos]
CLUSTER, NEW = "central", 4
TAGGED = {2, 3, NEW}


@pytest.fixture
def scaled(platform_data: dict[str, Any], platform_file: Path, platform: Platform, local: LocalPlatform):
    """(variant platform file, variant, isolated topic, plain topic) with broker 4 declared, not started."""
    data = copy.deepcopy(platform_data)
    central = data["clusters"][CLUSTER]
    central.update(brokers=4, racks=["r1", "r2", "r3", "r4"], tags={"money": sorted(TAGGED)})
    isolated = f"pay-{uuid.uuid4().hex[:8]}"
    data["topics"][isolated] = {"partitions": 6, "replication_factor": 2, "min_insync_replicas": 1,
                                "isolation": "money", "clusters": [CLUSTER]}
    path = platform_file.with_name("platform-4-brokers.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    variant = load_platform(path)
    ensure_topics(load_resolved_platform(path), CLUSTER, {isolated: variant.topics[isolated]})  # placed on live tagged brokers 2, 3
    plain = create_topic(platform, CLUSTER, 6, 3, min_insync=2)
    for topic in (isolated, plain):
        preload(platform, CLUSTER, topic, 3000)
    grown = Grown(variant)
    try:
        yield path, grown, isolated, plain
    finally:
        grown.kill_broker(CLUSTER, NEW)
        _wait_gone(platform)
        delete_topics(platform, CLUSTER, [isolated, plain])
        if grown.registered:
            KafkaTools(platform, CLUSTER).unregister_broker(NEW)
        state_path(platform, CLUSTER).unlink(missing_ok=True)
        local.write_view()  # the view is the session's three brokers again, not the variant's four


class Grown(LocalPlatform):
    """The variant's runtime; remembers whether the new broker joined (to unregister it after)."""

    registered = False

    def up(self, *args: Any, **kwargs: Any) -> Any:
        node = self.layout(CLUSTER).broker(NEW)
        wait_ports_free([node.client_port, node.metrics_port])
        state = super().up(*args, **kwargs)
        self.registered = True
        return state


def _wait_gone(platform: Platform, timeout: float = 60) -> None:
    # A fresh client each time: one may have picked the dead broker to ask.
    eventually(lambda: NEW not in set(read_metadata(platform, CLUSTER, topics=()).brokers), timeout,
               f"broker {NEW} to be no longer listed", errors=(ClusterUnreachableError,), interval=0.5)


def _balance(*args: str) -> None:
    result = CliRunner().invoke(app, ["balance", *args, "--yes"], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_a_new_broker_takes_load_in_throttled_batches_and_a_dead_one_is_drained_keeping_isolation(
        platform: Platform, scaled: tuple[Path, Grown, str, str]) -> None:
    path, grown, isolated, plain = scaled
    topics = {isolated, plain}
    replicas, _, assignment = counts(platform, CLUSTER, {isolated})
    assert set(replicas) == {2, 3}, "created on the live brokers carrying the tag"

    grown.up()
    selection = ["-p", str(path), "--cluster", CLUSTER, "--topic", isolated, "--topic", plain]
    with AckedStream(platform, CLUSTER, [plain, isolated]) as stream:
        _balance("add-broker", "--broker", str(NEW), *selection, "--window", "30s", "--throttle", "5MiB",
                 "--batch-partitions", "3")
        replicas, leaders, assignment = counts(platform, CLUSTER, topics)
        assert replicas[NEW] >= 5 and leaders[NEW] >= 2, (replicas, leaders)
        assert max(replicas.values()) - min(replicas.values()) <= 2, replicas  # 30 replicas on 4 brokers
        assert all(set(assignment[(isolated, p)]) <= TAGGED for p in range(6)), assignment

        grown.kill_broker(CLUSTER, NEW)
        _wait_gone(platform)
        _balance("execute", *selection, "--window", "0", "--throttle", "none")
        replicas, leaders, assignment = counts(platform, CLUSTER, topics)
        assert NEW not in replicas and NEW not in leaders
        assert all(set(assignment[(isolated, p)]) == {2, 3} for p in range(6)), assignment
        assert all(len(assignment[(plain, p)]) == 3 for p in range(6))
    assert not stream.failures
    for topic in topics:
        landed = {m.value() for m in read_topic(platform, CLUSTER, topic)}
        assert stream.acked[topic] and stream.acked[topic] <= landed, f"{topic}: acknowledged messages lost"
