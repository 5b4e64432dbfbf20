"""The watch service's outputs from a known state: JSON API, dashboard page, metrics, health check.

The state is built by the same pure parts the watcher uses (tracker, health assessment, alerts);
the HTTP app runs without its lifespan, so no round touches a broker here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from conveyor.config import load_platform
from conveyor.ops.alerts import group_alerts, health_alert, sort_alerts
from conveyor.ops.health import BrokerHealth, BrokerReading, assess_cluster
from conveyor.ops.report import PROBLEM_PARTITIONS, state_json
from conveyor.ops.tracker import GroupOffsets, OffsetSnapshot, OffsetTracker, PartitionMeta
from conveyor.ops.watch import ClusterReport, OpsState, Watcher, now_ms
from conveyor.web.app import create_app

ROOT = Path(__file__).resolve().parents[3]


def cluster_report(at: int) -> ClusterReport:
    tracker = OffsetTracker("central", window=5)
    partitions = [("t", p) for p in range(30)]
    for i in range(4):
        ends = {tp: 1000 * (i + 1) for tp in partitions}
        slow = {tp: 100 * (i + 1) for tp in partitions}  # falls further behind every round
        tracker.push(OffsetSnapshot("central", at - (3 - i) * 5000, (
            GroupOffsets("mailer", "STABLE", slow), GroupOffsets("lake", "STABLE", ends)),
            dict.fromkeys(partitions, PartitionMeta(1, (1, 2), (1, 2))), ends))
    groups = tracker.evaluate(at)
    brokers = [BrokerHealth(BrokerReading("central-broker-1", at, 1, leaders=30.0, replicas=60.0,
                                          under_replicated=4.0, p99_ms={"Produce": 3.0})),
               BrokerHealth(BrokerReading("central-broker-2", at, 2, "ConnectError: refused", True))]
    health = assess_cluster("central", at, brokers)
    alerts = [health_alert(f) for f in health.findings] + [a for g in groups for a in group_alerts(g)]
    return ClusterReport("central", at, groups, health, sort_alerts(alerts), 0.2,
                         {"metadata": 1, "list_groups": 1, "offset_fetch": 2, "list_offsets": 2}, 30)


@pytest.fixture
def watcher() -> Watcher:
    w = Watcher(load_platform(ROOT / "platform.yaml"))
    yield w
    w.close()


def test_state_json_lists_problem_partitions_or_all_of_one_group():
    at = now_ms()
    state = OpsState("demo", at, 5.0, (cluster_report(at),), ())
    data = state_json(state)
    (central,) = data["clusters"]
    groups = {g["group"]: g for g in central["groups"]}
    assert groups["mailer"]["status"] == "WARN" and groups["lake"]["status"] == "OK"
    assert len(groups["mailer"]["partitions"]) == PROBLEM_PARTITIONS and groups["lake"]["partitions"] == []
    assert groups["mailer"]["history"][-1][1] == 30 * 3600
    assert central["status_counts"]["WARN"] == 1 and central["calls"]["offset_fetch"] == 2
    assert [a["rule"] for a in data["alerts"]] == ["broker_down", "lag_warn", "under_replicated"]
    one = state_json(state, group="mailer")
    assert len(one["clusters"][0]["groups"][0]["partitions"]) == PROBLEM_PARTITIONS
    everything = state_json(state, group="mailer", all_partitions=True)
    assert len(everything["clusters"][0]["groups"][0]["partitions"]) == 30
    assert [a["subject"] for a in everything["alerts"]] == ["mailer"]
    json.dumps(data, allow_nan=False)  # strict JSON: the browser's parser takes no NaN


def test_http_api_page_metrics_and_health(watcher: Watcher):
    client = TestClient(create_app(watcher))  # no lifespan: no watcher thread, no brokers
    assert client.get("/healthz").status_code == 503
    assert client.get("/api/state").status_code == 503
    assert "const INITIAL = null;" in client.get("/").text

    at = now_ms()
    watcher.state = OpsState("demo", at, 5.0, (cluster_report(at),), ())
    assert client.get("/healthz").json()["status"] == "ok"
    state = client.get("/api/state", params={"group": "mailer", "partitions": "all"}).json()
    assert len(state["clusters"][0]["groups"][0]["partitions"]) == 30
    assert client.get("/api/state", params={"partitions": "some"}).status_code == 422

    page = client.get("/").text
    inline = re.search(r"const INITIAL = (.*?);\n", page).group(1)
    assert json.loads(inline)["clusters"][0]["name"] == "central"

    metrics = {s.name: s for f in text_string_to_metric_families(client.get("/metrics").text) for s in f.samples
               if s.labels.get("group") in (None, "mailer")}
    assert metrics["conveyor_ops_group_status"].value == 1  # WARN
    assert metrics["conveyor_ops_group_lag_records"].value == 30 * 3600
    assert metrics["conveyor_ops_broker_up"].labels["node"] in ("central-broker-1", "central-broker-2")
    samples = [s for f in text_string_to_metric_families(client.get("/metrics").text) for s in f.samples]
    alerts = {(s.labels["rule"], s.labels["severity"]) for s in samples if s.name == "conveyor_ops_alert"}
    assert alerts == {("broker_down", "critical"), ("lag_warn", "warning"), ("under_replicated", "warning")}

    watcher.state = OpsState("demo", at - 3_600_000, 5.0, (), ())
    assert client.get("/healthz").status_code == 503  # an hour-old round: the watcher is stuck
