"""The watcher of one cluster in tests, driven round by round (``ClusterWatch.cycle``), so what each
window holds is decided by the test, not by timing."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from conveyor.config import Platform, parse_platform
from conveyor.config.resolved import resolved
from conveyor.ops.watch import ClusterWatch
from conveyor.runtime import monitoring

#: Prometheus, Alertmanager, the watch service and node_exporter of a monitored test on
#: base_port + these (above the session's ports, beside the system test's).
PROMETHEUS, ALERTMANAGER, WATCHER, NODE_EXPORTER = 640, 641, 642, 643


def ops_platform_with(platform_data: dict[str, Any], platform_file: Path, **ops: Any) -> Platform:
    """The test platform with these ``ops:`` settings."""
    data = copy.deepcopy(platform_data)
    data["ops"] = ops
    return resolved(parse_platform(data, root=platform_file.parent))


@contextmanager
def cluster_watch(platform: Platform, cluster: str = "central") -> Iterator[ClusterWatch]:
    """The watcher's rounds of one cluster, its consumer groups; no Prometheus, so the brokers'
    health comes from cluster metadata alone."""
    watch = ClusterWatch(platform, cluster, None)
    try:
        yield watch
    finally:
        watch.close()


class WebhookReceiver:
    """A webhook receiver (a real HTTP server on 127.0.0.1) that keeps the bodies posted to it and
    answers 500 to its first ``failures`` posts."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.bodies: list[dict] = []
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.attempts += 1
                if receiver.attempts <= receiver.failures:
                    self.send_response(500)
                else:
                    receiver.bodies.append(body)
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()


@contextmanager
def monitored(platform_data: dict[str, Any], platform_file: Path, folder: Path, alertmanager: bool = True,
              node_exporter: bool = False, watcher: bool = True, **ops: Any) -> Iterator[tuple[Path, Platform]]:
    """A real Prometheus (and Alertmanager, and node_exporter), as `conveyor up` starts them, and the
    watch service (`conveyor ops watch`) of a variant of the session's platform with these ``ops:``
    settings, the watcher every second and Prometheus every 3 s (the demo: 15 s and 5 s): the variant's
    file and platform. ``watcher=False``: the monitors alone, for the readers that ask Prometheus."""
    from tests.conftest import platform_variant
    from tests.processkit import stop_process
    from tests.systemkit import Proc, conveyor, http_ready

    base = platform_data["runtime"]["base_port"]
    data = copy.deepcopy(platform_data)
    for spec in data["topics"].values():  # the file is written elsewhere: keep contracts found
        if spec.get("contract"):
            spec["contract"] = str(platform_file.parent / spec["contract"])
    # Prometheus's scrape timeout is its interval: on a loaded machine (the suite's two workers run
    # brokers, Spark and servers on two cores) the watcher's and the exporters' pages took up to a
    # second, and a scrape that times out leaves every series of its page stale until the next.
    data["runtime"]["prometheus"] = {"port": base + PROMETHEUS, "interval": "3s"}
    if alertmanager:
        data["runtime"]["alertmanager"] = {"port": base + ALERTMANAGER, "group_wait": "1s", "group_interval": "2s"}
        ops.setdefault("alertmanager_url", f"http://127.0.0.1:{base + ALERTMANAGER}")
    if node_exporter:
        data["runtime"]["node_exporter"] = {"port": base + NODE_EXPORTER}
    data["ops"] |= {"port": base + WATCHER, "interval": "1s", "components": {}, **ops}
    path = folder / "platform.yaml"
    variant = platform_variant(data, path)
    service = Proc("watcher", conveyor("ops", "watch", "--platform", str(path)), folder / "watcher.log",
                   http_ready(f"http://127.0.0.1:{base + WATCHER}/healthz"))
    try:
        wanted = {"alertmanager": alertmanager, "node-exporter": node_exporter, "prometheus": True}
        assert sorted(monitoring.start(variant)) == [name for name, on in wanted.items() if on]
        monitoring.wait_ready(variant, time.monotonic() + 60)
        if watcher:
            service.start()
        yield path, variant
    finally:
        # Prometheus (and node_exporter) are stopped whatever the watcher does: left running,
        # Prometheus scrapes every broker's JMX exporter each second for the rest of the suite,
        # which alone can saturate two cores.
        try:
            if service.process is not None:
                stop_process(service.process)
        finally:
            monitoring.stop(variant)


def wait_scraped(platform: Platform, cluster: str = "central", timeout: float = 60) -> None:
    """Until the Prometheus ``platform`` names holds a scrape of every broker of ``cluster`` that
    answered, a produce p99 among its figures (what the throttle controller judges)."""
    from conveyor.ops.broker_readings import metrics_targets, read_brokers
    from conveyor.ops.prometheus import QueryError, connect
    from tests.conftest import eventually

    prometheus = connect(platform)
    assert prometheus is not None, "the platform names no Prometheus"
    targets = [t for t in metrics_targets(platform, cluster) if t.broker is not False]
    try:
        eventually(lambda: all(r.error is None and "Produce" in r.p99_ms
                               for r in read_brokers(prometheus, cluster, targets, 0)),
                   timeout, f"Prometheus to hold a scrape of every broker of {cluster}", errors=(QueryError,),
                   interval=0.5)
    finally:
        prometheus.close()
