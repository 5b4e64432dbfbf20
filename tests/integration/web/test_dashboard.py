"""The watch service and its dashboard against the running platform, checked in headless Chromium
(Debian's chromium package; `make system-deps` installs it).

`conveyor dashboard` starts the watch service as a background service of the platform; the page
must show every cluster with its brokers and a consumer group with its lag. The session's platform
runs no Prometheus: each panel says so in a line and the rest of the page works
(tests/integration/web/test_dashboard_panels.py fills them from a real one). The screenshots land
in test-artifacts/ for a person to look at.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from confluent_kafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from conveyor import kafka
from conveyor.cli import app as cli
from conveyor.config import Platform, load_resolved_platform
from conveyor.ops.dashboard import NO_PROMETHEUS
from conveyor.runtime import processes
from conveyor.runtime.services import service_daemons
from tests.conftest import ROOT, eventually, free_port

pytestmark = pytest.mark.integration
ARTIFACTS = ROOT / "test-artifacts"
OPS_TOKEN = "demo-ops-token"  # the demo platform's ops.token
OPS = {"Authorization": f"Bearer {OPS_TOKEN}"}




@pytest.fixture
def ops_url(provisioned: Platform, platform_data, platform_file: Path) -> Iterator[tuple[str, Platform]]:
    """`conveyor dashboard` over the session's platform, which runs no Prometheus."""
    data = copy.deepcopy(platform_data)
    data["ops"] = {"interval": "1s", "window": 6, "token": platform_data["ops"]["token"]}
    path = platform_file.parent / "ops-platform.yaml"  # next to contracts/, which it names
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    platform = load_resolved_platform(path)  # the clients connect to what the session started
    port = free_port()
    started = CliRunner().invoke(cli, ["dashboard", "--platform", str(path), "--port", str(port)])
    try:
        assert started.exit_code == 0, started.output
        assert f"dashboard: http://127.0.0.1:{port}/" in started.output
        yield f"http://127.0.0.1:{port}", platform
    finally:
        assert processes.stop([d for d in service_daemons(platform) if d.name == "ops"]) == ["ops"]


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    assert binary, "Debian's chromium is needed for the dashboard test: run `make system-deps`"
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               # --timeout: stop loading after 30 s and dump or draw what is there; a page whose
               # loading never ended (its refresh's request held on a loaded machine) hung the
               # screenshot for 120 s, twice, in a full run.
               "--virtual-time-budget=3000", "--timeout=30000", *args]
    try:
        return subprocess.run([*command, f"--user-data-dir={profile}"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        # Headless Chromium now and then hangs on a loaded machine (a screenshot once did for
        # 120 s in a full run); once more, in a profile of its own: the killed one may hold its lock.
        return subprocess.run([*command, f"--user-data-dir={profile}-again"], capture_output=True, text=True,
                              timeout=120)


def test_dashboard_shows_clusters_groups_and_panels(ops_url, topic_factory, tmp_path):
    url, platform = ops_url
    topic = topic_factory("central", partitions=1)
    group = f"dash-{uuid.uuid4().hex[:6]}"
    hostile = f"<!--<script>{uuid.uuid4().hex[:4]}"  # a group name that must not break the page
    producer = kafka.producer(platform, "central", "dash-test")
    for _ in range(50):
        producer.produce(topic, b"x" * 100)
    assert producer.flush(30) == 0
    kafka.commit_as(platform, "central", group, [TopicPartition(topic, 0, 20)])
    kafka.commit_as(platform, "central", hostile, [TopicPartition(topic, 0, 10)])

    def sampled() -> dict | None:
        """The groups shown, once the group is sampled; every panel says there is no Prometheus to ask."""
        response = httpx.get(f"{url}/api/state", timeout=10, headers=OPS)
        state = response.json() if response.status_code == 200 else None
        groups = {g["group"]: g for c in (state or {}).get("clusters", []) for g in c["groups"]}
        if state is not None:
            assert state["panels"] and all(p["errors"] == [NO_PROMETHEUS] and not p["series"] for p in state["panels"])
        return groups if group in groups and hostile in groups else None

    groups = eventually(sampled, 90, f"the state to show {group}", interval=1)
    assert groups[group]["total_lag"] == 30
    assert httpx.get(f"{url}/healthz", timeout=10).json()["status"] == "ok"
    assert httpx.get(f"{url}/api/state", timeout=10).status_code == 401
    assert httpx.get(f"{url}/", timeout=10).status_code == 401

    # The browser sends the token as Basic's password, as it would after its prompt.
    page = url.replace("://", f"://ops:{OPS_TOKEN}@") + "/"
    dom = chromium("--dump-dom", page, profile=tmp_path / "profile").stdout
    # The hostile name is shown as text, and the rest of the page still drew after it.
    assert "&lt;!--&lt;script&gt;" in dom and dom.count("<script") == 1, dom[-2000:]
    # No Prometheus here: the cards say why they show no broker's figures, and the panels why they are empty.
    for text in ("Conveyor operations", ">dc1 <", ">dc2 <", ">central <", "no broker figures: no Prometheus", group,
                 "Gateway: events accepted and request time", "no Prometheus: set ops.prometheus_url"):
        assert text in dom, f"{text!r} is not on the page"
    assert '<span class="pill OK">' in dom  # drawn by the page's script, not just served

    ARTIFACTS.mkdir(exist_ok=True)
    for name, size in (("dashboard.png", "1400,900"), ("dashboard-full.png", "1400,1800")):
        shot = ARTIFACTS / name
        shot.unlink(missing_ok=True)
        chromium(f"--screenshot={shot}", f"--window-size={size}", page, profile=tmp_path / "profile")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

    metrics = {(s.name, s.labels.get("group")): s.value for f in
               text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text) for s in f.samples}
    assert metrics[("conveyor_ops_group_lag_records", group)] == 30

    runner = CliRunner()
    refused = runner.invoke(cli, ["lag", "--url", url, "--group", group])
    assert refused.exit_code == 1 and "CONVEYOR_OPS_TOKEN" in str(refused.exception), refused.exception
    lag = runner.invoke(cli, ["lag", "--url", url, "--group", group, "--token", OPS_TOKEN])
    assert group in lag.output and topic in lag.output, lag.output
    health = runner.invoke(cli, ["health", "--url", url, "--cluster", "central"], env={"CONVEYOR_OPS_TOKEN": OPS_TOKEN})
    # This watcher has no Prometheus to read the brokers' figures from, and says so.
    assert "no broker figures: no Prometheus" in health.output, health.output
