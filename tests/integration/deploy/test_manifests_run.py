"""The services start and serve from what the Kubernetes manifests give them, and from nothing else.

The session's platform is deployed as a team deploys it (tests/deploykit.py): its clusters named by
bootstrap, credentials as ``${VAR}`` of the Secret conveyor-secrets, the certificate files in the
Secret conveyor-tls, the lake on a JDBC catalog (PostgreSQL) with its warehouse and the views'
checkpoint on object storage (moto's S3 server). `conveyor deploy kubernetes` writes the manifests,
and every pod of every workload runs from its container as written (command, arguments,
environment, mounts, working folder), each in an empty folder on an address of its own: two
gateways per data centre, two replicator workers, the registrar, two dispatcher nodes at the
StatefulSet's fixed names, the views job and the watcher. Every pod's readiness probe passes as
written; events published through each gateway pod reach central once through the replicator's
pods; one run of the lake's CronJob lands each of them once; the views job counts them.
"""

from __future__ import annotations

import copy
import os
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from conveyor_sdk.publisher import Publisher
from tests.conftest import eventually, platform_variant
from tests.deploykit import NotReady, Pod, addresses, deployed_platform, manifests
from tests.lakekit import lake_database, postgres_server, read_back  # noqa: F401
from tests.realtimekit import counters_in_redis, event_at, expected_counters, views_of
from tests.replicatekit import read_records
from tests.s3kit import ACCESS_KEY, REGION, SECRET_KEY, s3_server  # noqa: F401

pytestmark = pytest.mark.integration

TOPIC = "deployed-events"
DCS = ("dc1", "dc2")
EVENTS_PER_GATEWAY = 40
TOKEN = "demo-adserver-token"


def _platform_data(platform_data, platform_file: Path, lake_database, s3_server, folder: str) -> dict:  # noqa: F811
    data = copy.deepcopy(platform_data)
    for spec in data["topics"].values():  # the file is written elsewhere: keep contracts found
        if spec.get("contract"):
            spec["contract"] = str(platform_file.parent / spec["contract"])
    data["topics"][TOPIC] = {**data["topics"]["ad-events"], "partitions": 3, "consumers": ["lake", "realtime"]}
    data["topics"][f"{TOPIC}-rejects"] = {"partitions": 1, "retention": "7d", "clusters": ["central"]}
    data["routes"] = {f"{dc}-deployed": {"source": dc, "destination": "central", "topics": [TOPIC]} for dc in DCS}
    for edge in ("gateway", "dispatch", "ops"):  # every edge serves TLS, as the demo's do
        data[edge] = {**data.get(edge, {}), "tls": {}}
    data["ops"]["components"] = {}  # the session's pages are on addresses no pod serves
    data["pipeline"] = {
        "source": "central",
        "catalog": {"type": "jdbc", "uri": lake_database.url, "warehouse": s3_server.warehouse(f"{folder}/warehouse"),
                    "options": {"jdbc.user": lake_database.user, **s3_server.catalog_options(),
                                "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY}},
        "spark": {"master": "local[1]", "driver_memory": "640m", "shuffle_partitions": 2},
        "lake": {"topics": [TOPIC]},
        "realtime": {"checkpoint": s3_server.warehouse(f"{folder}/checkpoints"), "trigger": "2s",
                     "rejects_topic": f"{TOPIC}-rejects", "views": views_of(TOPIC, "2m", "10m")},
    }
    return data


def test_every_pod_starts_from_its_manifest_alone_and_serves(provisioned, platform_data, platform_file, lake_database,  # noqa: F811
                                                             s3_server, tmp_path):  # noqa: F811
    from conveyor.topics import provisioner

    data = _platform_data(platform_data, platform_file, lake_database, s3_server, tmp_path.name)
    variant = platform_variant(data, tmp_path / "variant.yaml")  # its users and ACLs granted
    provisioner.apply(variant, provisioner.plan(variant))
    addressed = addresses(int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")), 16)
    deployed = deployed_platform(data, tmp_path / "variant.yaml", tmp_path / "deployed", addressed)
    documents = manifests(deployed, tmp_path)
    hosts = iter(addressed)

    pods: list[Pod] = []
    lake_run = None
    for document in documents:
        name = document["metadata"]["name"]
        if document["kind"] == "CronJob":
            lake_run = Pod(document, f"{name}-run", next(hosts), deployed, tmp_path / "pods" / f"{name}-run")
            continue
        if document["kind"] not in ("Deployment", "StatefulSet"):
            continue
        stateful = document["kind"] == "StatefulSet"
        for i in range(document["spec"]["replicas"]):
            pod = f"{name}-{i}" if stateful else f"{name}-{uuid.uuid4().hex[:5]}"
            pods.append(Pod(document, pod, next(hosts), deployed, tmp_path / "pods" / pod))
    for pod in pods:  # a StatefulSet's pods by their DNS names
        pod.dns = {f"{other.name}.{other.workload['metadata']['name']}": other.address for other in pods
                   if other.workload["kind"] == "StatefulSet"}
    parts = Counter(pod.container["name"] for pod in pods)
    assert parts == {"gateway": 4, "replicator": 2, "registrar": 1, "dispatcher": 2, "views": 1, "watcher": 1}, parts
    assert lake_run is not None

    try:
        for pod in pods:
            pod.start()
        for pod in pods:
            eventually(pod.ready, 300, f"{pod.name} on {pod.address} to pass its readiness probe", (NotReady,), 0.5)

        events = []
        for pod in (p for p in pods if p.container["name"] == "gateway"):
            port = pod.container["ports"][0]["containerPort"]
            batch = [event_at(time.time(), ("impression", "click")[i % 2], f"user-{i % 5}", f"banner-{i % 3}", 1000)
                     for i in range(EVENTS_PER_GATEWAY)]
            with Publisher(f"https://{pod.address}:{port}", TOKEN, timeout=30, verify=str(deployed.ca)) as publisher:
                publisher.publish(TOPIC, batch)
            events += batch
        sent = [e["event_id"] for e in events]

        def copied() -> Counter:
            return Counter(value["event_id"] for _, _, _, value in read_records(variant, [TOPIC]))

        eventually(lambda: set(copied()) >= set(sent), 180, "the replicator pods to copy every event to central")
        assert copied() == Counter(sent)

        lake_run.start()
        assert lake_run.process is not None and lake_run.process.wait(600) == 0, lake_run.log()
        landed, _, _ = read_back(lake_database, s3_server.warehouse(f"{tmp_path.name}/warehouse"), TOPIC,
                                 s3_server.reader_properties())
        assert Counter(landed) == Counter(sent)

        # Each Spark driver kept its log in its own working folder, not beside the platform file.
        for pod in (lake_run, *(p for p in pods if p.container["name"] == "views")):
            assert (pod.folder / "work" / "logs" / "spark.log").stat().st_size > 0, pod.name

        ctr, interests = f"ctr-{TOPIC}", f"interests-{TOPIC}"
        expected = expected_counters(events, ctr, interests)
        eventually(lambda: (counters_in_redis(variant, ctr), counters_in_redis(variant, interests)) == expected, 300,
                   "the views pod to count every event once")
    finally:
        for pod in [*pods, lake_run]:
            if pod is not None:
                pod.stop()
