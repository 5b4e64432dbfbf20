"""The watcher: every interval, sample and scrape every cluster, evaluate, and raise alerts.

Per cluster a :class:`ClusterWatch` holds the state the rules need across rounds: the lag windows
(``OffsetTracker``), each node's previous reading (counter rates), its recent follower lag, and
the leader of every partition (leader changes). :class:`Watcher` runs every cluster's round in
parallel, asks Prometheus for the dashboard's panels, and keeps the latest
:class:`OpsState`, which the HTTP API, the metrics and the CLI all show.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from confluent_kafka import KafkaException

from conveyor.config import Part, Platform
from conveyor.config.policies import HealthPolicy, OffsetManagerPolicy, RewindPolicy
from conveyor.kafka import OFFSETS_TOPIC
from conveyor.ops.alerts import Alert, group_alerts, health_alert, replication_gap_alert, sampling_alert, sort_alerts
from conveyor.ops.commit_log import read_commits, read_groups_commits
from conveyor.ops.errors import OpsError, SampleError
from conveyor.ops.health import (
    BrokerReading,
    ClusterHealth,
    MetadataCounts,
    assess_cluster,
    broker_health,
    leader_moves,
)
from conveyor.ops.lag import LagPolicy
from conveyor.ops.notify import AlertmanagerNotifier, Notifier, WebhookNotifier
from conveyor.ops.prometheus import PrometheusClient
from conveyor.ops.dashboard import PanelView, panels_of, read_panels
from conveyor.ops.rewind import OffsetFinding
from conveyor.ops.sampler import SamplerProcess
from conveyor.ops.scrape import Scraper, component_url, metrics_targets
from conveyor.ops.offset_manager import assess_offset_manager
from conveyor.ops.rewind_history import Seen, missed
from conveyor.ops.rewind_store import RewindStore
from conveyor.positions import group_name
from conveyor.ops.tracker import GroupReport, OffsetSnapshot, OffsetTracker, RewindEvidence, excluded
from conveyor.ops.traffic import TopicRates, TrafficPolicy, assess_traffic, topic_rates
from conveyor.replicate.plan import Gap
from conveyor.replicate.status import route_gaps
from conveyor.tls import base_url, trusted

log = logging.getLogger(__name__)
#: Rewind evidence kept per cluster for the state and the dashboard, newest last.
_REWINDS_KEPT = 50
#: How far before the sample preceding a move the commit log is read from.
COMMIT_LOG_LEAD_MS = 60_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ClusterReport:
    cluster: str
    at_ms: int
    groups: tuple[GroupReport, ...]
    health: ClusterHealth
    alerts: tuple[Alert, ...]
    #: Wall time of the round (sampling, scraping, evaluation).
    seconds: float
    #: Admin API calls of the round by call; empty when sampling failed.
    calls: Mapping[str, int] = field(default_factory=dict)
    #: Partitions whose end offsets were read.
    partitions: int = 0
    error: str | None = None
    #: The committed offsets around the latest moves back (kept after they leave the windows).
    rewinds: tuple[RewindEvidence, ...] = ()
    #: Per topic, bytes in and out per second over the brokers in this round.
    traffic: TopicRates = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OpsState:
    platform: str
    at_ms: int
    interval: float
    clusters: tuple[ClusterReport, ...]
    panels: tuple[PanelView, ...]

    @property
    def alerts(self) -> tuple[Alert, ...]:
        return sort_alerts(a for c in self.clusters for a in c.alerts)


def _metadata_counts(snapshot: OffsetSnapshot) -> MetadataCounts:
    metas = snapshot.partitions.values()
    return MetadataCounts(sum(1 for m in metas if len(m.isr) < len(m.replicas)),
                          sum(1 for m in metas if m.leader < 0))


class ClusterWatch:
    """One cluster's rounds. Constructing it does no I/O."""

    def __init__(self, platform: Platform, cluster: str, scraper: Scraper) -> None:
        ops = platform.ops
        self.platform = platform
        self.cluster = cluster
        # A dead leader holds a round for the whole request timeout: keep it near the interval.
        self.sampler = SamplerProcess(platform, cluster, timeout=max(5.0, ops.interval))
        self.tracker = OffsetTracker(cluster, ops.window, ops.history, ops.exclude_groups)
        self.targets = metrics_targets(platform, cluster)
        self.scraper = scraper
        # Windows not refreshed for three rounds (and a slow round's slack) are stale: ERR.
        self.lag_policy = LagPolicy(max_lag_records=ops.max_lag_records, max_lag_seconds=ops.max_lag_seconds,
                                    max_sample_age_ms=int((3 * ops.interval + 10) * 1000))
        #: The lake reads on a schedule: between its runs its positions stand still by design.
        self.schedules = {group_name("lake", ""): int(platform.pipeline.lake.every * 1000)}
        self.rewind_policy = RewindPolicy(amplification_threshold=ops.amplification)
        self.health_policy = HealthPolicy(p99_warn_ms=ops.request_p99_warn * 1000,
                                          p99_alarm_ms=ops.request_p99_alarm * 1000, skew_warn=ops.skew_warn,
                                          skew_min_bytes=float(ops.skew_min_bytes))
        self._previous: dict[str, BrokerReading] = {}
        self._follower_lags: dict[str, deque[float]] = {}
        self._leaders: dict[tuple[str, int], int] | None = None
        self._changes: deque[tuple[int, int]] = deque(maxlen=ops.window)
        self._findings: set[OffsetFinding] = set()
        self.offset_policy = OffsetManagerPolicy(
            dirty_percent_warn=ops.offsets_dirty_warn, dirty_samples=max(1, math.ceil(ops.offsets_dirty_hold / ops.interval)),
            cleaner_idle_alarm_ms=ops.cleaner_idle_alarm * 1000, coordinator_load_warn_ms=ops.coordinator_load_warn * 1000)
        #: Each node's consecutive recent readings (the dirty ratio must stay high across them).
        self._recent: dict[str, deque[BrokerReading]] = {}
        self.traffic_policy = TrafficPolicy(samples=max(2, ops.window))
        self._traffic: deque[TopicRates] = deque(maxlen=self.traffic_policy.samples)
        self.rewinds: deque[RewindEvidence] = deque(maxlen=_REWINDS_KEPT)
        #: The evidence and last seen offsets kept in the cluster itself, so a restart loses neither.
        self.store = RewindStore(platform, cluster)
        #: Each group's committed offsets as last written to the store; None until the store was read.
        self._saved: dict[str, Seen] | None = None
        self._unsaved: list[RewindEvidence] = []
        #: Distinct offset findings seen since start, by (group, kind): each counted once.
        self.findings_total: Counter[tuple[str, str]] = Counter()
        self.calls_total: Counter[str] = Counter()
        self.failures = 0
        self.gaps = RouteGaps(platform, cluster)

    def cycle(self) -> ClusterReport:
        started = time.monotonic()
        error, snapshot = None, None
        try:
            snapshot = self.sampler.sample(self.tracker.topics())
        except SampleError as exc:
            error = str(exc)
            self.failures += 1
        # Scraped after sampling: while a leader is down its ListOffsets wait out the timeout, and
        # the health shown at the end of the round must not be that old.
        readings = self.scraper.readings(self.targets)
        at = snapshot.at_ms if snapshot is not None else now_ms()
        if snapshot is not None:
            if self._saved is None:
                self._restore(snapshot)
            self.tracker.push(snapshot)
            self.calls_total.update(snapshot.calls)
            leaders = snapshot.leaders()
            self._changes.append((at, leader_moves(self._leaders, leaders) if self._leaders is not None else 0))
            self._leaders = leaders
        groups = self.tracker.evaluate(at, self.lag_policy, self.rewind_policy, self.schedules)
        self._count_findings(groups)
        if snapshot is not None and self._saved is not None:
            self._save(snapshot)
        health = self._health(at, readings, snapshot, groups)
        alerts = [health_alert(f) for f in health.findings]
        alerts += [a for g in groups for a in group_alerts(g)]
        alerts += self.gaps.alerts(at)
        if error is not None:
            alerts.append(sampling_alert(self.cluster, error))
        return ClusterReport(self.cluster, at, groups, health, sort_alerts(alerts), time.monotonic() - started,
                             dict(snapshot.calls) if snapshot else {}, len(snapshot.ends) if snapshot else 0, error,
                             tuple(self.rewinds), self._traffic[-1] if self._traffic else {})

    def _health(self, at: int, readings: list[BrokerReading], snapshot: OffsetSnapshot | None,
                groups: tuple[GroupReport, ...]) -> ClusterHealth:
        brokers = []
        self._traffic.append(topic_rates((r, self._previous.get(r.node)) for r in readings))
        for reading in readings:
            brokers.append(broker_health(reading, self._previous.get(reading.node)))
            self._previous[reading.node] = reading
            recent = self._recent.setdefault(reading.node, deque(maxlen=self.offset_policy.dirty_samples))
            if not reading.up:
                recent.clear()
            recent.append(reading)
            lags = self._follower_lags.setdefault(reading.node, deque(maxlen=self.tracker.window))
            if reading.max_follower_lag is None:
                lags.clear()  # down, or not a follower: "stays above zero" starts over
            else:
                lags.append(reading.max_follower_lag)
        changes = sum(n for _, n in self._changes)
        span = (at - self._changes[0][0]) / 1000 if self._changes else 0.0
        explained: dict[str, list[str]] = {}
        for g in groups:
            for found in g.findings.amplification:
                explained.setdefault(found.topic, []).append(g.group)
        extra = assess_offset_manager(self.cluster, self._recent, self.offset_policy)
        extra += assess_traffic(self.cluster, self._traffic, explained, self.traffic_policy)
        return assess_cluster(self.cluster, at, brokers, self._follower_lags, changes, span,
                              _metadata_counts(snapshot) if snapshot else None, self.health_policy, extra)

    def close(self) -> None:
        self.sampler.close()

    def _count_findings(self, groups: tuple[GroupReport, ...]) -> None:
        # A finding stays in the window for several rounds; count it the first time only.
        current = {f for g in groups for f in g.findings.offsets}
        for finding in current - self._findings:
            self.findings_total[(finding.group, finding.kind.name.lower())] += 1
        new = [self._with_commit_log(e) for g in groups for e in g.evidence if e.finding not in self._findings]
        self.rewinds.extend(new)
        self._unsaved.extend(new)
        self._findings = current

    def _restore(self, snapshot: OffsetSnapshot) -> None:
        """The evidence kept before this watcher started, and the moves back made while none ran."""
        try:
            evidence, seen = self.store.load()
        except (KafkaException, OpsError) as err:
            log.warning("%s: the rewind evidence kept in the cluster could not be read (tried again next round): %s",
                        self.cluster, err)
            return
        self.rewinds.extend(evidence)
        changed = {g.group: (seen[g.group], g.committed) for g in snapshot.groups
                   if g.group in seen and g.committed is not None and dict(g.committed) != dict(seen[g.group].committed)}
        try:
            logs, error = read_groups_commits(self.platform, self.cluster, {
                group: last.at_ms - COMMIT_LOG_LEAD_MS for group, (last, _) in changed.items()}) if changed else {}, None
        except (KafkaException, OpsError) as err:
            logs, error = {}, f"{type(err).__name__}: {err}"
        for group, (last, committed) in sorted(changed.items()):
            for found in missed(self.cluster, last, committed, snapshot.at_ms, logs.get(group), error):
                log.warning("%s: %s (%s)", self.cluster, found.finding.message, found.found)
                self.findings_total[(found.group, found.finding.kind.name.lower())] += 1
                self.rewinds.append(found)
                self._unsaved.append(found)
        self._saved = seen

    def _save(self, snapshot: OffsetSnapshot) -> None:
        """New evidence, and each group's committed offsets where they changed."""
        assert self._saved is not None
        changed = [Seen(g.group, snapshot.at_ms, dict(g.committed)) for g in snapshot.groups
                   if g.committed is not None and not excluded(g.group, self.tracker.exclude)
                   and (g.group not in self._saved or dict(self._saved[g.group].committed) != dict(g.committed))]
        try:
            self.store.save(self._unsaved, changed)
        except (KafkaException, OpsError) as err:
            log.warning("%s: rewind evidence not written to the cluster (tried again next round): %s", self.cluster, err)
            return
        self._unsaved = []
        self._saved.update((s.group, s) for s in changed)

    def _with_commit_log(self, evidence: RewindEvidence) -> RewindEvidence:
        """The evidence with the group's commits from __consumer_offsets since shortly before the
        move, read now: the log cleaner may compact the earlier ones away at any time."""
        try:
            log_ = read_commits(self.platform, self.cluster, evidence.group, evidence.before_ms - COMMIT_LOG_LEAD_MS)
        except (KafkaException, OpsError) as err:
            log.warning("%s: the commits of %s could not be read from %s: %s", self.cluster, evidence.group,
                        OFFSETS_TOPIC, err)
            return replace(evidence, commit_log_error=f"{type(err).__name__}: {err}")
        return replace(evidence, commit_log=log_)


class RouteGaps:
    """The gaps recorded by the routes that copy into one cluster, read from their route topics at
    most every ``every`` seconds (a consumer per bucket; the records change rarely)."""

    def __init__(self, platform: Platform, cluster: str, every: float = 60.0) -> None:
        self.platform = platform
        self.routes = {name: spec for name, spec in platform.routes.items() if spec.destination == cluster}
        self.every = every
        self._read_at = -math.inf
        self._gaps: dict[str, tuple[Gap, ...]] = {}

    def alerts(self, at_ms: int) -> list[Alert]:
        if self.routes and time.monotonic() - self._read_at >= self.every:
            self._read_at = time.monotonic()
            for name, spec in self.routes.items():
                try:
                    self._gaps[name] = route_gaps(self.platform, name)
                except (KafkaException, TimeoutError) as err:  # kept from the last read; tried next time
                    log.warning("gaps of route %s not read: %s", name, err)
        relaxed = self.platform.relaxed_topics()
        found = (replication_gap_alert(name, spec.source, spec.destination, self._gaps.get(name, ()), at_ms, relaxed)
                 for name, spec in self.routes.items())
        return [alert for alert in found if alert is not None]


def notifier(platform: Platform) -> Notifier | None:
    """Where the watcher's alerts go: Alertmanager when there is one (its route ends at notify_url),
    else straight to notify_url, else nowhere."""
    ops = platform.ops
    shown_at = f"{base_url(ops.tls, ops.port)}/"
    if ops.alertmanager_url is not None:
        return AlertmanagerNotifier(ops.alertmanager_url, platform.name, shown_at, attempts=ops.notify_attempts,
                                    verify=trusted(platform))
    if ops.notify_url is not None:
        return WebhookNotifier(ops.notify_url.get_secret_value(), platform.name, shown_at, attempts=ops.notify_attempts)
    return None


def prometheus_url(platform: Platform) -> str | None:
    """The Prometheus the panels ask: ``ops.prometheus_url``, else the local one `conveyor up`
    starts for ``runtime.prometheus``, else none."""
    if platform.ops.prometheus_url is not None:
        return platform.ops.prometheus_url
    local = platform.runtime.prometheus
    return f"http://127.0.0.1:{local.port}" if local is not None else None


class Watcher:
    """Every cluster of the platform, and the panels asked of Prometheus."""

    def __init__(self, platform: Platform, clusters: Sequence[str] | None = None) -> None:
        """``clusters``: only these (default: every cluster of the platform)."""
        platform = platform.acting_as(Part.ops)
        self.platform = platform
        self.interval = platform.ops.interval
        self.scraper = Scraper(verify=trusted(platform))  # brokers may serve their pages over HTTPS (conveyor.tls)
        for name in clusters or ():
            platform.cluster(name)  # an unknown name fails here, naming the known ones
        names = list(clusters) if clusters else list(platform.clusters)
        self.clusters = [ClusterWatch(platform, name, self.scraper) for name in names]
        self.panels = panels_of(platform.ops.panels)
        url = prometheus_url(platform)
        # A query that waits longer than a round would hold the next one back.
        self.prometheus = PrometheusClient(url, trusted(platform), timeout=min(5.0, max(1.0, self.interval))) \
            if url is not None else None
        #: The components' pages; the watcher serves those of files for Prometheus to scrape.
        self.components = {name: component_url(platform, url) for name, url in platform.ops.components.items()}
        self.state: OpsState | None = None
        self.cycles = 0
        self.cycle_errors = 0
        self.notifier = notifier(platform)
        self._pool = ThreadPoolExecutor(max_workers=len(self.clusters), thread_name_prefix="ops-cluster")

    def cycle(self) -> OpsState:
        reports = tuple(self._pool.map(lambda c: c.cycle(), self.clusters))
        at = now_ms()
        ops = self.platform.ops
        panels = read_panels(self.prometheus, self.panels, at, ops.panel_range, ops.history)
        self.state = OpsState(self.platform.name, at, self.interval, reports, panels)
        if self.notifier is not None:
            self.notifier.update((alert for report in reports for alert in report.alerts), at)
        self.cycles += 1
        return self.state

    def run(self, stop: threading.Event) -> None:
        """Rounds every interval until ``stop`` is set. A round that fails unexpectedly is logged and
        counted; the next one runs anyway, since a watcher that dies silently is worse than none."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                state = self.cycle()
                for report in state.clusters:
                    log.debug("%s: %d groups, %d alerts in %.2f s", report.cluster, len(report.groups),
                              len(report.alerts), report.seconds)
            except Exception:
                self.cycle_errors += 1
                log.exception("ops round failed")
            stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def close(self) -> None:
        if self.notifier is not None:
            self.notifier.close()
        self._pool.shutdown(wait=False)
        for cluster in self.clusters:
            cluster.close()
        self.scraper.close()
        if self.prometheus is not None:
            self.prometheus.close()
