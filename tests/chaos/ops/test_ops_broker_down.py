"""Broker health against a real failure: a central broker SIGKILLed shows under-replicated
partitions (and the broker down) within 30 s; restarted, the alerts clear."""

from __future__ import annotations

import time

import pytest

from conveyor.config import Platform
from conveyor.ops.scrape import Scraper
from conveyor.ops.watch import ClusterReport, ClusterWatch
from conveyor.runtime import processes
from conveyor.runtime.errors import NodeFailedError
from conveyor.runtime.local import LocalPlatform

pytestmark = pytest.mark.chaos
KILLED = 2


def restart(local: LocalPlatform, cluster: str, broker_id: int, timeout: float = 180.0) -> None:
    """``start_broker``, retried until the broker stays up.

    Test ports may lie inside the kernel's ephemeral port range (32768-60999). Then a client that keeps
    reconnecting to the dead broker can, rarely, connect to itself (TCP simultaneous open) and leave the
    broker's port in TIME_WAIT for a minute. The broker registers with the controller before it binds
    its listener, so it dies right after ``start_broker`` has seen it registered."""
    node = local.layout(cluster).broker(broker_id)
    daemon = local.node_daemon(node)
    deadline = time.monotonic() + timeout
    while True:
        try:
            # Recovering every log after a SIGKILL takes a minute or more on a busy machine.
            local.start_broker(cluster, broker_id, timeout=max(30.0, deadline - time.monotonic()))
            time.sleep(5)  # a failed bind kills it within a second of registering
            if processes.running_pid(daemon) is not None:
                return
        except NodeFailedError:
            pass
        if time.monotonic() > deadline:
            log = (node.log_dir / "server.log").read_text(errors="replace").splitlines()
            errors = [line for line in log if "ERROR" in line or "Exception:" in line]
            raise AssertionError(f"{daemon.name} did not stay up within {timeout:.0f} s:\n"
                                 + "\n".join(errors[-6:]) + "\n" + processes.log_tail(daemon))
        time.sleep(5)


def rounds_until(watch: ClusterWatch, done, timeout: float) -> tuple[ClusterReport, float]:
    """Watcher rounds, about a second apart, until ``done(report)``; the report and seconds taken."""
    started = time.monotonic()
    while True:
        report = watch.cycle()
        elapsed = time.monotonic() - started
        if done(report) or elapsed > timeout:
            return report, elapsed
        time.sleep(1.0)


def test_killed_central_broker_shows_under_replicated_partitions(local: LocalPlatform, platform: Platform,
                                                                 topic_factory):
    topic_factory("central", partitions=6)  # RF 3 on 3 brokers: every partition has a replica on each
    scraper = Scraper()
    watch = ClusterWatch(platform, "central", scraper)
    try:
        before, _ = rounds_until(watch, lambda r: r.health.under_replicated == 0, 60)
        assert before.health.under_replicated == 0, "central was not healthy before the kill"
        assert local.kill_broker("central", KILLED) is not None
        try:
            report, elapsed = rounds_until(watch, lambda r: r.health.under_replicated > 0, 30)
            seen = [(b.node, b.reading.up, b.reading.under_replicated) for b in report.health.brokers]
            assert report.health.under_replicated > 0, f"no under-replicated partitions {elapsed:.0f} s after the " \
                                                       f"kill: {seen}, round {report.seconds:.1f} s"
            alerts = {(a.rule, a.subject): a for a in report.alerts}
            assert alerts[("under_replicated", "central")].message.startswith(
                f"{report.health.under_replicated:,} partition(s) on central have fewer in-sync replicas")
            assert ("broker_down", f"central-broker-{KILLED}") in alerts
            down = next(b for b in report.health.brokers if b.node == f"central-broker-{KILLED}")
            assert not down.reading.up
        finally:
            restart(local, "central", KILLED)
        healed, _ = rounds_until(watch, lambda r: r.health.under_replicated == 0 and not any(
            a.rule in ("broker_down", "under_replicated") for a in r.alerts), 120)
        assert healed.health.under_replicated == 0, "the restarted broker did not rejoin every ISR"
    finally:
        watch.close()
        scraper.close()
