"""The broker hosts watched: the local runtime's node_exporter (Debian's, started as `conveyor up`
starts it) reports this machine, and a real Prometheus scrapes it and evaluates `conveyor ops rules`:

- it serves the names and labels the rules and dashboards read (tests/metricskit.py's table);
- a small tmpfs holding a log folder, filled to 97 %, raises HostFilesystemFull and
  HostFilesystemFilling for that mount point, and emptied, they clear;
- the loopback, declared a 200 Mbit/s link (it reports no speed, so the rules take the declared
  one), carrying more than 80 % of that from a sender in the test, raises HostNetworkSaturated, and
  quiet again, it clears.

Mounting the tmpfs takes root (CAP_SYS_ADMIN), which the test machine has."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conveyor.runtime import monitoring, processes
from tests.conftest import eventually
from tests.metricskit import NODE_EXPORTER_LABELS
from tests.opskit import monitored

DISK_MIB = 16
LINK_MBIT = 200.0  # a declared speed a loaded machine's loopback still saturates (72 MB/s seen beside a Spark job)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "log-disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    assert mounted.returncode == 0, f"mounting a tmpfs needs root: {mounted.stderr.strip()}"
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def firing(prometheus: str, alert: str, **labels: str) -> dict[str, Any] | None:
    """The alert ``alert`` with these labels among Prometheus's firing alerts."""
    alerts = httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return next((a for a in alerts if a["labels"]["alertname"] == alert and a["state"] == "firing"
                 and all(a["labels"].get(k) == v for k, v in labels.items())), None)


class Sender:
    """Bytes as fast as they go from one socket to another over 127.0.0.1, in two threads."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.sent = 0
        listener = socket.create_server(("127.0.0.1", 0))
        self.out = socket.create_connection(listener.getsockname())
        self.into, _ = listener.accept()
        listener.close()
        self.threads = [threading.Thread(target=self._send, daemon=True), threading.Thread(target=self._drain, daemon=True)]
        self.started = time.monotonic()
        for thread in self.threads:
            thread.start()

    def _send(self) -> None:
        chunk = b"\0" * (1 << 20)
        while not self.stop.is_set():
            self.out.sendall(chunk)
            self.sent += len(chunk)

    def _drain(self) -> None:
        while not self.stop.is_set() and self.into.recv(1 << 20):
            pass

    def close(self) -> float:
        """Stop; the bytes per second sent."""
        seconds = time.monotonic() - self.started
        self.stop.set()
        self.out.close()
        for thread in self.threads:
            thread.join(10)
        self.into.close()
        return self.sent / seconds


def test_a_filling_disk_and_a_saturated_link_raise_their_alerts_and_clear(platform_data, platform_file, tmp_path,
                                                                          small_disk):
    machines = {"paths": [str(small_disk)], "link_speed_mbit": {"lo": LINK_MBIT}, "window": "10s", "hold": "2s"}
    with monitored(platform_data, platform_file, tmp_path, alertmanager=False, node_exporter=True,
                   machines=machines) as (_, variant):
        prometheus = f"http://127.0.0.1:{variant.runtime.prometheus.port}"
        mount = {"instance": monitoring.LOCAL_HOST, "mountpoint": str(small_disk)}
        exporter = httpx.get(f"http://127.0.0.1:{variant.runtime.node_exporter.port}/metrics", timeout=10)
        served: dict[str, set[str]] = {}
        for family in text_string_to_metric_families(exporter.text):
            for sample in family.samples:
                served.setdefault(sample.name, set()).update(sample.labels)
        # A machine whose links report no speed (this one's: the loopback, a virtual NIC) has no
        # node_network_speed_bytes at all: the declared speed stands in.
        assert set(NODE_EXPORTER_LABELS) - {"node_network_speed_bytes"} <= set(served)
        assert all(served[name] == labels for name, labels in NODE_EXPORTER_LABELS.items() if name in served)
        assert 'node_network_speed_bytes{device="lo"}' not in exporter.text

        def scraped() -> bool:
            query = f'node_filesystem_size_bytes{{mountpoint="{small_disk}"}}'
            result = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}, timeout=10).json()
            return bool(result["data"]["result"])

        eventually(scraped, 60, "Prometheus scraping node_exporter with the small disk")
        time.sleep(4)  # past the rules' hold: an empty disk raises nothing
        assert firing(prometheus, "HostFilesystemFilling", **mount) is None

        filler = small_disk / "segment.log"
        filler.write_bytes(b"\0" * int(DISK_MIB * 0.97 * 2**20))
        full = eventually(lambda: firing(prometheus, "HostFilesystemFull", **mount), 60,
                          "HostFilesystemFull for the filled disk", interval=0.5)
        assert full["labels"]["severity"] == "critical" and float(full["value"]) >= 0.95
        assert firing(prometheus, "HostFilesystemFilling", **mount)
        filler.unlink()
        eventually(lambda: firing(prometheus, "HostFilesystemFull", **mount) is None, 60, "the full disk's alert to clear", interval=0.5)

        link = {"instance": monitoring.LOCAL_HOST, "device": "lo"}
        sender = Sender()
        try:
            saturated = eventually(lambda: firing(prometheus, "HostNetworkSaturated", **link), 60,
                                   "HostNetworkSaturated on the loopback", interval=0.5)
        finally:
            rate = sender.close()
        # The fault happened: the sender alone moved more than the rule's share of the declared link.
        assert rate > 0.8 * LINK_MBIT * 125_000, f"the sender reached only {rate / 1e6:.0f} MB/s"
        assert float(saturated["value"]) > 0.8
        eventually(lambda: firing(prometheus, "HostNetworkSaturated", **link) is None, 90,
                   "the saturated link's alert to clear", interval=0.5)
    assert not [m.name for m in monitoring.monitors(variant) if processes.running_pid(m.daemon)], "left running"
