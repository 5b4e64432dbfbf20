"""The watch service's outputs from a known state: JSON API, dashboard page, metrics, health check.

The state is built by the same pure parts the watcher uses (tracker, health assessment), with
alerts as Alertmanager answers them; the HTTP app runs without its lifespan, so no round touches a
broker here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from conveyor.config import load_platform
from conveyor.ops.alertmanager import parse_alerts
from conveyor.ops.health import BrokerHealth, BrokerReading, MetadataCounts, assess_cluster
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
    return ClusterReport("central", at, groups, health, 0.2,
                         {"metadata": 1, "list_groups": 1, "offset_fetch": 2, "list_offsets": 2}, 30,
                         metadata=MetadataCounts())


def _alert(name: str, severity: str, **labels: str) -> dict:
    return {"labels": {"alertname": name, "severity": severity, **labels},
            "annotations": {"summary": f"{name} fired", "look_at": "somewhere"},
            "startsAt": "2026-11-29T10:00:00Z", "status": {"state": "active", "silencedBy": []}}


#: What Alertmanager answers while the state above holds.
ALERTS = tuple(parse_alerts([
    _alert("ConsumerGroupLagging", "warning", cluster="central", group="mailer"),
    _alert("KafkaBrokerDown", "critical", cluster="central", node="central-broker-2", instance="127.0.0.1:9000"),
    _alert("KafkaUnderReplicatedPartitions", "warning", cluster="central"),
]))


@pytest.fixture
def watcher() -> Watcher:
    w = Watcher(load_platform(ROOT / "platform.yaml"))
    yield w
    w.close()


def test_state_json_lists_problem_partitions_or_all_of_one_group():
    at = now_ms()
    state = OpsState("demo", at, 5.0, (cluster_report(at),), (), ALERTS)
    data = state_json(state)
    (central,) = data["clusters"]
    groups = {g["group"]: g for g in central["groups"]}
    assert groups["mailer"]["status"] == "WARN" and groups["lake"]["status"] == "OK"
    assert len(groups["mailer"]["partitions"]) == PROBLEM_PARTITIONS and groups["lake"]["partitions"] == []
    assert groups["mailer"]["history"][-1][1] == 30 * 3600
    assert central["status_counts"]["WARN"] == 1 and central["calls"]["offset_fetch"] == 2
    assert [(a["severity"], a["rule"], a["subject"]) for a in data["alerts"]] == [
        ("CRITICAL", "KafkaBrokerDown", "central-broker-2"), ("WARNING", "ConsumerGroupLagging", "mailer"),
        ("WARNING", "KafkaUnderReplicatedPartitions", "central")]
    assert central["health"]["status"] == "CRITICAL"  # a broker does not answer
    one = state_json(state, group="mailer")
    assert len(one["clusters"][0]["groups"][0]["partitions"]) == PROBLEM_PARTITIONS
    everything = state_json(state, group="mailer", all_partitions=True)
    assert len(everything["clusters"][0]["groups"][0]["partitions"]) == 30
    assert [a["subject"] for a in everything["alerts"]] == ["mailer"]
    assert state_json(state, cluster="edge")["alerts"] == []
    json.dumps(data, allow_nan=False)  # strict JSON: the browser's parser takes no NaN


OPS = {"Authorization": "Bearer demo-ops-token"}  # the demo platform's ops.token


def test_http_api_page_metrics_and_health(watcher: Watcher):
    # No lifespan: no watcher thread, no brokers.
    client = TestClient(create_app(watcher), base_url="http://127.0.0.1:18070", headers=OPS)
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
    assert metrics["conveyor_ops_group_lost_commit_partitions"].value == 0
    assert metrics["conveyor_ops_cluster_sampled"].value == 1
    # Counted from cluster metadata: no broker's figures go through the watcher.
    assert metrics["conveyor_ops_cluster_under_replicated_partitions"].value == 0
    assert not any(name.startswith("conveyor_ops_broker_") for name in metrics)

    watcher.state = OpsState("demo", at - 3_600_000, 5.0, (), ())
    assert client.get("/healthz").status_code == 503  # an hour-old round: the watcher is stuck


def test_the_page_and_the_api_take_the_ops_token_from_their_own_hosts_only(watcher: Watcher):
    import base64

    watcher.state = OpsState("demo", now_ms(), 5.0, (cluster_report(now_ms()),), ())
    client = TestClient(create_app(watcher, "10.1.2.3"), base_url="http://127.0.0.1:18070")
    for path in ("/", "/api/state"):
        refused = client.get(path)
        assert refused.status_code == 401 and refused.json()["error"] == "unauthenticated"
        assert refused.headers["www-authenticate"].startswith("Basic ")  # a browser prompts for it
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get(path, headers=OPS).status_code == 200
        basic = base64.b64encode(b"anyone:demo-ops-token").decode()
        assert client.get(path, headers={"Authorization": f"Basic {basic}"}).status_code == 200
    assert client.get("/metrics").status_code == 200 and client.get("/healthz").status_code == 200
    for host in ("localhost:18070", "[::1]:18070", "10.1.2.3:18070"):
        assert client.get("/api/state", headers={**OPS, "Host": host}).status_code == 200
    for host in ("attacker.example:18070", "127.0.0.1.attacker.example", ""):
        rebound = client.get("/api/state", headers={**OPS, "Host": host})
        assert rebound.status_code == 400 and rebound.json()["error"] == "unknown_host", host
        assert client.get("/metrics", headers={"Host": host}).status_code == 400


def test_names_that_look_like_markup_leave_the_page_whole(watcher: Watcher):
    import dataclasses

    at = now_ms()
    hostile = ("<!--<script>", "</script><b>x", "a&b\"'>")
    report = cluster_report(at)
    groups = [dataclasses.replace(g, group=name) for g, name in zip(report.groups, hostile)]
    watcher.state = OpsState("demo", at, 5.0, (dataclasses.replace(report, groups=groups),), ())
    page = TestClient(create_app(watcher), base_url="http://127.0.0.1", headers=OPS).get("/").text

    inline = re.search(r"const INITIAL = (.*?);\n", page).group(1)
    assert "<" not in inline and ">" not in inline
    names = {g["group"] for c in json.loads(inline)["clusters"] for g in c["groups"]}
    assert set(hostile[:len(report.groups)]) <= names
    # One script element, whole: "<!--<script>" inline would make a browser read past its end.
    assert page.count("<script") == 1 and page.count("</script>") == 1 and "render(INITIAL)" in page
