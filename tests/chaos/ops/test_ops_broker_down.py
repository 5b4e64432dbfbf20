"""Broker health against a real failure: a central broker that hangs (SIGSTOP: alive, its
connections open, answering nothing, as in a long GC pause or a stuck disk) is fenced by the
controller and shows under-replicated partitions (and the broker down) within 30 s; answering again
(SIGCONT), it rejoins every ISR and the alerts clear. A hang rather than a kill: a restarted broker
recovers its logs first, which on a loaded machine took minutes the alerts do not need, and the
kills are the other chaos tests'.

Around it run a real Prometheus and Alertmanager (Debian's), as `conveyor up` starts them, and the
watch service, whose figures Prometheus's rules read: KafkaBrokerDown reaches Alertmanager once it
has held (ops.broker_down_hold), with KafkaLeaderChanges for the leaders that moved away (the
controller takes the fenced broker out of every ISR itself, so the leaders' ISR shrink count does
not move); KafkaUnderReplicatedPartitions is pending (it holds 5 minutes before it fires). Alertmanager routes them to ops.notify_url, and
`conveyor ops silence` silences one and no other. Answering again, the broker's alerts resolve."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor.config import Platform
from conveyor.ops.alertmanager import AlertmanagerClient, ManagedAlert
from conveyor.ops.scrape import Scraper
from conveyor.ops.watch import ClusterReport, ClusterWatch
from conveyor.runtime import processes
from conveyor.runtime.local import LocalPlatform
from tests.conftest import eventually
from tests.opskit import PROMETHEUS, WebhookReceiver, monitored
from tests.systemkit import conveyor

pytestmark = pytest.mark.chaos
HUNG = 2


@pytest.fixture
def stack(platform_data: dict[str, Any], platform_file: Path,
          tmp_path: Path) -> Iterator[tuple[Path, AlertmanagerClient, WebhookReceiver, str]]:
    """Prometheus, Alertmanager and the watch service; Alertmanager's route ends at a webhook
    receiver, and KafkaBrokerDown pages after 5 s of silence here (the platform's default: a minute)."""
    hook = WebhookReceiver()
    try:
        with monitored(platform_data, platform_file, tmp_path, notify_url=hook.url, broker_down_hold="5s") as (path, variant):
            client = AlertmanagerClient(variant.ops.alertmanager_url)
            try:
                yield path, client, hook, f"http://127.0.0.1:{platform_data['runtime']['base_port'] + PROMETHEUS}"
            finally:
                client.close()
    finally:
        hook.close()


def in_alertmanager(client: AlertmanagerClient, name: str, state: str = "active", **labels: str) -> ManagedAlert | None:
    """The alert ``name`` with these labels in Alertmanager, when it is in ``state``."""
    return next((a for a in client.alerts() if a.name == name and a.state == state
                 and all(a.labels.get(k) == v for k, v in labels.items())), None)


def in_prometheus(prometheus: str, name: str, **labels: str) -> str | None:
    """The state (pending or firing) of Prometheus's alert ``name`` with these labels."""
    found = httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return next((a["state"] for a in found if a["labels"]["alertname"] == name
                 and all(a["labels"].get(k) == v for k, v in labels.items())), None)


def rounds_until(watch: ClusterWatch, done, timeout: float) -> tuple[ClusterReport, float]:
    """Watcher rounds, about a second apart, until ``done(report)``; the report and seconds taken."""
    started = time.monotonic()
    while True:
        report = watch.cycle()
        elapsed = time.monotonic() - started
        if done(report) or elapsed > timeout:
            return report, elapsed
        time.sleep(1.0)


def test_a_hung_central_broker_shows_under_replicated_partitions_and_clears_when_it_answers_again(
        local: LocalPlatform, platform: Platform, topic_factory, stack):
    path, alertmanager, hook, prometheus = stack
    node = f"central-broker-{HUNG}"
    topic_factory("central", partitions=6)  # RF 3 on 3 brokers: every partition has a replica on each
    scraper = Scraper()
    watch = ClusterWatch(platform, "central", scraper)
    try:
        before, _ = rounds_until(watch, lambda r: r.health.under_replicated == 0, 60)
        assert before.health.under_replicated == 0, "central was not healthy before the hang"
        pid = processes.running_pid(local.node_daemon(local.layout("central").broker(HUNG)))
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            report, elapsed = rounds_until(watch, lambda r: r.health.under_replicated > 0, 30)
            seen = [(b.node, b.reading.up, b.reading.under_replicated) for b in report.health.brokers]
            assert report.health.under_replicated > 0, f"no under-replicated partitions {elapsed:.0f} s after the " \
                                                       f"hang: {seen}, round {report.seconds:.1f} s"
            down = next(b for b in report.health.brokers if b.node == f"central-broker-{HUNG}")
            assert not down.reading.up and report.health.status == "CRITICAL"

            # Through Prometheus's rules to Alertmanager, routed to the receiver; silenced, an alert
            # stays but is suppressed.
            eventually(lambda: in_alertmanager(alertmanager, "KafkaBrokerDown", node=node), 150,
                       "KafkaBrokerDown in Alertmanager", interval=1)
            eventually(lambda: in_alertmanager(alertmanager, "KafkaLeaderChanges", cluster="central"), 60,
                       "KafkaLeaderChanges in Alertmanager", interval=1)
            eventually(lambda: in_prometheus(prometheus, "KafkaUnderReplicatedPartitions", cluster="central"), 30,
                       "KafkaUnderReplicatedPartitions pending in Prometheus", interval=1)
            eventually(lambda: any(a["labels"]["alertname"] == "KafkaBrokerDown" and a["status"] == "firing"
                                   for body in hook.bodies for a in body["alerts"]), 30,
                       "KafkaBrokerDown at the notify_url receiver")
            silenced = subprocess.run(conveyor("ops", "silence", "KafkaBrokerDown", "-m", f"node={node}",
                                               "--hours", "1", "--platform", str(path)),
                                      capture_output=True, text=True, timeout=60)
            assert silenced.returncode == 0, silenced.stdout + silenced.stderr
            muted = eventually(lambda: in_alertmanager(alertmanager, "KafkaBrokerDown", "suppressed", node=node), 30,
                               "KafkaBrokerDown suppressed by the silence")
            assert muted.silenced_by and muted.silenced_by[0] in silenced.stdout
            assert in_alertmanager(alertmanager, "KafkaLeaderChanges", cluster="central"), \
                "the silence reached past its matchers"
        finally:
            os.kill(pid, signal.SIGCONT)
        healed, _ = rounds_until(watch, lambda r: r.health.under_replicated == 0 and r.health.status == "OK", 120)
        assert healed.health.under_replicated == 0, "the broker answering again did not rejoin every ISR"
        eventually(lambda: not any(in_alertmanager(alertmanager, "KafkaBrokerDown", state, node=node)
                                   for state in ("active", "suppressed")), 60, "KafkaBrokerDown to resolve", interval=1)
    finally:
        watch.close()
        scraper.close()
