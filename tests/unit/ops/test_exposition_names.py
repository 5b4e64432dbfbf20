"""Every component's /metrics page passes ``promtool check metrics`` (Prometheus' naming guide as
its linter reads it), rendered in-process with series in every family: labelled children, histogram
buckets, the watcher's state. Also the guide's rules promtool does not check."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter as Tally
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from conveyor.config import load_platform
from conveyor.config.edge import Connections
from conveyor.dispatch.metrics import NodeMetrics
from conveyor.edge_guard import EdgeGuard
from conveyor.edge_ports import PortConnections
from conveyor.gateway.metrics import GatewayMetrics
from conveyor.ops.health import BrokerHealth, BrokerReading, MetadataCounts, assess_cluster
from conveyor.ops.metrics import OpsCollector
from conveyor.ops.throttle.controller import ThrottleMetrics
from conveyor.ops.tracker import GroupOffsets, OffsetSnapshot, OffsetTracker, PartitionMeta
from conveyor.ops.watch import ClusterReport, OpsState, now_ms
from conveyor.pipeline.lake import RunSummary, TopicRun
from conveyor.pipeline.metrics import LakeMetrics
from conveyor.pipeline.offsets import Gap, PartitionRange
from conveyor.pipeline.realtime.metrics import BatchReport, RealtimeMetrics
from conveyor.pipeline.trust import Trust
from conveyor.positions import publish_counter
from conveyor.registrar import Registrar
from conveyor.replicate.metrics import ReplicateMetrics

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with `make setup`")

ROOT = Path(__file__).resolve().parents[3]


def _fill(registry: CollectorRegistry) -> CollectorRegistry:
    """One series in every family of ``registry`` not yet holding one, as a running component has."""
    for collector in set(registry._names_to_collectors.values()):  # noqa: SLF001 (no public view)
        if not isinstance(collector, (Counter, Gauge, Histogram)):
            continue
        names = collector._labelnames  # noqa: SLF001
        child = collector.labels(*(f"some-{n}" for n in names)) if names else collector
        if isinstance(child, Histogram):
            child.observe(0.2)
        elif isinstance(child, Counter):
            child.inc(3)
        else:
            child.set(2)
    return registry


def _lake() -> CollectorRegistry:
    listed_at = datetime(2025, 3, 1, 10, 25, tzinfo=timezone.utc)
    run = TopicRun(topic="ad-events", ranges=(PartitionRange(0, 25, 30),), gaps=(Gap("ad-events", 0, 10, 24),),
                   records_read=9, bytes_read=900, landed=7, quarantined=1, duplicates_dropped=1, checked=9,
                   trust=Trust("ad-events", False, "a test"), orphans_deleted=0, committed=True, seconds=2.0,
                   listed_at=listed_at)
    metrics = LakeMetrics(timedelta(minutes=10))
    metrics.observe(RunSummary("r1", listed_at, (run,), 3.0))
    return _fill(metrics.registry)


def _realtime() -> CollectorRegistry:
    metrics = RealtimeMetrics()
    metrics.observe(BatchReport(7, 10, 10, 1, 1, {"late:clicks": 2}, 1.5, Tally({300: 8, 4_000: 2}), True,
                                duplicates=1, saturated={"clicks": 1}, stages={"spark": 1.2}))
    metrics.observe_trigger(7, {"addBatch": 1500})
    return _fill(metrics.registry)


def _watcher() -> CollectorRegistry:
    """The watcher's page over a round with a broker that answered twice, one down, and groups."""
    at = now_ms()
    tracker = OffsetTracker("central", window=5)
    partitions = [("t", p) for p in range(3)]
    for i in range(3):
        ends = {tp: 1000 * (i + 1) for tp in partitions}
        tracker.push(OffsetSnapshot("central", at - (2 - i) * 5000, (GroupOffsets("mailer", "STABLE", ends),),
                                    dict.fromkeys(partitions, PartitionMeta(1, (1, 2), (1, 2))), ends))
    full = {"under_replicated": 1.0, "under_min_isr": 0.0, "leaders": 3.0, "replicas": 6.0, "max_follower_lag": 9.0,
            "isr_shrinks": 2.0, "isr_expands": 2.0, "bytes_in": 5e6, "bytes_out": 9e6, "cleaner_dirty_percent": 35.0,
            "cleaner_idle_ms": 1500.0, "coordinator_load_ms": 40.0, "offset_commits": 70.0, "groups": 4.0,
            "unclean_elections": 0.0, "active_controller": 1.0}
    reading = BrokerReading("central-broker-1", at, 1, **full, p99_ms={"Produce": 3.0})
    brokers = [BrokerHealth(reading, 1e5, 2e5, 0.0, 0.0),
               BrokerHealth(BrokerReading("central-broker-2", at, 2, "ConnectError: refused", True))]
    health = assess_cluster("central", at, brokers)
    report = ClusterReport("central", at, tracker.evaluate(at), health, 0.2, {"metadata": 1}, 3,
                           metadata=MetadataCounts(under_replicated=1, offline=0))
    watcher = SimpleNamespace(cycles=3, cycle_errors=0, state=OpsState("demo", at, 5.0, (report,), ()),
                              clusters=[SimpleNamespace(cluster="central", calls_total={"metadata": 3},
                                                        findings_total={("mailer", "rewind"): 1}, failures=0,
                                                        leader_moves_total=2)])
    registry = CollectorRegistry()
    registry.register(OpsCollector(watcher))  # type: ignore[arg-type]
    return _with(registry, EdgeGuard("dashboard", Connections()))


def _with(registry: CollectorRegistry, collector: Collector) -> CollectorRegistry:
    """``registry`` with one more collector, as a server registers its edge's."""
    registry.register(collector)
    return registry


def _small_services() -> CollectorRegistry:
    registry = Registrar(load_platform(ROOT / "platform.yaml")).metrics
    publish_counter(registry)
    return _fill(registry)


def _throttle() -> CollectorRegistry:
    metrics = ThrottleMetrics()
    metrics.quota.labels("central", "lake-feed").set(1_048_576)
    return _fill(metrics.registry)


PAGES = {
    "gateway": lambda: _with(_fill(GatewayMetrics("dc1").registry), EdgeGuard("gateway", Connections())),
    "replicator": lambda: _fill(ReplicateMetrics().registry),
    "dispatcher": lambda: _with(_fill(NodeMetrics().registry), PortConnections("dispatch", lambda: 1)),
    "lake": _lake,
    "realtime": _realtime,
    "throttle": _throttle,
    "watcher": _watcher,
    "registrar-and-positions": _small_services,
}


@pytest.mark.parametrize("component", PAGES)
def test_promtool_finds_nothing_to_complain_about(component: str) -> None:
    page = generate_latest(PAGES[component]())
    checked = subprocess.run(["promtool", "check", "metrics"], input=page, capture_output=True)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, b""), page.decode()


#: The guide's rules promtool does not check: a percentage is a ratio (0..1), a quantile is a label
#: of a summary (or a histogram's rule), a rate is a counter's rate() (a configured limit aside).
_NOT_IN_NAMES = re.compile(r"percent|_p\d\d|_per_second$")
_LIMITS = {"conveyor_throttle_quota_bytes_per_second"}
#: Labels whose values are timestamps: each new value is a new series.
_TIME_LABELS = {"hour", "day", "time", "timestamp"}


@pytest.mark.parametrize("component", PAGES)
def test_names_carry_units_and_labels_hold_no_time(component: str) -> None:
    for family in text_string_to_metric_families(generate_latest(PAGES[component]()).decode()):
        assert family.name in _LIMITS or not _NOT_IN_NAMES.search(family.name), family.name
        for sample in family.samples:
            assert not _TIME_LABELS & set(sample.labels), (family.name, sample.labels)
