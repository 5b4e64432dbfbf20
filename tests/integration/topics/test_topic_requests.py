"""Topics asked for through the bus, against the session's secured clusters: a request at one
gateway lands the topic on every cluster with its configs and ACLs, the other gateway serves it
without a restart, the routes' running workers copy it exactly once; refused requests leave nothing
behind, neither in requested-topics.yaml nor on a cluster."""

from __future__ import annotations

import copy
import json
import random
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from confluent_kafka.admin import ConfigResource, ResourceType

from conveyor import kafka
from conveyor.bus.registrar import held_partitions
from conveyor.config import Platform, load_resolved_platform
from conveyor.config.requested import read_requested, requested_path
from conveyor.topics import provisioner
from tests.conftest import ROOT, demo_event, eventually, platform_variant
from tests.replicatekit import Workers, read_records

pytestmark = pytest.mark.integration

ADSERVER, NOTIFIER = "demo-adserver-token", "demo-notifier-token"
ROUTES = ("req-dc1-central", "req-dc2-central")
#: The ad events' contract, under the requested topic's own name.
CONTRACT = {**json.loads((ROOT / "contracts" / "ad-events.schema.json").read_text()), "title": "requested"}


def _variant(platform_data: dict[str, Any], folder: Path, **clusters: dict[str, Any]) -> tuple[Platform, Path]:
    """The session's platform in a folder of its own (its own requested-topics.yaml), adserver allowed
    to request topics, and routes that copy requested topics alone."""
    data = copy.deepcopy(platform_data)
    data["topic_requests"] = {"allowed": ["adserver"]}
    data["routes"] = {f"req-{dc}-central": {"source": dc, "destination": "central", "buckets": 3}
                      for dc in ("dc1", "dc2")}
    for name, settings in clusters.items():
        data["clusters"][name] = {**data["clusters"][name], **settings}
    shutil.copytree(ROOT / "contracts", folder / "contracts")
    path = folder / "platform.yaml"
    return platform_variant(data, path), path


def _ask(url: str, token: str, topic: str, contract: dict[str, Any] = CONTRACT, **fields: Any) -> httpx.Response:
    body = {"topic": topic, "contract": contract, "expected_rate": 500, "consumers": ["lake"], **fields}
    return httpx.post(f"{url}/v1/topics", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def _publish(url: str, token: str, topic: str, events: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{url}/v1/topics/{topic}/events", content=orjson.dumps(events),
                      headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}, timeout=60)


def _on_clusters(platform: Platform, topic: str) -> dict[str, int]:
    """Partitions of ``topic`` per cluster that has it."""
    found = {}
    for cluster in platform.clusters:
        metadata = kafka.admin(platform, cluster).list_topics(timeout=10)
        if topic in metadata.topics:
            found[cluster] = len(metadata.topics[topic].partitions)
    return found


@pytest.fixture
def unique_topic(platform: Platform) -> Any:
    name = f"req-{uuid.uuid4().hex[:8]}"
    yield name
    for cluster in _on_clusters(platform, name):
        admin = kafka.admin(platform, cluster)  # kept referenced until the future resolves
        admin.delete_topics([name])[name].result()


def test_a_requested_topic_is_on_every_cluster_served_by_both_gateways_and_copied_once(
        provisioned, platform_data, tmp_path, serve_gateway, unique_topic):
    variant, path = _variant(platform_data, tmp_path)
    workers = Workers(path, tmp_path, random.Random(0))  # one worker per route, never killed
    for route in ROUTES:
        workers.start(f"{route}-w0")
    try:
        dc1, dc2 = serve_gateway(variant, "dc1"), serve_gateway(variant, "dc2")
        answer = _ask(dc1, ADSERVER, unique_topic, retention="2d")
        assert answer.status_code == 201, answer.text
        assert answer.json() == {"topic": unique_topic, "partitions": 9, "clusters": ["dc1", "dc2", "central"],
                                 "routes": list(ROUTES), "requested_by": "adserver", "new": True}

        # On every cluster, with its declared configs; in the file beside platform.yaml.
        assert _on_clusters(variant, unique_topic) == {"dc1": 9, "dc2": 9, "central": 9}
        for cluster in variant.clusters:
            resource = ConfigResource(ResourceType.TOPIC, unique_topic)
            admin = kafka.admin(variant, cluster)
            configs = admin.describe_configs([resource])[resource].result()
            assert configs["retention.ms"].value == str(2 * 86_400_000)
        declared = read_requested(tmp_path)[unique_topic]
        assert (declared.requested_by, declared.producers, declared.consumers) == ("adserver", ["adserver"], ["lake"])
        reloaded = load_resolved_platform(path)
        plans = provisioner.plan(reloaded)
        assert not [c for p in plans for c in p.changes if c.topic == unique_topic]
        assert all(p.budget is not None and p.budget.held == p.budget.after for p in plans)

        # Both gateways take its events (dc2's learns of the topic at its first request), only
        # from its producers; the routes' running workers copy them to central.
        sent = [demo_event() for _ in range(60)]
        assert _publish(dc1, ADSERVER, unique_topic, sent[:30]).status_code == 200
        assert _publish(dc2, ADSERVER, unique_topic, sent[30:]).status_code == 200
        refused = _publish(dc2, NOTIFIER, unique_topic, [demo_event()])
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden", refused.text

        def copied() -> Counter[str] | None:
            ids = Counter(event["event_id"] for *_, event in read_records(variant, [unique_topic]))
            return ids if sum(ids.values()) >= len(sent) else None

        landed = eventually(copied, 120, f"the routes to copy {unique_topic} to central", interval=1)
        assert landed == Counter(e["event_id"] for e in sent)
        assert all(proc.poll() is None for proc in workers.procs.values())

        # Asked again (by the command line, of the other gateway): granted before, nothing changes;
        # another contract under the name: taken.
        contract = tmp_path / "requested.schema.json"
        contract.write_text(json.dumps(CONTRACT))
        again = subprocess.run(
            [sys.executable, "-m", "conveyor", "topics", "request", unique_topic, "--platform", str(path),
             "--contract", str(contract), "--rate", "500", "--consumer", "lake", "--retention", "2d",
             "--gateway", dc2, "--token", ADSERVER, "-o", "json"], capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["new"] is False
        other = _ask(dc1, ADSERVER, unique_topic, contract={**CONTRACT, "title": "another"}, retention="2d")
        assert other.status_code == 409 and other.json()["error"] == "topic_exists", other.text
    finally:
        workers.stop_all()


def test_refused_requests_record_nothing_anywhere(provisioned, platform_data, tmp_path, serve_gateway, unique_topic):
    held = held_partitions(provisioned, "central")
    variant, path = _variant(platform_data, tmp_path, central={"partition_budget": held + 5})
    url = serve_gateway(variant, "dc1")
    no_event_id = {**CONTRACT, "required": [f for f in CONTRACT["required"] if f != "event_id"]}
    refusals = {
        "a service not allowed": (_ask(url, NOTIFIER, unique_topic), 403, "forbidden"),
        "no token": (httpx.post(f"{url}/v1/topics", json={}, timeout=30), 401, "unauthenticated"),
        "a contract without event_id": (_ask(url, ADSERVER, unique_topic, contract=no_event_id), 422,
                                        "invalid_request"),
        "an unknown consumer": (_ask(url, ADSERVER, unique_topic, consumers=["nobody"]), 422, "invalid_request"),
        "a rate above 100 partitions": (_ask(url, ADSERVER, unique_topic, expected_rate=50_000), 422,
                                        "invalid_request"),
        "a platform topic's name": (_ask(url, ADSERVER, "_mine"), 422, "invalid_request"),
        "central's partition budget": (_ask(url, ADSERVER, unique_topic), 422, "partition_budget"),
    }
    for what, (answer, status, reason) in refusals.items():
        assert (answer.status_code, answer.json().get("error")) == (status, reason), f"{what}: {answer.text}"
    assert "event_id" in refusals["a contract without event_id"][0].json()["message"]
    assert refusals["central's partition budget"][0].json() | {"message": ""} == {
        "error": "partition_budget", "message": "", "cluster": "central", "partitions": held, "adding": 9,
        "budget": held + 5}

    # The command line refuses it the same way, in one line.
    cli = subprocess.run([sys.executable, "-m", "conveyor", "topics", "request", unique_topic, "--platform", str(path),
                          "--contract", str(ROOT / "contracts" / "ad-events.schema.json"), "--rate", "10",
                          "--as", "adserver"], capture_output=True, text=True, timeout=120)
    assert cli.returncode != 0 and "partition budget of" in cli.stderr, cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr

    assert not requested_path(tmp_path).exists() or unique_topic not in yaml.safe_load(
        requested_path(tmp_path).read_text())["topics"]
    assert _on_clusters(variant, unique_topic) == {}
