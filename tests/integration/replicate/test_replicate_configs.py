"""Copies of topics a route's pattern matches, and platform.yaml does not declare, take their source
topic's configs: at creation, and again whenever the source's change. A source value central cannot
take is reported in the worker's log, its metrics and `conveyor replicate status`. Declared topics
keep their declaration."""

from __future__ import annotations

import copy
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from prometheus_client.parser import text_string_to_metric_families

from conveyor import kafka
from conveyor.config import Platform
from conveyor.replicate.status import route_status
from conveyor.replicate.topic_configs import MIRRORED
from tests.conftest import eventually, free_port, platform_variant

pytestmark = pytest.mark.integration
ROUTE = "dc1-cfg"
DAY_MS = 86_400_000




def _configs(platform: Platform, cluster: str, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = kafka.admin(platform, cluster)  # kept referenced until the future resolves
    # A topic just created may not be known to the broker answering yet.
    entries = eventually(lambda: admin.describe_configs([resource])[resource].result(), 30,
                         f"the configs of {topic} on {cluster}", errors=(KafkaException,))
    return {key: entries[key].value for key in MIRRORED}


def _alter(platform: Platform, cluster: str, topic: str, configs: dict[str, str]) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = kafka.admin(platform, cluster)
    admin.incremental_alter_configs([resource])[resource].result()


def _until(what: str, check, timeout: float = 60.0):
    """``check()`` once it holds; KafkaException counts as not yet (a topic not on central yet)."""
    return eventually(check, timeout, what, errors=(KafkaException,), interval=0.5)


def _metric(port: int, name: str, **labels: str) -> float | None:
    page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


@pytest.fixture
def cfg_route(provisioned: Platform, platform_data, platform_file: Path) -> Iterator[tuple[Platform, Path, str]]:
    """A route copying dc1's ``cfg-<run>-*`` topics into central; one of them is declared."""
    run = uuid.uuid4().hex[:6]
    data = copy.deepcopy(platform_data)
    data["topics"][f"cfg-{run}-declared"] = {"partitions": 2, "retention": "2d"}
    data["routes"] = {ROUTE: {"source": "dc1", "destination": "central", "pattern": f"cfg-{run}-.*", "buckets": 2,
                              "discovery_interval": "1s"}}
    path = platform_file.parent / f"replicate-cfg-{run}.yaml"
    platform = platform_variant(data, path)
    yield platform, path, run
    for cluster in ("dc1", "central"):
        admin = kafka.admin(platform, cluster)
        names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"cfg-{run}-")]
        for future in admin.delete_topics(names).values() if names else ():
            future.result()


def test_undeclared_copies_take_and_follow_their_source_configs(cfg_route, tmp_path):
    platform, path, run = cfg_route
    compacted, kept, small, declared = (f"cfg-{run}-{n}" for n in ("compacted", "kept", "small", "declared"))
    sources = {
        compacted: {"cleanup.policy": "compact", "retention.ms": "-1"},
        kept: {"retention.ms": str(30 * DAY_MS), "retention.bytes": "1073741824", "max.message.bytes": "2097152",
               "compression.type": "zstd"},
        small: {"max.message.bytes": "65536"},
        declared: {"retention.ms": str(20 * DAY_MS)},  # the declaration says 2d: that wins on central
    }
    dc1 = kafka.admin(platform, "dc1")
    for future in dc1.create_topics([NewTopic(name, 2, 1, config=config) for name, config in sources.items()]).values():
        future.result()
    port = free_port()
    log_path = tmp_path / "worker.log"
    with open(log_path, "ab") as log:
        worker = subprocess.Popen([sys.executable, "-m", "conveyor", "replicate", "worker", "--route", ROUTE, "--id",
                                   f"{ROUTE}-w0", "--platform", str(path), "--metrics-port", str(port)],
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        # Created on central with the source's configs; min.insync.replicas is central's own 2,
        # above the one-broker source's 1.
        for name in (compacted, kept):
            source = _configs(platform, "dc1", name)
            wanted = {**source, "min.insync.replicas": "2"}
            _until(f"{name} has its source's configs on central", lambda: _configs(platform, "central", name) == wanted)
        central_kept = _configs(platform, "central", kept)
        assert (central_kept["retention.ms"], central_kept["compression.type"]) == (str(30 * DAY_MS), "zstd")
        assert _configs(platform, "central", compacted)["cleanup.policy"] == "compact"
        # Below what the copier's batches need: central keeps Kafka's default, and says so.
        _until(f"{small} is on central", lambda: _configs(platform, "central", small)["max.message.bytes"] == "1048588")
        # The declared topic has its declaration, not its source's configs.
        _until(f"{declared} is on central", lambda: _configs(platform, "central", declared))
        assert _configs(platform, "central", declared)["retention.ms"] == str(2 * DAY_MS)

        # A later change on the source reaches central; one central cannot take is reported.
        _alter(platform, "dc1", kept, {"retention.ms": str(5 * DAY_MS), "cleanup.policy": "compact,delete"})
        _alter(platform, "dc1", compacted, {"min.insync.replicas": "4"})
        _until("the source's change reached central", lambda: (
            lambda c: (c["retention.ms"], c["cleanup.policy"]) == (str(5 * DAY_MS), "compact,delete"))(
                _configs(platform, "central", kept)))
        _until("min.insync.replicas went to central's limit",
               lambda: _configs(platform, "central", compacted)["min.insync.replicas"] == "3")
        _until("the worker counts the differences", lambda: (
            _metric(port, "conveyor_replicate_config_differences", route=ROUTE, topic=compacted) == 1
            and _metric(port, "conveyor_replicate_config_differences", route=ROUTE, topic=small) == 1))
        assert _metric(port, "conveyor_replicate_config_differences", route=ROUTE, topic=kept) == 0

        status = route_status(platform, ROUTE)
        assert {(d.topic, d.config, d.source, d.destination) for d in status.differences} == {
            (compacted, "min.insync.replicas", "4", "3"), (small, "max.message.bytes", "65536", "1048588")}
        shown = subprocess.run([sys.executable, "-m", "conveyor", "replicate", "status", "--route", ROUTE,
                                "--platform", str(path)], capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr
        assert (f"config not copied: route {ROUTE}: {compacted}: min.insync.replicas is 4 on the source but 3 on "
                "the destination: above the copy's replication factor 3 on central") in shown.stdout
        assert f"{small}: max.message.bytes is 65536 on the source but 1048588" in shown.stdout
        assert declared not in "".join(line for line in shown.stdout.splitlines() if "config not copied" in line)
    finally:
        worker.terminate()
        worker.wait(60)
    logs = log_path.read_text(errors="replace")
    assert f"config not copied: {compacted}: min.insync.replicas is 4 on the source" in logs
    assert f"config not copied: {small}: max.message.bytes is 65536 on the source" in logs
