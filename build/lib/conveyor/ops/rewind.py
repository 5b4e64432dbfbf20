"""Rewinds, resets and read amplification, found in lag windows. Pure: no Kafka, no clock.

The field's offset incidents were all silent (docs/architecture.md, sections 4 and 6): an
out-of-range fetch resets a consumer by ``auto.offset.reset`` (earliest re-reads, latest skips), an
offset manager handed back a month-old offset after a rebalance, "no offset" answers made mirror
consumers reset, and a batch job that lost its offsets re-read its topics until read load grew 4x.
Each function here turns one of those patterns into a typed finding whose message says what went
wrong and where to look. A finding stays visible while its samples are in the window; it is
hashable, so a caller that evaluates every interval reports each one once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import Enum
from itertools import pairwise
from statistics import median

from conveyor.config.policies import RewindPolicy
from conveyor.ops.lag import NO_OFFSET, PartitionWindow


class FindingKind(str, Enum):
    REWIND = "rewind"
    RESET_EARLIEST = "reset to earliest"
    RESET_LATEST = "reset to latest"
    BEHIND_LOG_START = "behind log start"


#: The kinds where the committed offset moved back: records are delivered again.
MOVED_BACK = frozenset({FindingKind.REWIND, FindingKind.RESET_EARLIEST})


DEFAULT_REWIND_POLICY = RewindPolicy()


@dataclass(frozen=True, slots=True)
class OffsetFinding:
    kind: FindingKind
    group: str
    topic: str
    partition: int
    #: Time of the first sample that showed it, epoch ms.
    at_ms: int
    #: The committed offset before and after the move; for BEHIND_LOG_START the committed offset
    #: and the log start offset above it.
    from_offset: int
    to_offset: int
    #: Records read again (REWIND, RESET_EARLIEST), skipped (RESET_LATEST, an upper bound) or
    #: deleted before the group read them (BEHIND_LOG_START).
    records: int
    #: The group had no committed offset at all between the two samples.
    after_lost_commit: bool = False
    #: Time of the sample before the move (REWIND, RESET_*), epoch ms; 0 when there is none.
    from_ms: int = 0

    @property
    def loses_data(self) -> bool:
        return self.kind in (FindingKind.RESET_LATEST, FindingKind.BEHIND_LOG_START)

    @property
    def message(self) -> str:
        when = datetime.fromtimestamp(self.at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        head = f"group {self.group} on {self.topic}[{self.partition}] at {when}: "
        text = _FINDING_TEXT[self.kind].format(f=self.from_offset, t=self.to_offset, n=self.records)
        if self.after_lost_commit:
            text += (" It followed a moment with no committed offset at all (offset fetches answered none):"
                     " check the compaction of __consumer_offsets and the coordinator's offset loading.")
        return head + text


_FINDING_TEXT = {
    FindingKind.REWIND: (
        "the committed offset moved back {n:,} records ({f:,} -> {t:,}); those records are delivered again "
        "(duplicates). Find who rewound it: an offsets reset, a consumer restoring offsets from its own "
        "store, or the coordinator returning an old offset after a rebalance."),
    FindingKind.RESET_EARLIEST: (
        "the committed offset dropped to the log start ({f:,} -> {t:,}, {n:,} records back): the consumer "
        "reset to the earliest offset and re-reads everything retained (duplicates). An out-of-range fetch "
        "or a lost commit with auto.offset.reset=earliest does this; look in the consumer's logs for "
        "'offset out of range' and at why its commit was lost."),
    FindingKind.RESET_LATEST: (
        "the committed offset jumped to the end ({f:,} -> {t:,}): up to {n:,} records were skipped and never "
        "processed (data loss). An out-of-range fetch or a lost commit with auto.offset.reset=latest does "
        "this, or a manual reset to latest; re-process offsets {f:,}..{t:,} while retention still has them."),
    FindingKind.BEHIND_LOG_START: (
        "the committed offset {f:,} is below the log start offset {t:,}: retention deleted {n:,} records the "
        "group never read (data loss). The group is slower than retention: raise the topic's retention "
        "or the group's throughput."),
}


# --- Rules over plain numbers ---

def reset_slack(moved: int, policy: RewindPolicy) -> float:
    """How near the log start or the end a reset's landing point may be and still count as "at" it."""
    return max(policy.reset_slack_records, policy.reset_slack_ratio * moved)


def is_reset_to_earliest(to_offset: int, log_start: int, moved: int, policy: RewindPolicy) -> bool:
    """A backward move that landed at the partition's log start (unknown log start: never)."""
    return log_start != NO_OFFSET and to_offset - log_start <= reset_slack(moved, policy)


def is_at_end(to_offset: int, end: int, moved: int, policy: RewindPolicy) -> bool:
    """A forward move that landed at the partition's end offset."""
    return end - to_offset <= reset_slack(moved, policy)


def is_skip(backlog: int, rate: float, usual_rate: float | None, after_lost_commit: bool,
            was_out_of_range: bool, policy: RewindPolicy) -> bool:
    """Is a forward move that landed at the end a reset to latest rather than reading?

    ``backlog`` is what was unread at the sample before the move. A lost commit or a position
    behind the log start forces a reset, so then any jump over a backlog is one. Otherwise the
    backlog must be large and passed far faster than the group's usual pace in the window. A
    consumer at the tail that follows a burst of writes has no backlog, so it never counts.
    """
    if backlog <= 0:
        return False
    if after_lost_commit or was_out_of_range:
        return True
    if usual_rate is None or backlog < policy.min_skip_records:
        return False
    return rate > policy.skip_rate_factor * usual_rate


def amplification(read_per_s: float, written_per_s: float) -> float:
    """Read rate over write rate; infinite when a topic that gets no writes is read."""
    if written_per_s > 0:
        return read_per_s / written_per_s
    return math.inf if read_per_s > 0 else 0.0


# --- Offset findings ---

def _steps(committed: Sequence[int]) -> list[tuple[int, int, bool]]:
    """(previous, current, lost commit between) for consecutive samples that carry a commit."""
    if NO_OFFSET not in committed:
        return [(i - 1, i, False) for i in range(1, len(committed))]
    known = [i for i, offset in enumerate(committed) if offset != NO_OFFSET]
    return [(j, i, i - j > 1) for j, i in pairwise(known)]


def offset_findings(group: str, window: PartitionWindow,
                    policy: RewindPolicy = DEFAULT_REWIND_POLICY) -> tuple[OffsetFinding, ...]:
    """Every rewind, reset and position behind the log start in one partition's window, oldest first."""
    at, committed, ends, _, log_starts = window.columns()
    topic, partition = window.topic, window.partition
    findings: list[OffsetFinding] = []
    for i, offset in enumerate(committed):
        start = log_starts[i]
        if offset != NO_OFFSET and start != NO_OFFSET and offset < start:
            findings.append(OffsetFinding(FindingKind.BEHIND_LOG_START, group, topic, partition, at[i],
                                          offset, start, start - offset))
            break
    steps = _steps(committed)
    rates: list[float] | None = None
    for j, i, lost in steps:
        before, after = committed[j], committed[i]
        if after < before:
            kind = (FindingKind.RESET_EARLIEST if is_reset_to_earliest(after, log_starts[i], before - after, policy)
                    else FindingKind.REWIND)
            findings.append(OffsetFinding(kind, group, topic, partition, at[i], before, after, before - after, lost,
                                          at[j]))
            continue
        backlog = ends[j] - before
        if after == before or backlog <= 0 or not is_at_end(after, ends[i], after - before, policy):
            continue
        if rates is None:  # the group's pace, needed only for the rare jump over a backlog to the end
            rates = [(committed[b] - committed[a]) / (at[b] - at[a]) for a, b, _ in steps
                     if committed[b] > committed[a]]
        rate = (after - before) / (at[i] - at[j])
        others = list(rates)
        others.remove(rate)
        out_of_range = log_starts[j] != NO_OFFSET and before < log_starts[j]
        if is_skip(backlog, rate, median(others) if others else None, lost, out_of_range, policy):
            findings.append(OffsetFinding(FindingKind.RESET_LATEST, group, topic, partition, at[i],
                                          before, after, after - before, lost, at[j]))
    findings.sort(key=lambda f: f.at_ms)
    return tuple(findings)


# --- Read amplification ---

class AmplificationCause(str, Enum):
    REREAD = "re-reading after rewinds"
    BACKLOG = "draining a backlog"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Traffic:
    """Records a group read and its topic got, over ``span_ms`` of one window."""

    read: int
    written: int
    #: Records the committed offset moved back over: they are read again.
    reread: int
    #: How much the lag shrank.
    drained: int
    span_ms: int


def window_traffic(window: PartitionWindow, findings: Sequence[OffsetFinding] = ()) -> Traffic | None:
    """What the group read in the window: its forward moves, less the skips among ``findings`` (the
    window's offset findings). None when fewer than two samples carry a commit."""
    at, committed, ends, _, _ = window.columns()
    steps = _steps(committed)
    if not steps:
        return None
    first, last = steps[0][0], steps[-1][1]
    moves = [committed[i] - committed[j] for j, i, _ in steps]
    skipped = sum(f.records for f in findings if f.kind is FindingKind.RESET_LATEST)
    lag_first, lag_last = ends[first] - committed[first], ends[last] - committed[last]
    return Traffic(read=sum(m for m in moves if m > 0) - skipped, written=ends[last] - ends[first],
                   reread=-sum(m for m in moves if m < 0), drained=max(0, lag_first - lag_last),
                   span_ms=at[last] - at[first])


@dataclass(frozen=True, slots=True)
class ReadAmplification:
    group: str
    topic: str
    #: read_per_s / written_per_s (infinite when nothing was written).
    ratio: float
    read_per_s: float
    written_per_s: float
    #: "records" or "bytes": both rates are in it.
    unit: str
    cause: AmplificationCause
    #: Records read again and backlog drained, when the finding came from windows.
    reread: int | None = None
    drained: int | None = None

    @property
    def message(self) -> str:
        rates = f"{self.read_per_s:,.1f} {self.unit}/s read"
        if self.written_per_s > 0:
            head = (f"group {self.group} reads {self.topic} {self.ratio:.1f}x as fast as it is written "
                    f"({rates} vs {self.written_per_s:,.1f} written)")
        else:
            head = f"group {self.group} reads {self.topic} ({rates}) while nothing is written to it"
        if self.cause is AmplificationCause.REREAD:
            return (f"{head}; {self.reread:,} records were read again after its committed offsets moved back. "
                    "Offsets are being lost or overwritten: check where the group stores them (one offsets "
                    "folder shared by several jobs caused the 4x read incident), its auto.offset.reset and "
                    "its rebalances; the rewind findings name the partitions.")
        if self.cause is AmplificationCause.BACKLOG:
            return (f"{head}; it is draining a backlog ({self.drained:,} records in the window). That is "
                    "expected after downtime, but the reads come from disk and evict the page cache for "
                    "everyone: throttle the group if producers or tail readers slow down.")
        return (f"{head}. Look for committed offsets moving back (rewind findings), lost or shared offset "
                "storage and auto.offset.reset; a group catching up a backlog also reads faster than "
                "the topic is written.")


def find_read_amplification(group: str, topic: str, read_per_s: float, written_per_s: float,
                            unit: str = "records", policy: RewindPolicy = DEFAULT_REWIND_POLICY,
                            ) -> ReadAmplification | None:
    """A finding when ``group`` reads ``topic`` at least ``amplification_threshold`` times as fast as
    it is written; the rates may come from anywhere (broker byte-rate metrics, offset deltas)."""
    ratio = amplification(read_per_s, written_per_s)
    if read_per_s < policy.min_read_per_s or ratio < policy.amplification_threshold:
        return None
    return ReadAmplification(group, topic, ratio, read_per_s, written_per_s, unit, AmplificationCause.UNKNOWN)


def amplification_cause(reread: int, drained: int) -> AmplificationCause:
    """Which of the two explains the extra reads: records read again, or backlog worked off."""
    return AmplificationCause.REREAD if reread > 0 and reread >= drained else AmplificationCause.BACKLOG


def topic_amplification(group: str, topic: str, traffics: Sequence[Traffic],
                        policy: RewindPolicy = DEFAULT_REWIND_POLICY) -> ReadAmplification | None:
    """Read amplification of one topic from its partitions' traffic, record rates summed."""
    read_per_s = sum(t.read * 1000 / t.span_ms for t in traffics)
    written_per_s = sum(t.written * 1000 / t.span_ms for t in traffics)
    found = find_read_amplification(group, topic, read_per_s, written_per_s, "records", policy)
    if found is None:
        return None
    reread, drained = sum(t.reread for t in traffics), sum(t.drained for t in traffics)
    return replace(found, cause=amplification_cause(reread, drained), reread=reread, drained=drained)


@dataclass(frozen=True, slots=True)
class GroupFindings:
    offsets: tuple[OffsetFinding, ...]
    amplification: tuple[ReadAmplification, ...]


def scan_group(group: str, windows: Iterable[PartitionWindow],
               policy: RewindPolicy = DEFAULT_REWIND_POLICY) -> GroupFindings:
    """Offset findings of every partition, and read amplification per topic, in one pass."""
    offsets: list[OffsetFinding] = []
    per_topic: dict[str, list[Traffic]] = {}
    for window in windows:
        found = offset_findings(group, window, policy)
        offsets.extend(found)
        traffic = window_traffic(window, found)
        if traffic is not None:
            per_topic.setdefault(window.topic, []).append(traffic)
    amplified = (topic_amplification(group, topic, traffics, policy) for topic, traffics in sorted(per_topic.items()))
    return GroupFindings(tuple(offsets), tuple(f for f in amplified if f is not None))
