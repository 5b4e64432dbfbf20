"""Every cluster of the demo platform runs as real brokers and carries data end to end."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.runtime.local import LocalPlatform
from conveyor.runtime.smoke import smoke

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("cluster", ["dc1", "dc2", "central"])
def test_produce_and_consume_on_every_cluster(platform: Platform, local_platform, cluster: str):
    result = smoke(platform, cluster, messages=200)
    assert result.consumed == result.produced == 200


def test_clusters_report_all_brokers_with_racks(platform: Platform, local_platform):
    for name, cluster in platform.clusters.items():
        admin = kafka.admin(platform, name)
        nodes = admin.describe_cluster(request_timeout=10).result().nodes
        assert len(nodes) == cluster.brokers
        if cluster.racks:
            assert sorted(n.rack for n in nodes) == sorted(cluster.racks)


def test_every_broker_serves_jmx_metrics(local: LocalPlatform):
    for layout in local.layouts:
        for node in layout.brokers:
            body = urllib.request.urlopen(node.metrics_url, timeout=10).read().decode()
            assert "kafka_server_replicamanager_underreplicatedpartitions" in body
            assert "kafka_network_requestmetrics_totaltimems" in body


def test_up_again_reports_what_already_runs(local: LocalPlatform):
    state = local.up()
    assert state.started == ()
    assert state.all_running


def test_cli_status_and_plan(platform_file, local_platform):
    status = subprocess.run([sys.executable, "-m", "conveyor", "status", "--platform", str(platform_file)],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "central-broker-3" in status.stdout
