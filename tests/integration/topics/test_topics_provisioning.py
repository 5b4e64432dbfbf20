"""`topics plan` sees drift made by hand on a live cluster and `topics apply` repairs it."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from conveyor import kafka
from conveyor.config import Platform, parse_platform
from conveyor.config.resolved import resolved
from conveyor.replicate.destination import sync_topics
from conveyor.topics import provisioner
from conveyor.topics.plan import ChangeKind
from tests.conftest import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
def provisioned(platform: Platform, local_platform) -> Platform:
    provisioner.apply(platform, provisioner.plan(platform))
    assert all(p.in_sync for p in provisioner.plan(platform))
    return platform


def _changes(platform: Platform) -> set[tuple[str, str, ChangeKind]]:
    return {(p.cluster, c.topic, c.kind) for p in provisioner.plan(platform) for c in p.changes}


def _partitions(platform: Platform, cluster: str, topic: str) -> int:
    return len(kafka.admin(platform, cluster).list_topics(topic, timeout=10).topics[topic].partitions)


def test_every_declared_topic_exists_everywhere_with_its_replication(provisioned: Platform):
    for cluster_name, cluster in provisioned.clusters.items():
        metadata = kafka.admin(provisioned, cluster_name).list_topics(timeout=10)
        for name, topic in provisioned.topics_on(cluster_name).items():
            partitions = metadata.topics[name].partitions
            assert len(partitions) == topic.partitions
            factor, _ = topic.replication_on(cluster)
            assert all(len(p.replicas) == factor for p in partitions.values())


def test_hand_made_drift_is_planned_and_repaired(provisioned: Platform):
    central, dc2 = kafka.admin(provisioned, "central"), kafka.admin(provisioned, "dc2")
    resource = ConfigResource(ResourceType.TOPIC, "notifications", incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    central.incremental_alter_configs([resource])[resource].result()
    dc2.delete_topics(["notifications"])["notifications"].result()

    assert _changes(provisioned) == {
        ("central", "notifications", ChangeKind.alter_configs),
        ("dc2", "notifications", ChangeKind.create),
    }
    provisioner.apply(provisioned, provisioner.plan(provisioned))
    assert all(p.in_sync for p in provisioner.plan(provisioned))
    assert _partitions(provisioned, "dc2", "notifications") == 3


def test_declared_partition_increase_is_applied(provisioned: Platform, platform_data, platform_file: Path):
    data = copy.deepcopy(platform_data)
    data["topics"]["notifications"]["partitions"] = 4
    grown = resolved(parse_platform(data, root=platform_file.parent))
    assert {(c, k) for c, t, k in _changes(grown)} == {(c, ChangeKind.add_partitions) for c in grown.clusters}
    provisioner.apply(grown, provisioner.plan(grown))
    assert all(_partitions(grown, c, "notifications") == 4 for c in grown.clusters)
    # Put the declaration's count back for the other tests: Kafka cannot shrink, so recreate.
    for cluster in grown.clusters:
        admin = kafka.admin(grown, cluster)
        admin.delete_topics(["notifications"])["notifications"].result()
    _wait_gone(grown, "notifications")
    provisioner.apply(provisioned, provisioner.plan(provisioned))


def test_partition_decrease_is_refused_and_nothing_changes(provisioned: Platform, platform_data, platform_file):
    data = copy.deepcopy(platform_data)
    data["topics"]["notifications"]["partitions"] = 2
    data["topics"]["ad-events"]["retention"] = "1d"  # a valid change that must not be applied either
    shrunk = resolved(parse_platform(data, root=platform_file.parent))
    plans = provisioner.plan(shrunk)
    assert all(any("Kafka cannot shrink a topic" in r.reason for r in p.refusals) for p in plans)
    with pytest.raises(provisioner.ProvisionError, match="nothing was changed"):
        provisioner.apply(shrunk, plans)
    assert all(p.in_sync for p in provisioner.plan(provisioned))


def test_cli_plan_exits_0_in_sync_2_with_changes_1_when_kafka_cannot(provisioned: Platform, platform_data,
                                                                       platform_file: Path):
    import yaml

    def plan(data: dict) -> int:
        path = platform_file.parent / "planned.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return subprocess.run([sys.executable, "-m", "conveyor", "topics", "plan", "--platform", str(path)],
                              capture_output=True, text=True, timeout=120).returncode

    changed, shrunk = copy.deepcopy(platform_data), copy.deepcopy(platform_data)
    changed["topics"]["notifications"]["retention"] = "4d"
    shrunk["topics"]["ad-events"]["partitions"] = 6
    assert (plan(platform_data), plan(changed), plan(shrunk)) == (0, 2, 1)


def test_cli_apply_exits_nonzero_on_refusal(provisioned: Platform, platform_data, platform_file: Path):
    import yaml

    data = copy.deepcopy(platform_data)
    data["topics"]["ad-events"]["partitions"] = 6
    bad = platform_file.parent / "shrunk.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    run = subprocess.run([sys.executable, "-m", "conveyor", "topics", "apply", "--platform", str(bad)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert "Kafka cannot shrink a topic" in run.stdout + run.stderr
    assert "nothing was changed" in run.stderr


def _wait_gone(platform: Platform, topic: str) -> None:
    eventually(lambda: all(topic not in kafka.admin(platform, c).list_topics(timeout=10).topics
                           for c in platform.clusters), 30, f"{topic} to be listed on no cluster", interval=0.5)


def _partitions_once_listed(admin, topic: str, count: int) -> dict:
    """The topic's partitions once the broker answering lists all ``count`` of them: a new topic's
    metadata reaches each broker a moment after its creation returns."""
    return eventually(lambda: p if len(p := admin.list_topics(topic, timeout=10).topics[topic].partitions) == count
                      else None, 30, f"{topic} to list {count} partitions", interval=0.2)


def test_isolated_topic_is_created_only_on_its_tagged_brokers(provisioned: Platform, platform_data, platform_file):
    data = copy.deepcopy(platform_data)
    data["clusters"]["central"]["tags"] = {"ads": [1, 2]}
    data["topics"]["ads-only"] = {"partitions": 4, "replication_factor": 2, "isolation": "ads",
                                  "clusters": ["central"]}
    isolated = resolved(parse_platform(data, root=platform_file.parent))
    provisioner.apply(isolated, provisioner.plan(isolated, ["central"]))
    try:
        admin = kafka.admin(isolated, "central")
        partitions = _partitions_once_listed(admin, "ads-only", 4)
        assert all(set(p.replicas) <= {1, 2} and len(p.replicas) == 2 for p in partitions.values())
        assert sorted(p.replicas[0] for p in partitions.values()) == [1, 1, 2, 2]
    finally:
        admin.delete_topics(["ads-only"])["ads-only"].result()


class _Asked:
    """A real admin client that notes the name of every call asked of it."""

    def __init__(self, admin) -> None:
        self.admin, self.asked = admin, []

    def __getattr__(self, name: str):
        self.asked.append(name)
        return getattr(self.admin, name)


def test_the_replicator_s_topic_sync_sends_no_describe_cluster_when_kafka_places_the_replicas(provisioned: Platform):
    # librdkafka aborts the whole process on some DescribeCluster answers of a restarting broker
    # (`rd_kafka_admin_response_parse: Assertion rko_result failed`), and a replicator syncs its
    # topics every discovery: it must ask for brokers only when it places replicas itself.
    name, route = next(iter(provisioned.routes.items()))
    source = kafka.admin(provisioned, route.source)
    counts = {topic: len(meta.partitions) for topic, meta in source.list_topics(timeout=10).topics.items()
              if topic in provisioned.topics and provisioned.copies(name, topic)}
    assert counts, "the route copies no declared topic"
    destination = _Asked(kafka.admin(provisioned, route.destination))
    sync_topics(provisioned, route, counts, source, destination)
    assert "list_topics" in destination.asked and "describe_cluster" not in destination.asked, destination.asked


def test_a_snapshot_reads_the_brokers_when_an_isolated_topic_is_to_be_created(
        provisioned: Platform, platform_data, platform_file):
    data = copy.deepcopy(platform_data)
    data["clusters"]["central"]["tags"] = {"ads": [1, 2]}
    data["topics"]["ads-only"] = {"partitions": 4, "replication_factor": 2, "isolation": "ads",
                                  "clusters": ["central"]}
    isolated = resolved(parse_platform(data, root=platform_file.parent))
    admin = _Asked(kafka.admin(isolated, "central"))
    snap = provisioner.snapshot(isolated, "central", admin, set(), placing=isolated.topics_on("central"))
    assert "describe_cluster" in admin.asked
    assert {b.broker_id for b in snap.brokers} == {1, 2, 3}
