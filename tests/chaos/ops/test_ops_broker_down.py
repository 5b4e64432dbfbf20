"""Broker health against a real failure: a central broker that hangs (SIGSTOP: alive, its
connections open, answering nothing, as in a long GC pause or a stuck disk) is fenced by the
controller and shows under-replicated partitions (and the broker down) within 30 s; answering again
(SIGCONT), it rejoins every ISR and the alerts clear. A hang rather than a kill: a restarted broker
recovers its logs first, which on a loaded machine took minutes the alerts do not need, and the
kills are the other chaos tests'.

Around it run a real Prometheus and Alertmanager (Debian's), as `conveyor up` starts them, and the
watch service: the watcher's own alert reaches Alertmanager at once, Prometheus's KafkaBrokerDown
once it has held (ops.broker_down_hold), Alertmanager routes it to ops.notify_url, and `conveyor ops silence` silences it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.config import Platform
from conveyor.ops.alertmanager import AlertmanagerClient, ManagedAlert
from conveyor.ops.scrape import Scraper
from conveyor.ops.watch import ClusterReport, ClusterWatch
from conveyor.runtime import processes
from conveyor.runtime.local import LocalPlatform
from tests.conftest import eventually
from tests.opskit import WebhookReceiver, monitored
from tests.systemkit import conveyor

pytestmark = pytest.mark.chaos
HUNG = 2


@pytest.fixture
def stack(platform_data: dict[str, Any], platform_file: Path,
          tmp_path: Path) -> Iterator[tuple[Path, AlertmanagerClient, WebhookReceiver]]:
    """Prometheus, Alertmanager and the watch service; Alertmanager's route ends at a webhook
    receiver, and KafkaBrokerDown pages after 5 s of silence here (the platform's default: a minute)."""
    hook = WebhookReceiver()
    try:
        with monitored(platform_data, platform_file, tmp_path, notify_url=hook.url, broker_down_hold="5s") as (path, variant):
            client = AlertmanagerClient(variant.ops.alertmanager_url)
            try:
                yield path, client, hook
            finally:
                client.close()
    finally:
        hook.close()


def in_alertmanager(client: AlertmanagerClient, name: str, node: str, state: str = "active") -> ManagedAlert | None:
    """The alert ``name`` about ``node`` in Alertmanager, when it is in ``state``."""
    return next((a for a in client.alerts() if a.name == name and node in (a.labels.get("node"), a.labels.get("subject"))
                 and a.state == state), None)


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
    path, alertmanager, hook = stack
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
            alerts = {(a.rule, a.subject): a for a in report.alerts}
            assert alerts[("under_replicated", "central")].message.startswith(
                f"{report.health.under_replicated:,} partition(s) on central have fewer in-sync replicas")
            assert ("broker_down", f"central-broker-{HUNG}") in alerts
            down = next(b for b in report.health.brokers if b.node == f"central-broker-{HUNG}")
            assert not down.reading.up

            # Through Alertmanager: the watcher's alert as it judges it, then Prometheus's rule once
            # it has held, routed to the receiver; silenced, it stays but is suppressed.
            eventually(lambda: in_alertmanager(alertmanager, "broker_down", node), 30,
                       "the watcher's broker_down in Alertmanager")
            eventually(lambda: in_alertmanager(alertmanager, "KafkaBrokerDown", node), 150,
                       "Prometheus's KafkaBrokerDown in Alertmanager", interval=1)
            eventually(lambda: any(a["labels"]["alertname"] == "KafkaBrokerDown" and a["status"] == "firing"
                                   for body in hook.bodies for a in body["alerts"]), 30,
                       "KafkaBrokerDown at the notify_url receiver")
            silenced = subprocess.run(conveyor("ops", "silence", "KafkaBrokerDown", "-m", f"node={node}",
                                               "--hours", "1", "--platform", str(path)),
                                      capture_output=True, text=True, timeout=60)
            assert silenced.returncode == 0, silenced.stdout + silenced.stderr
            muted = eventually(lambda: in_alertmanager(alertmanager, "KafkaBrokerDown", node, "suppressed"), 30,
                               "KafkaBrokerDown suppressed by the silence")
            assert muted.silenced_by and muted.silenced_by[0] in silenced.stdout
            assert in_alertmanager(alertmanager, "broker_down", node), "the silence reached past its matchers"
        finally:
            os.kill(pid, signal.SIGCONT)
        healed, _ = rounds_until(watch, lambda r: r.health.under_replicated == 0 and not any(
            a.rule in ("broker_down", "under_replicated") for a in r.alerts), 120)
        assert healed.health.under_replicated == 0, "the restarted broker did not rejoin every ISR"
    finally:
        watch.close()
        scraper.close()
