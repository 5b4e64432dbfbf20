"""The services start and serve from what the Kubernetes manifests give them, and from nothing else.

The session's platform is deployed as a team deploys it (tests/deploykit.py): its clusters named by
bootstrap, credentials as ``${VAR}`` of the Secret conveyor-secrets, the certificate files in the
Secret conveyor-tls, the lake on a JDBC catalog (PostgreSQL) with its warehouse and the views'
checkpoint on object storage (moto's S3 server), no runtime.home. `conveyor deploy kubernetes`
writes the manifests, and every pod of every workload runs from its container as written (command,
arguments, environment, mounts, working folder), each in an empty folder on an address of its own:
two gateways per data centre, two replicator workers, the registrar, two dispatcher nodes at the
StatefulSet's fixed names, the views job and the watcher. Every pod's readiness probe passes as
written; events published through each gateway pod reach central once through the replicator's
pods; one run of the lake's CronJob lands each of them once; the views job counts them exactly.
(tests/chaos/deploy/test_host_loss.py loses these hosts under traffic.)
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from conveyor_sdk.publisher import Publisher
from tests.conftest import eventually
from tests.deploykit import Fleet, NotReady, addresses, case_topic, deployed_case
from tests.lakekit import lake_database, postgres_server, read_back  # noqa: F401
from tests.realtimekit import counters_in_redis, event_at, expected_counters
from tests.replicatekit import read_records
from tests.s3kit import s3_server  # noqa: F401

pytestmark = pytest.mark.integration

EVENTS_PER_GATEWAY = 40
TOKEN = "demo-adserver-token"


def test_every_pod_starts_from_its_manifest_alone_and_serves(provisioned, platform_data, platform_file,  # noqa: F811
                                                             lake_database, s3_server, tmp_path):  # noqa: F811
    hosts = addresses(int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")), 16)
    topic = case_topic(tmp_path)
    variant, deployed, documents = deployed_case(platform_data, platform_file, lake_database, s3_server, tmp_path,
                                                 hosts)
    fleet = Fleet(documents, deployed, hosts, tmp_path / "hosts")
    parts = Counter(pod.part for pod in fleet.pods)
    assert parts == {"gateway": 4, "replicator": 2, "registrar": 1, "dispatcher": 2, "views": 1, "watcher": 1}, parts
    lake_run = None
    try:
        for pod in fleet.pods:
            pod.start()
        for pod in fleet.pods:
            eventually(pod.ready, 300, f"{pod.name} on {pod.address} to pass its readiness probe", (NotReady,), 0.5)

        events = []
        for pod in fleet.of("gateway"):
            port = pod.container["ports"][0]["containerPort"]
            batch = [event_at(time.time(), ("impression", "click")[i % 2], f"user-{i % 5}", f"banner-{i % 3}", 1000)
                     for i in range(EVENTS_PER_GATEWAY)]
            with Publisher(f"https://{pod.address}:{port}", TOKEN, timeout=30, verify=str(deployed.ca)) as publisher:
                publisher.publish(topic, batch)
            events += batch
        sent = [e["event_id"] for e in events]

        def copied() -> Counter:
            return Counter(value["event_id"] for _, _, _, value in read_records(variant, [topic]))

        eventually(lambda: set(copied()) >= set(sent), 180, "the replicator pods to copy every event to central")
        assert copied() == Counter(sent)

        lake_run = fleet.run(fleet.cronjob)
        assert lake_run.process is not None and lake_run.process.wait(600) == 0, lake_run.log()
        landed, _, _ = read_back(lake_database, s3_server.warehouse(f"{tmp_path.name}/warehouse"), topic,
                                 s3_server.reader_properties())
        assert Counter(landed) == Counter(sent)
        # Each Spark driver kept its log in its own working folder, not beside the platform file.
        for pod in (lake_run, *fleet.of("views")):
            assert (pod.folder / "work" / "logs" / "spark.log").stat().st_size > 0, pod.name

        ctr, interests = f"ctr-{topic}", f"interests-{topic}"
        expected = expected_counters(events, ctr, interests)
        eventually(lambda: (counters_in_redis(variant, ctr), counters_in_redis(variant, interests)) == expected, 300,
                   "the views pod to count every event once")
    finally:
        fleet.stop()
        if lake_run is not None:
            lake_run.stop()
