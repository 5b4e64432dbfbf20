"""Topics asked for through the bus, against the session's secured clusters: a request at a gateway
is recorded in the contract registry and waits (202) until the registrar, the one service with the
admin credentials, lands the topic on every cluster with its configs, ACLs and contract version 1;
a gateway started afterwards from a folder of its own serves it, the routes' running workers copy
it exactly once; refused requests leave no topic behind, and the gateways' principal cannot create
one itself."""

from __future__ import annotations

import copy
import json
import random
import shutil
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ConfigResource, NewTopic,
                                   ResourcePatternType, ResourceType)

from conveyor import kafka
from conveyor.registrar import Registrar, held_partitions
from conveyor.bus.registry import with_granted
from conveyor.bus.registry_state import request_key
from conveyor.config import Part, Platform, load_resolved_platform
from conveyor.topics import provisioner
from tests.conftest import ROOT, demo_event, eventually, platform_variant
from tests.replicatekit import Workers, read_records

pytestmark = pytest.mark.integration

ADSERVER, NOTIFIER = "demo-adserver-token", "demo-notifier-token"
ROUTES = ("req-dc1-central", "req-dc2-central")
#: The ad events' contract, under the requested topic's own name.
CONTRACT = {**json.loads((ROOT / "contracts" / "ad-events.schema.json").read_text()), "title": "requested"}


def _variant(platform_data: dict[str, Any], folder: Path, requests: dict[str, Any] | None = None,
             **clusters: dict[str, Any]) -> tuple[Platform, Path]:
    """The session's platform in a folder of its own, adserver allowed to request topics, and
    routes that copy requested topics alone."""
    data = copy.deepcopy(platform_data)
    data["topic_requests"] = {"allowed": ["adserver"], **(requests or {})}
    data["routes"] = {f"req-{dc}-central": {"source": dc, "destination": "central", "buckets": 3}
                      for dc in ("dc1", "dc2")}
    for name, settings in clusters.items():
        data["clusters"][name] = {**data["clusters"][name], **settings}
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "contracts", folder / "contracts")
    path = folder / "platform.yaml"
    return platform_variant(data, path), path


@contextmanager
def running_registrar(platform: Platform) -> Iterator[Registrar]:
    registrar = Registrar(platform, f"test-registrar-{uuid.uuid4().hex[:6]}")
    stop = threading.Event()
    thread = threading.Thread(target=registrar.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield registrar
    finally:
        stop.set()
        thread.join(30)


def _ask(url: str, token: str, topic: str, contract: dict[str, Any] = CONTRACT, **fields: Any) -> httpx.Response:
    body = {"topic": topic, "contract": contract, "expected_rate": 500, "consumers": ["lake"], **fields}
    return httpx.post(f"{url}/v1/topics", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def _poll(url: str, token: str, path: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


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
    # The request leaves the registry too, so that the session's later gateways do not serve it.
    producer = kafka.producer(platform, platform.registry_cluster, "test-cleanup")
    producer.produce(platform.contracts.topic, None, request_key(name), partition=0)
    assert producer.flush(30) == 0


def test_a_request_waits_for_the_registrar_and_is_then_served_everywhere_and_copied_once(
        provisioned, platform_data, tmp_path, serve_gateway, unique_topic):
    variant, path = _variant(platform_data, tmp_path / "dc1", {"grant_wait": 1})
    workers = Workers(path, tmp_path, random.Random(0))  # one worker per route, never killed
    for route in ROUTES:
        workers.start(f"{route}-w0")
    try:
        dc1 = serve_gateway(variant, "dc1")
        # No registrar yet: the request is recorded, and the answer says where to ask how it stands.
        waiting = _ask(dc1, ADSERVER, unique_topic, retention="2d")
        assert waiting.status_code == 202, waiting.text
        assert waiting.headers["location"] == f"/v1/topics/requests/{unique_topic}"
        assert waiting.json()["state"] == "pending"
        assert _on_clusters(variant, unique_topic) == {}

        with running_registrar(variant):
            answer = eventually(lambda: (a := _poll(dc1, ADSERVER, waiting.headers["location"]))["state"] != "pending"
                                and a, 60, "the registrar to decide the request", interval=0.5)
        assert answer | {"requested_at": ""} == {
            "topic": unique_topic, "state": "granted", "requested_by": "adserver", "requested_at": "",
            "poll": f"/v1/topics/requests/{unique_topic}", "partitions": 9, "clusters": ["dc1", "dc2", "central"],
            "routes": list(ROUTES), "new": False}

        # On every cluster, with its declared configs; its contract is version 1 of its subject.
        assert _on_clusters(variant, unique_topic) == {"dc1": 9, "dc2": 9, "central": 9}
        for cluster in variant.clusters:
            resource = ConfigResource(ResourceType.TOPIC, unique_topic)
            admin = kafka.admin(variant, cluster)
            configs = admin.describe_configs([resource])[resource].result()
            assert configs["retention.ms"].value == str(2 * 86_400_000)
        assert _poll(dc1, ADSERVER, f"/subjects/{unique_topic}-value/versions") == [1]
        reloaded = with_granted(load_resolved_platform(path))
        assert reloaded.topics[unique_topic].requested_by == "adserver"
        plans = provisioner.plan(reloaded)
        assert not [c for p in plans for c in p.changes if c.topic == unique_topic]

        # A gateway started afterwards from a folder of its own (nothing shared but the clusters)
        # serves it at once; both take its events, only from its producers; the routes' running
        # workers copy them to central.
        other, _ = _variant(platform_data, tmp_path / "dc2")
        dc2 = serve_gateway(other, "dc2")
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
        taken = _ask(dc1, ADSERVER, unique_topic, contract={**CONTRACT, "title": "another"}, retention="2d")
        assert taken.status_code == 409 and taken.json()["error"] == "topic_exists", taken.text
    finally:
        workers.stop_all()


def test_refused_requests_create_no_topic(provisioned, platform_data, tmp_path, serve_gateway, unique_topic):
    held = held_partitions(provisioned, "central", unique_topic)
    variant, path = _variant(platform_data, tmp_path, central={"partition_budget": held + 5})
    capped, _ = _variant(platform_data, tmp_path / "capped", {"max_partitions_per_service": 5})
    url, capped_url = serve_gateway(variant, "dc1"), serve_gateway(capped, "dc1")
    no_event_id = {**CONTRACT, "required": [f for f in CONTRACT["required"] if f != "event_id"]}
    with running_registrar(variant):
        refusals = {
            "a service not allowed": (_ask(url, NOTIFIER, unique_topic), 403, "forbidden"),
            "no token": (httpx.post(f"{url}/v1/topics", json={}, timeout=30), 401, "unauthenticated"),
            "a contract without event_id": (_ask(url, ADSERVER, unique_topic, contract=no_event_id), 422,
                                            "invalid_request"),
            "an unknown consumer": (_ask(url, ADSERVER, unique_topic, consumers=["nobody"]), 422, "invalid_request"),
            "a rate above 100 partitions": (_ask(url, ADSERVER, unique_topic, expected_rate=50_000), 422,
                                            "invalid_request"),
            "a platform topic's name": (_ask(url, ADSERVER, "_mine"), 422, "invalid_request"),
            "the service's partition cap": (_ask(capped_url, ADSERVER, unique_topic), 422, "request_cap"),
            "central's partition budget": (_ask(url, ADSERVER, unique_topic), 422, "partition_budget"),
        }
    for what, (answer, status, reason) in refusals.items():
        assert (answer.status_code, answer.json().get("error")) == (status, reason), f"{what}: {answer.text}"
    assert "event_id" in refusals["a contract without event_id"][0].json()["message"]
    assert "max_partitions_per_service" in refusals["the service's partition cap"][0].json()["message"]
    assert refusals["central's partition budget"][0].json() | {"message": ""} == {
        "error": "partition_budget", "message": "", "cluster": "central", "partitions": held, "adding": 9,
        "budget": held + 5}
    assert _poll(url, ADSERVER, f"/v1/topics/requests/{unique_topic}")["state"] == "refused"

    # The command line, as the admin, refuses it the same way, in one line.
    cli = subprocess.run([sys.executable, "-m", "conveyor", "topics", "request", unique_topic, "--platform", str(path),
                          "--contract", str(ROOT / "contracts" / "ad-events.schema.json"), "--rate", "10",
                          "--as", "adserver"], capture_output=True, text=True, timeout=120)
    assert cli.returncode != 0 and "partition budget of" in cli.stderr, cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    assert _on_clusters(variant, unique_topic) == {}
    assert unique_topic not in with_granted(variant).topics


def test_the_gateways_principal_can_create_no_topic_and_no_acl(provisioned):
    admin = kafka.admin(provisioned.acting_as(Part.gateway), "dc1")
    name = f"req-{uuid.uuid4().hex[:8]}"
    with pytest.raises(KafkaException) as created:
        admin.create_topics([NewTopic(name, 1, 3)])[name].result(30)
    assert created.value.args[0].name() == "TOPIC_AUTHORIZATION_FAILED"
    binding = AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:conveyor-gateway", "*",
                         AclOperation.ALL, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as granted:
        admin.create_acls([binding])[binding].result(30)
    assert granted.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
    assert name not in _on_clusters(provisioned, name)
