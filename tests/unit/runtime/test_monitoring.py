"""The demo's Prometheus and Alertmanager configuration, as `conveyor up` writes it: Prometheus's
own checker (which loads the rules file too) and Alertmanager's accept it; it scrapes the watcher,
every component (a batch job's file through the watcher), every node and this machine's
node_exporter, trusting the platform's authority for HTTPS; alerts route to ops.notify_url, kept in
an owner-only file. No process starts."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from conveyor.config import parse_platform
from conveyor.runtime.local import LocalPlatform
from conveyor.ops.rules import duration
from conveyor.runtime.monitoring import monitors, write_configs

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(shutil.which("promtool") is None or shutil.which("amtool") is None,
                                reason="promtool and amtool come with `make setup`")


@pytest.fixture
def written(tmp_path: Path):
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    data["runtime"]["home"] = str(tmp_path / "home")
    data["ops"]["notify_url"] = "https://hooks.example.com/services/T0/B0/secret-part"
    # This machine's node_exporter listed as a component too, as a broker host elsewhere would be.
    data["ops"]["components"]["host"] = f"http://127.0.0.1:{data['runtime']['node_exporter']['port']}/metrics"
    local = LocalPlatform(parse_platform(data, root=ROOT))
    local.security.ensure()
    found = monitors(local.clients)
    write_configs(local.clients, found)
    return local.clients, {m.name: m for m in found}


def test_prometheus_and_alertmanager_accept_what_up_writes(written):
    _, found = written
    for argv in (["promtool", "check", "config", str(found["prometheus"].config_file)],
                 ["amtool", "check-config", str(found["alertmanager"].config_file)]):
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_component_and_node_is_scraped(written):
    platform, found = written
    config = yaml.safe_load(found["prometheus"].config_file.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    watcher = jobs["conveyor-ops"]
    assert (watcher["scheme"], watcher["static_configs"][0]["targets"]) == ("https", [f"127.0.0.1:{platform.ops.port}"])
    assert Path(watcher["tls_config"]["ca_file"]).read_bytes() == Path(platform.tls.ca).read_bytes()
    gateway = jobs["component-gateway-dc1"]
    assert (gateway["scheme"], gateway["metrics_path"], gateway["static_configs"][0]["labels"]) == (
        "https", "/metrics", {"instance": "gateway-dc1"})
    lake = jobs["component-lake"]  # a file: page, served by the watcher
    assert (lake["static_configs"][0]["targets"], lake["metrics_path"]) == (
        [f"127.0.0.1:{platform.ops.port}"], "/components/lake/metrics")
    nodes = {job["static_configs"][0]["labels"]["node"] for name, job in jobs.items() if name.startswith("kafka-")}
    assert nodes == {page.node for cluster in platform.clusters.values() for page in cluster.metrics}
    assert len(nodes) > 3
    # This machine's node_exporter, once, though ops.components lists its page too.
    host = jobs["node-exporter"]
    assert (host["static_configs"][0]["targets"], host["static_configs"][0]["labels"]) == (
        [f"127.0.0.1:{platform.runtime.node_exporter.port}"], {"instance": "localhost"})
    assert "component-host" not in jobs
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        f"127.0.0.1:{platform.runtime.alertmanager.port}"]
    rules = yaml.safe_load(Path(config["rule_files"][0]).read_text())
    assert any(rule["alert"] == "KafkaBrokerDown" for group in rules["groups"] for rule in group["rules"])


def test_alerts_route_to_the_notify_url_in_a_file_only_its_owner_reads(written):
    platform, found = written
    path = found["alertmanager"].config_file
    config = yaml.safe_load(path.read_text())
    assert config["route"]["receiver"] == "conveyor"
    assert config["receivers"] == [{"name": "conveyor", "webhook_configs": [
        {"url": platform.ops.notify_url.get_secret_value(), "send_resolved": True}]}]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_local_alertmanager_is_where_the_watcher_posts(written):
    platform, _ = written
    assert platform.ops.alertmanager_url == f"http://127.0.0.1:{platform.runtime.alertmanager.port}"


@pytest.mark.parametrize(("seconds", "text"), [(15.0, "15s"), (1.5, "1500ms"), (0.0, "0s"), (14400.0, "14400s")])
def test_durations_are_written_as_prometheus_reads_them(seconds, text):
    assert duration(seconds) == text
