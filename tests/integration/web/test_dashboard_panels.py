"""Every panel the demo fills has data read from Prometheus after a short demo-like run, in headless
Chromium (issue 21 item 7, issue 51 item 1): traffic through a gateway at 2,000/s (which `generate`
must reach), a replicator route worker, a dispatcher with a subscriber, a lake run and a short
real-time run, each listed under ops.components the way platform.yaml lists the demo's (the batch
runs through their metrics files, which the watcher serves, the hosts through the local runtime's
node_exporter), and a real Prometheus started as `conveyor up` starts it, scraping them all, which
the dashboard's panels ask. A screenshot is kept in test-artifacts/dashboard-panels.png.

The throttle is not among the parts this platform runs (ops.running), nor the demo's: the dashboard
has no throttle panel waiting for figures that never come, and every panel it shows has data.
"""

from __future__ import annotations

import copy
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from conveyor.cli import app as cli
from conveyor.config import load_platform
from conveyor_sdk.subscriber import Subscriber
from conveyor_sdk.publisher import Publisher
from conveyor.gateway.generate import AdTraffic, run as generate, shortfall
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.metrics import LakeMetrics
from conveyor.pipeline.realtime.job import run as realtime
from conveyor.pipeline.realtime.metrics import RealtimeMetrics
from conveyor.pipeline.realtime.plan import job_views
from conveyor.runtime import monitoring, processes
from conveyor.runtime.services import service_daemons
from tests.conftest import demo_event, eventually, free_port
from tests.dispatchkit import MAILER_TOKEN, nodes, produce as produce_notifications, setup, start_node  # noqa: F401
from tests.integration.web.test_dashboard import ARTIFACTS, chromium
from tests.opskit import NODE_EXPORTER, PROMETHEUS
from tests.lakekit import lake_case, lake_folder, lake_spark, produce  # noqa: F401
from tests.realtimekit import event_at, realtime_case  # noqa: F401

pytestmark = pytest.mark.integration
PANELS = ("gateway", "replication", "lake", "dispatch", "realtime", "hosts")


def test_every_panel_of_the_demo_has_data(provisioned, platform_data, platform_file, serve_gateway, setup, nodes,
                                          lake_case, realtime_case, lake_spark, tmp_path):
    started = time.monotonic()
    gateway = serve_gateway(provisioned, "dc1")
    with Publisher(gateway, "demo-adserver-token", batch_size=200) as publisher:
        # The first request pays for the gateway's producer id and metadata: not the rate's business.
        publisher.publish("ad-events", [demo_event()])
        # 32 in flight: this gateway shares the test's process (and its GIL) with the generator.
        sent = generate([publisher], "ad-events", rate=2000, duration=4, batch=200, traffic=AdTraffic(), in_flight=32)
    assert sent.rate >= 0.95 * 2000, shortfall(sent)

    replicate_port = free_port()
    replicator = subprocess.Popen([sys.executable, "-m", "conveyor", "replicate", "worker", "--route", "dc1-central",
                                   "--platform", str(platform_file), "--metrics-port", str(replicate_port)],
                                  stdout=subprocess.DEVNULL, stderr=open(tmp_path / "replicate.log", "wb"))
    dispatch_platform, topic = setup()
    node = start_node(dispatch_platform)
    nodes.append(node)
    produce_notifications(dispatch_platform, topic, 60)
    handled: list[int] = []
    subscriber = Subscriber(topic, "mailer", lambda m: handled.append(m.offset), nodes=[node.advertise],
                            token=MAILER_TOKEN)
    files = tmp_path / "metrics"
    try:
        with subscriber:
            lake = lake_case(partitions=1)
            produce(lake.platform, lake.topic, [demo_event() for _ in range(20)])
            metrics = LakeMetrics(timedelta(seconds=lake.platform.pipeline.lake.allowed_lateness))
            metrics.observe(run_once(lake_spark, lake.platform))
            metrics.write(files / "lake.prom")

            views = realtime_case(partitions=1)
            now = time.time()
            produce(views.platform, views.topic, [event_at(now - i, "impression", f"user-{i}", "banner-1", 100)
                                                  for i in range(20)])
            realtime(lake_spark, views.platform, job_views(views.platform), RealtimeMetrics(files / "realtime.prom"),
                     threading.Event(), available_now=True)

            data = copy.deepcopy(platform_data)
            host = data["runtime"]["base_port"] + NODE_EXPORTER
            data["runtime"]["node_exporter"] = {"port": host}
            # Every 2 s: the rates over 1m have points soon; the brokers are not scraped (this
            # platform is not the resolved one: no metrics pages), so it costs little.
            data["runtime"]["prometheus"] = {"port": data["runtime"]["base_port"] + PROMETHEUS, "interval": "2s"}
            port = free_port()  # Prometheus scrapes the files' pages where the watcher serves them
            data["ops"] = {"port": port, "interval": "1s", "window": 4,
                           "running": ["gateway", "replicator", "dispatcher", "lake", "views", "watcher"], "components": {
                "gateway-dc1": f"{gateway}/metrics",
                "replicate-dc1-central": f"http://127.0.0.1:{replicate_port}/metrics",
                "dispatch": f"http://127.0.0.1:{node.metrics_port}/metrics",
                "lake": f"file:{files / 'lake.prom'}", "realtime": f"file:{files / 'realtime.prom'}"}}
            path = platform_file.parent / "ops-panels-platform.yaml"
            path.write_text(yaml.safe_dump(data, sort_keys=False))
            ops = load_platform(path)
            shown = CliRunner().invoke(cli, ["ops", "dashboard", "--platform", str(path), "--port", str(port)])
            assert shown.exit_code == 0, shown.output
            url = f"http://127.0.0.1:{port}"
            try:
                assert monitoring.start(ops) == ["node-exporter", "prometheus"]
                monitoring.wait_ready(ops, time.monotonic() + 60)
                state = eventually(lambda: _all_panels_filled(url, gateway), 90, "every panel filled")
                panels = {p["name"]: p for p in state["panels"]}
                assert sorted(panels) == sorted(PANELS)  # no throttle panel: the platform runs no throttle
                strip = next(s for s in panels["lake"]["series"] if s["strip"])
                assert len(strip["strip"]) == 24 and strip["strip"][-1][1] == 0  # the current hour is not complete
                assert strip["name"] == lake.topic
                assert "Records waiting per route: dc1-central" in {s["name"] for s in panels["replication"]["series"]}
                assert all(not p["errors"] for p in state["panels"]), [p["errors"] for p in state["panels"]]
                dom = chromium("--dump-dom", f"{url}/", profile=tmp_path / "profile").stdout
                for text in ("Replication lag and latency per route", "Lake completeness per hour",
                             "Dispatcher backlog", "Real-time view latency", 'class="strip"', "<title>",
                             "Rows landed: ", "p99 (5m; else the last run's)", "Rewinds: committed offsets"):
                    assert text in dom, f"{text!r} is not on the page"
                ARTIFACTS.mkdir(exist_ok=True)
                shot = ARTIFACTS / "dashboard-panels.png"
                shot.unlink(missing_ok=True)
                chromium(f"--screenshot={shot}", "--window-size=1400,2400", f"{url}/", profile=tmp_path / "profile")
                assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            finally:
                monitoring.stop(ops)
                assert processes.stop([d for d in service_daemons(ops) if d.name == "ops"]) == ["ops"]
    finally:
        replicator.send_signal(signal.SIGTERM)
        replicator.wait(60)
    print(f"dashboard panels test: {time.monotonic() - started:.0f} s; generate reached {sent.rate:,.0f}/s")


def _all_panels_filled(url: str, gateway: str) -> dict | None:
    # The gateway panel's rates need traffic between two of Prometheus's scrapes.
    httpx.post(f"{gateway}/v1/topics/ad-events/events", json=[demo_event() for _ in range(5)],
               headers={"Authorization": "Bearer demo-adserver-token"}, timeout=30).raise_for_status()
    response = httpx.get(f"{url}/api/state", timeout=10)
    if response.status_code != 200:
        return None
    state = response.json()
    panels = {p["name"]: p for p in state["panels"]}
    filled = {name for name in PANELS if any(s["value"] is not None for s in panels[name]["series"])}
    return state if filled == set(PANELS) else None
