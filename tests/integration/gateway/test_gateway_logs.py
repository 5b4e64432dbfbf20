"""A data centre whose cluster serves logs (``purpose: logs``) never holds its producers up: its
gateway writes with acks=1 and waits at most ``gateway.logs_wait`` for them. With the cluster's
only broker frozen (SIGSTOP) a request is answered with every event shed, counted as shed and not
as accepted; thawed, the same events are accepted."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import orjson
import pytest

from conveyor.runtime import processes
from tests.conftest import demo_event, eventually, logs_dc2_variant

pytestmark = pytest.mark.integration
ADSERVER = {"Authorization": "Bearer demo-adserver-token", "Content-Type": "application/json"}


@pytest.fixture
def logs_platform(provisioned, platform_data, platform_file: Path, tmp_path: Path):
    return logs_dc2_variant(platform_data, platform_file, tmp_path / "logs.yaml",
                            gateway={"logs_wait": "1s"})


def _metric(url: str, prefix: str) -> float:
    page = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith(prefix))


def _shed(url: str) -> float:
    return _metric(url, "conveyor_gateway_events_shed_total{")


def test_a_frozen_logs_cluster_sheds_within_the_bound_and_a_thawed_one_accepts(local, logs_platform,
                                                                              serve_gateway):
    url = serve_gateway(logs_platform, "dc2")
    events = [demo_event() for _ in range(20)]
    first = httpx.post(f"{url}/v1/topics/ad-events/events", content=orjson.dumps(events[:5]), headers=ADSERVER,
                       timeout=60)
    assert first.status_code == 200 and first.json()["accepted"] == 5, first.text

    pid = processes.running_pid(local.node_daemon(local.layout("dc2").broker(1)))
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.perf_counter()
        frozen = httpx.post(f"{url}/v1/topics/ad-events/events", content=orjson.dumps(events[5:15]),
                            headers=ADSERVER, timeout=60)
        waited = time.perf_counter() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    # The fault happened: nothing of the request reached the frozen broker, all of it was shed.
    assert frozen.status_code == 200, frozen.text
    assert (frozen.json()["accepted"], frozen.json()["shed"]) == (0, 10), frozen.text
    assert _shed(url) == 10
    print(f"answered after {waited:.2f} s with 10 events shed (gateway.logs_wait 1 s)")

    thawed = eventually(lambda: (r := httpx.post(f"{url}/v1/topics/ad-events/events",
                                                  content=orjson.dumps(events[15:]), headers=ADSERVER,
                                                  timeout=60)).json().get("accepted") == 5 and r, 60,
                        "the thawed cluster to take events again", interval=1)
    assert "shed" not in thawed.json()
    # Only what was acknowledged is counted accepted: the 5 before and the 5 after.
    assert _metric(url, "conveyor_gateway_events_accepted_total{") == 10
