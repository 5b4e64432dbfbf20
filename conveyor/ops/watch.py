"""The watcher: every interval, sample every cluster and judge its consumer groups.

Per cluster a :class:`ClusterWatch` holds the state the judging needs across rounds: the lag
windows (``OffsetTracker``), each node's previous reading (counter rates) and the leader of every
partition (leader changes). The nodes' figures are Prometheus's latest samples of their exporters
(conveyor.ops.broker_readings): Prometheus scrapes them, the watcher does not. :class:`Watcher`
runs every cluster's round in parallel, asks Prometheus for the brokers' figures and the
dashboard's panels and Alertmanager for the alerts, and keeps the latest
:class:`OpsState`, which the HTTP API, the metrics and the CLI all show. The watcher raises no
alert itself: it exports what it judged (conveyor.ops.metrics), and Prometheus's rules
(conveyor.ops.rules) turn that into alerts, which Alertmanager routes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaException

from conveyor.config import Part, Platform
from conveyor.config.policies import RewindPolicy
from conveyor.kafka import OFFSETS_TOPIC
from conveyor.ops.alertmanager import AlertmanagerClient, ManagedAlert
from conveyor.ops.broker_readings import read_brokers, metrics_targets
from conveyor.ops.commit_log import read_commits, read_groups_commits
from conveyor.ops.errors import OpsError, SampleError
from conveyor.ops.health import BrokerReading, ClusterHealth, MetadataCounts, assess_cluster, broker_health, leader_moves
from conveyor.ops.lag import LagPolicy, Reason
from conveyor.ops.prometheus import NO_PROMETHEUS, PrometheusClient, QueryError, connect
from conveyor.ops.dashboard import PanelView, panels_of, read_panels
from conveyor.ops.rewind import OffsetFinding
from conveyor.ops.sampler import SamplerProcess
from conveyor.ops.component_pages import component_url
from conveyor.ops.rewind_history import Seen, missed
from conveyor.ops.rewind_store import RewindStore
from conveyor.positions import group_name
from conveyor.ops.tracker import GroupReport, OffsetSnapshot, OffsetTracker, RewindEvidence, excluded
from conveyor.tls import trusted

log = logging.getLogger(__name__)
#: Rewind evidence kept per cluster for the state and the dashboard, newest last.
_REWINDS_KEPT = 50
#: How far before the sample preceding a move the commit log is read from.
COMMIT_LOG_LEAD_MS = 60_000
#: How long an offset move or a lost commit stays in the metrics after it was last seen. The window
#: that shows one moves on within a minute; the rule reading it must fire and someone must look.
HELD_MS = 15 * 60 * 1000


#: Why no broker figures are shown when no Prometheus is named: it scrapes the exporters.
NO_FIGURES = f"{NO_PROMETHEUS}; the counts come from cluster metadata alone"
#: Why no alerts are shown when no Alertmanager is named: every alert lives there.
NO_ALERTMANAGER = ("no Alertmanager: set ops.alertmanager_url, or runtime.alertmanager for the one `conveyor up` "
                   "starts")


class Held:
    """Keys seen, each kept until ``ms`` after it was last seen."""

    def __init__(self, ms: int = HELD_MS) -> None:
        self.ms = ms
        self._seen: dict[Hashable, int] = {}

    def see(self, keys: Iterable[Hashable], at_ms: int) -> None:
        for key in keys:
            self._seen[key] = at_ms

    def current(self, at_ms: int) -> list[Hashable]:
        self._seen = {key: seen for key, seen in self._seen.items() if at_ms - seen <= self.ms}
        return list(self._seen)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ClusterReport:
    cluster: str
    at_ms: int
    groups: tuple[GroupReport, ...]
    health: ClusterHealth
    #: Wall time of the round (sampling, reading the brokers' figures, evaluation).
    seconds: float
    #: Admin API calls of the round by call; empty when sampling failed.
    calls: Mapping[str, int] = field(default_factory=dict)
    #: Partitions whose end offsets were read.
    partitions: int = 0
    error: str | None = None
    #: The committed offsets around the latest moves back (kept after they leave the windows).
    rewinds: tuple[RewindEvidence, ...] = ()
    #: Per (group, kind), the moves of committed offsets seen in the last HELD_MS.
    moves: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: Per group, the partitions whose committed offset was lost in the last HELD_MS.
    lost: Mapping[str, int] = field(default_factory=dict)
    #: Under-replicated and leaderless partitions by cluster metadata; None when sampling failed.
    metadata: MetadataCounts | None = None


@dataclass(frozen=True, slots=True)
class OpsState:
    platform: str
    at_ms: int
    interval: float
    clusters: tuple[ClusterReport, ...]
    panels: tuple[PanelView, ...]
    #: What Alertmanager holds now and is not silenced, most severe first.
    alerts: tuple[ManagedAlert, ...] = ()
    #: Why the alerts could not be read (no Alertmanager named, or it did not answer); None when they were.
    alerts_error: str | None = None


def _metadata_counts(snapshot: OffsetSnapshot) -> MetadataCounts:
    metas = snapshot.partitions.values()
    return MetadataCounts(sum(1 for m in metas if len(m.isr) < len(m.replicas)),
                          sum(1 for m in metas if m.leader < 0))


class ClusterWatch:
    """One cluster's rounds. Constructing it does no I/O."""

    def __init__(self, platform: Platform, cluster: str, prometheus: PrometheusClient | None) -> None:
        """``prometheus``: where the nodes' figures are read; None: from cluster metadata alone."""
        ops = platform.ops
        self.platform = platform
        self.cluster = cluster
        # A dead leader holds a round for the whole request timeout: keep it near the interval.
        self.sampler = SamplerProcess(platform, cluster, timeout=max(5.0, ops.interval))
        self.tracker = OffsetTracker(cluster, ops.window, ops.history, ops.exclude_groups)
        self.targets = metrics_targets(platform, cluster)
        self.prometheus = prometheus
        # Windows not refreshed for three rounds (and a slow round's slack) are stale: ERR.
        self.lag_policy = LagPolicy(max_lag_records=ops.max_lag_records, max_lag_seconds=ops.max_lag_seconds,
                                    max_sample_age_ms=int((3 * ops.interval + 10) * 1000))
        #: The lake reads on a schedule: between its runs its positions stand still by design.
        self.schedules = {group_name("lake", ""): int(platform.pipeline.lake.every * 1000)}
        self.rewind_policy = RewindPolicy(amplification_threshold=ops.amplification)
        self._previous: dict[str, BrokerReading] = {}
        self._leaders: dict[tuple[str, int], int] | None = None
        self._changes: deque[tuple[int, int]] = deque(maxlen=ops.window)
        self._findings: set[OffsetFinding] = set()
        #: Offset findings, and (group, topic, partition) of lost commits, held for the metrics.
        self._moves, self._lost = Held(), Held()
        self.rewinds: deque[RewindEvidence] = deque(maxlen=_REWINDS_KEPT)
        #: The evidence and last seen offsets kept in the cluster itself, so a restart loses neither.
        self.store = RewindStore(platform, cluster)
        #: Each group's committed offsets as last written to the store; None until the store was read.
        self._saved: dict[str, Seen] | None = None
        self._unsaved: list[RewindEvidence] = []
        #: Distinct offset findings seen since start, by (group, kind): each counted once.
        self.findings_total: Counter[tuple[str, str]] = Counter()
        self.calls_total: Counter[str] = Counter()
        #: Partitions whose leader moved, round to round, since start: a counter, which a scrape
        #: cannot miss, where the window's count is back to 0 a few rounds after the move.
        self.leader_moves_total = 0
        self.failures = 0

    def cycle(self) -> ClusterReport:
        started = time.monotonic()
        error, snapshot = None, None
        try:
            snapshot = self.sampler.sample(self.tracker.topics())
        except SampleError as exc:
            error = str(exc)
            self.failures += 1
        # Read after sampling: while a leader is down its ListOffsets wait out the timeout, and the
        # health shown at the end of the round must not be that old.
        readings, figures_error = self._readings()
        at = snapshot.at_ms if snapshot is not None else now_ms()
        if snapshot is not None:
            if self._saved is None:
                self._restore(snapshot)
            self.tracker.push(snapshot)
            self.calls_total.update(snapshot.calls)
            leaders = snapshot.leaders()
            moved = leader_moves(self._leaders, leaders) if self._leaders is not None else 0
            self._changes.append((at, moved))
            self.leader_moves_total += moved
            self._leaders = leaders
        groups = self.tracker.evaluate(at, self.lag_policy, self.rewind_policy, self.schedules)
        self._count_findings(groups)
        if snapshot is not None and self._saved is not None:
            self._save(snapshot)
        metadata = _metadata_counts(snapshot) if snapshot is not None else None
        health = self._health(at, readings, metadata, figures_error)
        self._moves.see((f for g in groups for f in g.findings.offsets), at)
        self._lost.see(((g.group, p.topic, p.partition) for g in groups for p in g.status.partitions
                        if p.reason is Reason.COMMIT_LOST), at)
        moves = Counter((f.group, f.kind.name.lower()) for f in self._moves.current(at))
        lost = Counter(group for group, _, _ in self._lost.current(at))
        return ClusterReport(self.cluster, at, groups, health, time.monotonic() - started,
                             dict(snapshot.calls) if snapshot else {}, len(snapshot.ends) if snapshot else 0, error,
                             tuple(self.rewinds), moves, lost, metadata)

    def _readings(self) -> tuple[list[BrokerReading], str | None]:
        """The nodes' latest figures, or why there are none."""
        if not self.targets:
            return [], None
        if self.prometheus is None:
            return [], NO_FIGURES
        try:
            return read_brokers(self.prometheus, self.cluster, self.targets, now_ms()), None
        except QueryError as err:
            return [], str(err)

    def _health(self, at: int, readings: list[BrokerReading], metadata: MetadataCounts | None,
                figures_error: str | None) -> ClusterHealth:
        brokers = []
        for reading in readings:
            brokers.append(broker_health(reading, self._previous.get(reading.node)))
            self._previous[reading.node] = reading
        changes = sum(n for _, n in self._changes)
        span = (at - self._changes[0][0]) / 1000 if self._changes else 0.0
        return assess_cluster(self.cluster, at, brokers, changes, span, metadata, figures_error)

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
                self._moves.see([found.finding], snapshot.at_ms)
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


class Watcher:
    """Every cluster of the platform, and the panels asked of Prometheus."""

    def __init__(self, platform: Platform, clusters: Sequence[str] | None = None) -> None:
        """``clusters``: only these (default: every cluster of the platform)."""
        platform = platform.acting_as(Part.ops)
        self.platform = platform
        self.interval = platform.ops.interval
        for name in clusters or ():
            platform.cluster(name)  # an unknown name fails here, naming the known ones
        names = list(clusters) if clusters else list(platform.clusters)
        # A query that waits longer than a round would hold the next one back.
        self.prometheus = connect(platform, timeout=min(5.0, max(1.0, self.interval)))
        self.clusters = [ClusterWatch(platform, name, self.prometheus) for name in names]
        self.panels = panels_of(platform.ops.panels, platform.ops.running)
        #: The components' pages; the watcher serves those of files for Prometheus to scrape.
        self.components = {name: component_url(platform, url) for name, url in platform.ops.components.items()}
        self.state: OpsState | None = None
        self.cycles = 0
        self.cycle_errors = 0
        am = platform.ops.alertmanager_url
        self.alertmanager = AlertmanagerClient(am, trusted(platform), timeout=min(5.0, max(1.0, self.interval))) \
            if am is not None else None
        self._pool = ThreadPoolExecutor(max_workers=len(self.clusters), thread_name_prefix="ops-cluster")

    def cycle(self) -> OpsState:
        reports = tuple(self._pool.map(lambda c: c.cycle(), self.clusters))
        at = now_ms()
        ops = self.platform.ops
        panels = read_panels(self.prometheus, self.panels, at, ops.panel_range, ops.history)
        alerts, alerts_error = self._alerts()
        self.state = OpsState(self.platform.name, at, self.interval, reports, panels, alerts, alerts_error)
        self.cycles += 1
        return self.state

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while its latest round is recent: three missed rounds (and a slow round's slack)
        mean the watcher is stuck."""
        if self.state is None:
            return False, {"status": "starting", "rounds": self.cycles}
        age = (now_ms() - self.state.at_ms) / 1000
        healthy = age < 3 * self.interval + 30
        return healthy, {"status": "ok" if healthy else "stale", "rounds": self.cycles, "age_seconds": round(age, 1)}

    def _alerts(self) -> tuple[tuple[ManagedAlert, ...], str | None]:
        if self.alertmanager is None:
            return (), NO_ALERTMANAGER
        try:
            return tuple(a for a in self.alertmanager.alerts() if a.state == "active"), None
        except OpsError as err:
            return (), str(err)

    def run(self, stop: threading.Event) -> None:
        """Rounds every interval until ``stop`` is set. A round that fails unexpectedly is logged and
        counted; the next one runs anyway, since a watcher that dies silently is worse than none."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                state = self.cycle()
                for report in state.clusters:
                    log.debug("%s: %d groups in %.2f s", report.cluster, len(report.groups), report.seconds)
            except Exception:
                self.cycle_errors += 1
                log.exception("ops round failed")
            stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def close(self) -> None:
        if self.alertmanager is not None:
            self.alertmanager.close()
        self._pool.shutdown(wait=False)
        for cluster in self.clusters:
            cluster.close()
        if self.prometheus is not None:
            self.prometheus.close()
