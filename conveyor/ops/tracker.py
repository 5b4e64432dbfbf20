"""What the sampler saw, kept as lag windows per consumer group. Pure: no Kafka, no clock.

The sampler (``conveyor.ops.sampler``) turns one round of admin calls into an
:class:`OffsetSnapshot`; :class:`OffsetTracker` pushes it into a :class:`~conveyor.ops.lag.PartitionWindow`
per (group, partition), keeps each group's total lag for the dashboard's sparklines, and evaluates
every group with the lag rules and the rewind findings.

Which partitions a group is judged on: every partition of every topic it has ever committed to while
it is listed. A commit that disappears (expired or deleted offsets, an offset fetch that answers
none) therefore shows as COMMIT_LOST instead of the partition silently leaving the view, which is
how consumers reset unnoticed in the field (docs/architecture.md, section 6). A window is dropped
once it has held no commit for a whole window, so an intentional offset deletion clears after one
window; a group that is no longer listed, or a deleted topic, is dropped at once.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from conveyor.config.policies import RewindPolicy
from conveyor.ops.lag import NO_OFFSET, DEFAULT_POLICY, GroupStatus, LagPolicy, PartitionWindow, evaluate_group
from conveyor.ops.commit_log import CommitLog
from conveyor.ops.rewind import (
    DEFAULT_REWIND_POLICY,
    MOVED_BACK,
    GroupFindings,
    OffsetFinding,
    scan_group,
)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    group: str
    #: The coordinator's view: STABLE, EMPTY, PREPARING_REBALANCE...
    state: str
    #: Committed offsets of the partitions that have one; None when the offset fetch failed.
    committed: Mapping[TopicPartition, int] | None
    error: str | None = None
    #: Where the real position lives, when the commits are a reader's monitoring-only copy.
    kept_in: str | None = None
    #: A monitoring-only copy's partitions -> the client ids of the reader's Kafka clients.
    readers: Mapping[TopicPartition, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    #: -1: no leader (offline).
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OffsetSnapshot:
    """One sampling round of one cluster. Committed offsets were read before the end offsets."""

    cluster: str
    #: When the end offsets were read, epoch ms.
    at_ms: int
    groups: tuple[GroupOffsets, ...]
    #: Partitions of every topic in the cluster's metadata (internal topics left out).
    partitions: Mapping[TopicPartition, PartitionMeta]
    ends: Mapping[TopicPartition, int]
    log_starts: Mapping[TopicPartition, int] = field(default_factory=dict)
    #: Admin API calls made in this round, by call: proof that sampling is batched.
    calls: Mapping[str, int] = field(default_factory=dict)
    errors: tuple[str, ...] = ()

    def leaders(self) -> dict[TopicPartition, int]:
        return {tp: meta.leader for tp, meta in self.partitions.items()}


@dataclass(frozen=True, slots=True)
class RewindEvidence:
    """What a group had committed just before and just after its offsets moved back: every
    partition's committed offset (None: no commit) in the two samples around the move."""

    cluster: str
    group: str
    #: The move that raised it.
    finding: OffsetFinding
    before_ms: int
    after_ms: int
    before: Mapping[TopicPartition, int | None]
    after: Mapping[TopicPartition, int | None]
    #: The group's commit records around the move, read from __consumer_offsets when the watcher
    #: first saw it (None: not read, or ``commit_log_error`` says why not).
    commit_log: CommitLog | None = None
    commit_log_error: str | None = None
    #: "watched" (seen in the watcher's samples), "after a restart" (found in __consumer_offsets for
    #: a time no watcher ran) or "evidence gone" (conveyor.ops.rewind_history).
    found: str = "watched"


def _committed_at(windows: Sequence[PartitionWindow], at_ms: int) -> dict[TopicPartition, int | None]:
    found: dict[TopicPartition, int | None] = {}
    for window in windows:
        at, committed = window.columns()[:2]
        for i, sample_ms in enumerate(at):
            if sample_ms == at_ms:
                found[(window.topic, window.partition)] = None if committed[i] == NO_OFFSET else int(committed[i])
    return found


def rewind_evidence(cluster: str, group: str, windows: Sequence[PartitionWindow],
                    findings: Iterable[OffsetFinding]) -> tuple[RewindEvidence, ...]:
    """Evidence for each move back among ``findings`` (one group's windows are sampled together,
    so every partition has a sample at the finding's two times)."""
    return tuple(RewindEvidence(cluster, group, f, f.from_ms, f.at_ms, _committed_at(windows, f.from_ms),
                                _committed_at(windows, f.at_ms))
                 for f in findings if f.kind in MOVED_BACK)


@dataclass(frozen=True, slots=True)
class GroupReport:
    cluster: str
    group: str
    state: str
    status: GroupStatus
    findings: GroupFindings
    #: (epoch ms, total lag in records) per sample, oldest first.
    history: tuple[tuple[int, int], ...]
    #: Why the latest offset fetch of this group failed, if it did.
    error: str | None = None
    #: The committed offsets around each move back in the window.
    evidence: tuple[RewindEvidence, ...] = ()
    #: Where the group's real position lives, for a reader's monitoring-only group (conveyor.positions).
    kept_in: str | None = None


class _Group:
    __slots__ = ("state", "windows", "history", "error", "kept_in")

    def __init__(self, history: int) -> None:
        self.state = ""
        self.kept_in: str | None = None
        self.windows: dict[TopicPartition, PartitionWindow] = {}
        self.history: deque[tuple[int, int]] = deque(maxlen=history)
        self.error: str | None = None


def excluded(group: str, patterns: Sequence[re.Pattern[str]]) -> bool:
    return any(p.fullmatch(group) for p in patterns)


def _no_commit(window: PartitionWindow) -> bool:
    return len(window) == window.size and max(window.columns().committed) == NO_OFFSET


class OffsetTracker:
    def __init__(self, cluster: str, window: int = 10, history: int = 120,
                 exclude_groups: Iterable[str] = ()) -> None:
        self.cluster = cluster
        self.window = window
        self.history = history
        self.exclude = [re.compile(p) for p in exclude_groups]
        self.groups: dict[str, _Group] = {}

    def topics(self) -> set[str]:
        """Topics some tracked group has committed to: the sampler asks their end offsets."""
        return {tp[0] for g in self.groups.values() for tp in g.windows}

    def push(self, snapshot: OffsetSnapshot) -> None:
        listed = {g.group: g for g in snapshot.groups if not excluded(g.group, self.exclude)}
        for gone in self.groups.keys() - listed.keys():
            del self.groups[gone]
        by_topic: dict[str, list[int]] = {}
        for topic, partition in snapshot.partitions:
            by_topic.setdefault(topic, []).append(partition)
        for name, offsets in listed.items():
            group = self.groups.setdefault(name, _Group(self.history))
            group.state, group.error = offsets.state, offsets.error
            group.kept_in = offsets.kept_in or group.kept_in
            if offsets.committed is None:
                continue  # the fetch failed: no sample, so the windows age instead of faking a loss
            committed = offsets.committed
            topics = {tp[0] for tp in committed} | {tp[0] for tp in group.windows}
            total = 0
            for topic in topics:
                partitions = by_topic.get(topic)
                if partitions is None:  # deleted topic
                    for tp in [tp for tp in group.windows if tp[0] == topic]:
                        del group.windows[tp]
                    continue
                for partition in partitions:
                    tp = (topic, partition)
                    end = snapshot.ends.get(tp)
                    if end is None:
                        continue  # no answer for this partition (no leader): its window ages
                    window = group.windows.get(tp)
                    if window is None:
                        window = group.windows[tp] = PartitionWindow(topic, partition, self.window)
                    offset = committed.get(tp)
                    window.add(snapshot.at_ms, offset, end, None, snapshot.log_starts.get(tp))
                    if offset is not None:
                        total += max(0, end - offset)
                    elif _no_commit(window):
                        del group.windows[tp]
            group.history.append((snapshot.at_ms, total))

    def evaluate(self, now_ms: int | None = None, policy: LagPolicy = DEFAULT_POLICY,
                 rewind_policy: RewindPolicy = DEFAULT_REWIND_POLICY,
                 schedules: Mapping[str, int] | None = None) -> tuple[GroupReport, ...]:
        """``schedules``: group name prefix -> the schedule (ms) the groups so named are read on."""
        reports = []
        for name in sorted(self.groups):
            group = self.groups[name]
            if not group.windows:
                continue  # never committed anything: nothing to judge yet
            windows = [group.windows[tp] for tp in sorted(group.windows)]
            findings = scan_group(name, windows, rewind_policy)
            schedule = next((ms for prefix, ms in (schedules or {}).items() if name.startswith(prefix)), None)
            judged = policy if schedule is None else replace(policy, schedule_ms=schedule)
            reports.append(GroupReport(self.cluster, name, group.state, evaluate_group(name, windows, judged, now_ms),
                                       findings, tuple(group.history), group.error,
                                       rewind_evidence(self.cluster, name, windows, findings.offsets), group.kept_in))
        return tuple(reports)
