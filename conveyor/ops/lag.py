"""Consumer lag evaluation: Burrow's window rules over sampled offsets. Pure: no Kafka, no clock.

A lag checker judges a window of offsets, never one value (docs/architecture.md, section 6). Per
partition a :class:`PartitionWindow` keeps the last few samples (10 by default) of the group's
committed offset and the partition's end offset; :func:`evaluate_partition` runs the rules over it
and :func:`evaluate_group` takes the worst partition. Each rule is a small named function over plain
sequences of ints, so it is tested from a table (like Burrow's
``core/internal/evaluator/caching.go``).

Where we part from Burrow, and why:

- REWIND is reported whenever the committed offset went backwards in the window, even if the
  consumer was caught up at some point. Burrow hides a rewind behind an earlier zero-lag sample, and
  silent rewinds are exactly what the field's offset incidents were (docs/architecture.md, section
  6).
- Missing data is an error, not OK: no samples, stale samples, a committed offset that disappeared
  (offset fetches returning none made mirror consumers reset), an offset past the end or below the
  log start. Each means a reset by ``auto.offset.reset`` is coming or the evaluator is blind.
- Trend rules need ``min_samples`` samples; one sample says nothing about a trend.
- Optional thresholds (records, seconds behind) turn an otherwise OK partition into WARN.
- Commit timestamps are optional because Kafka's offset fetch does not return them. Without them
  a commit's time is taken as the first sample that showed its offset, so a consumer re-committing
  the same offset looks stopped rather than stalled; with them the two are told apart.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum
from operator import gt
from typing import NamedTuple

WINDOW_SIZE = 10
#: Stored for "no committed offset" and "unknown"; Kafka offsets and timestamps are never negative.
NO_OFFSET = -1

# One int64 array per partition, samples interleaved: a list of sample objects would cost about
# three times the memory at 200,000 partitions, and strided slices of an array are C-speed.
_FIELDS = 5
_AT, _COMMITTED, _END, _COMMIT_MS, _LOG_START = range(_FIELDS)


class Status(IntEnum):
    """The value is the severity, so ``max()`` is the worst.

    WARN still makes progress; STALL makes none but the consumer is alive; STOP means nobody is
    committing; REWIND means records were already delivered twice; ERR means a reset that loses or
    re-reads data is coming, or the evaluator cannot see the partition at all.
    """

    OK = 0
    WARN = 1
    STALL = 2
    STOP = 3
    REWIND = 4
    ERR = 5


class Reason(str, Enum):
    CAUGHT_UP = "caught up"
    PROGRESSING = "progressing"
    FEW_SAMPLES = "too few samples"
    EMPTY_PARTITION = "empty partition"
    LAG_NOT_DECREASING = "lag not decreasing"
    LAG_OVER_RECORDS = "lag over records threshold"
    LAG_OVER_SECONDS = "lag over seconds threshold"
    OFFSET_NOT_MOVING = "offset not moving"
    COMMITS_STOPPED = "commits stopped"
    RUNS_MISSED = "scheduled runs missed"
    BETWEEN_RUNS = "between scheduled runs"
    OFFSET_WENT_BACK = "offset went back"
    NO_SAMPLES = "no samples"
    STALE_SAMPLES = "stale samples"
    NO_COMMIT = "no committed offset"
    COMMIT_LOST = "committed offset lost"
    BEYOND_END = "offset beyond end"
    BEHIND_LOG_START = "offset behind log start"


class LagTimeMethod(str, Enum):
    CAUGHT_UP = "caught up"
    INTERPOLATED = "interpolated"
    EXTRAPOLATED = "extrapolated"
    AT_LEAST = "at least"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at a partition. Times are epoch milliseconds, like Kafka's own timestamps.

    The sampler must read the committed offset before the end offset: then a healthy group always
    has ``committed <= end`` and anything else is a real error. ``committed`` is None when the
    group has no commit (librdkafka's OFFSET_INVALID).
    """

    at_ms: int
    committed: int | None
    end: int
    commit_ms: int | None = None
    log_start: int | None = None


@dataclass(frozen=True, slots=True)
class LagPolicy:
    #: Trend rules (STALL, STOP, WARN) need this many samples with a commit.
    min_samples: int = 2
    #: WARN when the lag is above this many records, even while it shrinks.
    max_lag_records: int | None = None
    #: WARN when the consumer is more than this many seconds behind.
    max_lag_seconds: float | None = None
    #: ERR when the latest sample is older than this at evaluation time: the sampler is blind.
    max_sample_age_ms: int | None = None
    #: A reader that runs on this schedule (the lake's runs) rather than all the time: between runs
    #: its offset stands still while the lag grows, by design. It is STOP only when its offset has
    #: stood still for two runs' worth (it missed two runs), and the trend rules do not apply.
    schedule_ms: int | None = None

    def __post_init__(self) -> None:
        if self.min_samples < 2:
            raise ValueError(f"min_samples must be at least 2 (got {self.min_samples})")
        for name in ("max_lag_records", "max_lag_seconds", "max_sample_age_ms", "schedule_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative (got {value})")


DEFAULT_POLICY = LagPolicy()


class Columns(NamedTuple):
    at_ms: array[int]
    committed: array[int]
    end: array[int]
    commit_ms: array[int]
    log_start: array[int]


class PartitionWindow:
    """The last ``size`` samples of one partition for one group, oldest first."""

    __slots__ = ("topic", "partition", "size", "_buf", "held_since_ms")

    def __init__(self, topic: str, partition: int, size: int = WINDOW_SIZE) -> None:
        if size < 1:
            raise ValueError(f"window size must be at least 1 (got {size})")
        self.topic = topic
        self.partition = partition
        self.size = size
        self._buf = array("q")
        #: When the current committed offset was first seen, kept when that sample leaves the
        #: window: how long a scheduled reader has not moved can span many windows.
        self.held_since_ms: int | None = None

    @classmethod
    def of(cls, topic: str, partition: int, samples: Iterable[Sample], size: int = WINDOW_SIZE) -> PartitionWindow:
        window = cls(topic, partition, size)
        for sample in samples:
            window.push(sample)
        return window

    def push(self, sample: Sample) -> None:
        self.add(sample.at_ms, sample.committed, sample.end, sample.commit_ms, sample.log_start)

    def add(self, at_ms: int, committed: int | None, end: int,
            commit_ms: int | None = None, log_start: int | None = None) -> None:
        """Append a sample (the fast path: no Sample object), dropping the oldest when full."""
        buf = self._buf
        if buf and at_ms <= buf[-_FIELDS]:
            raise ValueError(f"{self.topic}[{self.partition}]: sample at {at_ms} ms is not after the last one "
                             f"at {buf[-_FIELDS]} ms; samples must arrive in time order")
        for name, value in (("end", end), ("committed", committed), ("commit_ms", commit_ms), ("log_start", log_start)):
            if value is not None and value < 0:
                raise ValueError(f"{self.topic}[{self.partition}]: {name} must not be negative (got {value}); "
                                 "pass None for a missing value")
        if committed is None:
            self.held_since_ms = None
        elif self.held_since_ms is None or not buf or buf[-_FIELDS + _COMMITTED] != committed:
            self.held_since_ms = at_ms
        if len(buf) == self.size * _FIELDS:
            del buf[:_FIELDS]
        buf.extend((at_ms, NO_OFFSET if committed is None else committed, end,
                    NO_OFFSET if commit_ms is None else commit_ms, NO_OFFSET if log_start is None else log_start))

    def __len__(self) -> int:
        return len(self._buf) // _FIELDS

    def columns(self) -> Columns:
        """Every field of the window as its own array, oldest first; NO_OFFSET marks a missing value."""
        b = self._buf
        return Columns(b[_AT::_FIELDS], b[_COMMITTED::_FIELDS], b[_END::_FIELDS], b[_COMMIT_MS::_FIELDS],
                       b[_LOG_START::_FIELDS])

    def samples(self) -> list[Sample]:
        def opt(value: int) -> int | None:
            return None if value == NO_OFFSET else value

        b = self._buf
        return [Sample(b[i], opt(b[i + 1]), b[i + 2], opt(b[i + 3]), opt(b[i + 4])) for i in range(0, len(b), _FIELDS)]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStatus:
    topic: str
    partition: int
    status: Status
    reason: Reason
    #: Evaluation time, epoch ms (None only when the window was empty).
    at_ms: int | None = None
    #: The latest committed offset (for COMMIT_LOST: the one that disappeared; None when there was none).
    committed: int | None = None
    end: int | None = None
    log_start: int | None = None
    #: end - committed at the latest sample; None when that sample has no commit.
    lag: int | None = None
    seconds_behind: float | None = None
    lag_time: LagTimeMethod = LagTimeMethod.UNKNOWN
    #: When the condition began: the last commit (STOP), the first backward move (REWIND), the
    #: disappearance of the commit (COMMIT_LOST).
    since_ms: int | None = None
    #: Share of the window's samples that carry a commit (Burrow's "complete").
    complete: float = 0.0

    @property
    def message(self) -> str:
        behind = f"lag {self.lag:,} record{'' if self.lag == 1 else 's'}" if self.lag is not None else ""
        if self.seconds_behind is not None:
            qualifier = "at least" if self.lag_time is LagTimeMethod.AT_LEAST else "about"
            behind += f", {qualifier} {self.seconds_behind:,.1f} s behind"
        ago = f"{((self.at_ms or 0) - self.since_ms) / 1000:,.1f} s" if self.since_ms is not None else ""
        text = _TEXT[self.reason].format(behind=behind, ago=ago, c=self.committed, e=self.end, s=self.log_start)
        return f"{self.topic}[{self.partition}] {self.status.name}: {text}"


_RESET = "the consumer will reset by auto.offset.reset (earliest re-reads, latest skips)"
_TEXT = {
    Reason.CAUGHT_UP: "caught up",
    Reason.PROGRESSING: "{behind}, shrinking or caught up within the window",
    Reason.FEW_SAMPLES: "{behind}; too few samples yet to judge the trend",
    Reason.EMPTY_PARTITION: "no committed offset, but nothing to read either",
    Reason.LAG_NOT_DECREASING: "{behind}, not shrinking across the window: the consumer is slower than the "
                               "producers; add consumers (up to the partition count) or speed up its processing",
    Reason.LAG_OVER_RECORDS: "{behind}, above the records threshold",
    Reason.LAG_OVER_SECONDS: "{behind}, above the seconds threshold",
    Reason.OFFSET_NOT_MOVING: "{behind}; the consumer keeps committing offset {c:,}: it is alive but stuck, "
                              "look in its logs for a record it cannot process",
    Reason.COMMITS_STOPPED: "{behind}; no new committed offset for {ago}, longer than the window spans: the "
                            "consumer stopped or lost the partition; check the group's members and assignment",
    Reason.RUNS_MISSED: "{behind}; the offset has not moved for {ago}, two runs of its schedule: the scheduled "
                        "reader missed its runs; check its timer, CronJob or `--every` process and its last run's log",
    Reason.BETWEEN_RUNS: "{behind}, read on a schedule: the next run takes it",
    Reason.OFFSET_WENT_BACK: "the committed offset went backwards {ago} ago (now {c:,}): records are read "
                             "again; the rewind findings give the amount and the cause",
    Reason.NO_SAMPLES: "no samples: the sampler has no data for this partition",
    Reason.STALE_SAMPLES: "the latest sample is {ago} old: the sampler is not keeping up or cannot reach "
                          "the cluster",
    Reason.NO_COMMIT: "the group has no committed offset while the partition holds records; " + _RESET,
    Reason.COMMIT_LOST: "the committed offset (last {c:,}) disappeared {ago} ago; " + _RESET + ". Check the "
                        "compaction of __consumer_offsets and the coordinator's offset cache loading",
    Reason.BEYOND_END: "committed offset {c:,} is beyond the end offset {e:,}: the log was truncated (unclean "
                       "leader election?) or the topic recreated; " + _RESET,
    Reason.BEHIND_LOG_START: "committed offset {c:,} is below the log start offset {s:,}: retention deleted "
                             "records the group never read; " + _RESET,
}


# --- Rules: each takes plain sequences of the samples that carry a commit, oldest first. ---

def lag_always_nonzero(lags: Sequence[int]) -> bool:
    """Burrow rule 1: a window in which the consumer was caught up once is not lagging."""
    return min(lags) > 0


def offsets_rewind(committed: Sequence[int]) -> bool:
    """Rule 2: the committed offset decreased from one sample to the next."""
    return any(map(gt, committed, committed[1:]))  # map over two sequences: the pairs compared in C


def offsets_stopped(first_commit_ms: int, last_commit_ms: int, now_ms: int) -> bool:
    """Rule 3: the time since the last commit is greater than the time the window's commits span."""
    return now_ms - last_commit_ms > last_commit_ms - first_commit_ms


def offsets_stalled(committed: Sequence[int]) -> bool:
    """Rule 4: the committed offset never moved across the window (at least two samples)."""
    return len(committed) >= 2 and min(committed) == max(committed)


def lag_not_decreasing(lags: Sequence[int]) -> bool:
    """Rule 5: the lag never went down from one sample to the next (at least two samples)."""
    return len(lags) >= 2 and not any(map(gt, lags, lags[1:]))


def recent_lag_zero(last_committed: int, ends_since: Sequence[int]) -> bool:
    """Burrow's guard against STOP: since the consumer reached its current offset, the end was at or
    below it at some sample, so it was caught up recently and has simply had nothing new to commit.
    ``ends_since`` are the end offsets of the samples that show the current committed offset."""
    return min(ends_since) <= last_committed


def current_run(committed: Sequence[int]) -> int:
    """Index of the first of the trailing samples that show the current committed offset."""
    i = len(committed) - 1
    while i > 0 and committed[i - 1] == committed[-1]:
        i -= 1
    return i


def commit_span(at_ms: Sequence[int], commit_ms: Sequence[int], run: int) -> tuple[int, int]:
    """When the window's first and last commits were made: the commits' own timestamps when known,
    else the first sample that showed the offset (the commit happened in the interval before it)."""
    first = commit_ms[0] if commit_ms[0] >= 0 else at_ms[0]
    last = commit_ms[-1] if commit_ms[-1] >= 0 else at_ms[run]
    return first, last


def seconds_behind(committed: int, at_ms: Sequence[int], ends: Sequence[int],
                   now_ms: int) -> tuple[float | None, LagTimeMethod]:
    """How long ago the partition's end was where the consumer is now.

    The end offsets of the window form a table of (time, end offset). Going back from the newest,
    find the last sample whose end was at or below the committed offset; the end passed the
    committed offset between that sample and the next, and linear interpolation between the two
    gives the time it did (the method of kafka-lag-exporter). When the committed offset is older
    than the whole window, extrapolate back from the oldest sample with the window's produce rate.
    When nothing was produced in the window, the consumer is at least as far behind as the window
    is old. A single sample with lag gives no rate and no answer.
    """
    if committed >= ends[-1]:
        return 0.0, LagTimeMethod.CAUGHT_UP
    for i in range(len(ends) - 2, -1, -1):
        if ends[i] <= committed:
            e0, e1, t0, t1 = ends[i], ends[i + 1], at_ms[i], at_ms[i + 1]
            passed_at = t0 + (committed - e0) / (e1 - e0) * (t1 - t0)
            return (now_ms - passed_at) / 1000, LagTimeMethod.INTERPOLATED
    if len(ends) < 2:
        return None, LagTimeMethod.UNKNOWN
    produced, span = ends[-1] - ends[0], at_ms[-1] - at_ms[0]
    if produced > 0:
        passed_at = at_ms[0] - (ends[0] - committed) * span / produced
        return (now_ms - passed_at) / 1000, LagTimeMethod.EXTRAPOLATED
    return (now_ms - at_ms[0]) / 1000, LagTimeMethod.AT_LEAST


def first_backward(at_ms: Sequence[int], committed: Sequence[int]) -> int | None:
    """Time of the first sample whose committed offset is below the one before, if any."""
    return next((at_ms[i] for i in range(1, len(committed)) if committed[i] < committed[i - 1]), None)


# --- Evaluation ---

def evaluate_partition(window: PartitionWindow, policy: LagPolicy = DEFAULT_POLICY,
                       now_ms: int | None = None) -> PartitionStatus:
    """Status of one partition. ``now_ms`` defaults to the latest sample's time."""
    topic, partition = window.topic, window.partition
    if not len(window):
        return PartitionStatus(topic=topic, partition=partition, status=Status.ERR, reason=Reason.NO_SAMPLES,
                               at_ms=now_ms)
    at, committed, ends, commit_ms, log_starts = window.columns()
    last_at, end = at[-1], ends[-1]
    now = last_at if now_ms is None else now_ms
    if now < last_at:
        raise ValueError(f"now_ms {now} is before the latest sample at {last_at}")
    log_start = log_starts[-1] if log_starts[-1] != NO_OFFSET else None
    if policy.max_sample_age_ms is not None and now - last_at > policy.max_sample_age_ms:
        return PartitionStatus(topic=topic, partition=partition, status=Status.ERR, reason=Reason.STALE_SAMPLES,
                               at_ms=now, end=end, log_start=log_start, since_ms=last_at)
    complete = 1.0
    if NO_OFFSET in committed:
        n = len(at)
        valid = [i for i in range(n) if committed[i] != NO_OFFSET]
        if not valid:
            if end > (log_start or 0):
                return PartitionStatus(topic=topic, partition=partition, status=Status.ERR, reason=Reason.NO_COMMIT,
                                       at_ms=now, end=end, log_start=log_start)
            return PartitionStatus(topic=topic, partition=partition, status=Status.OK, reason=Reason.EMPTY_PARTITION,
                                   at_ms=now, end=end, log_start=log_start)
        first, complete = valid[0], len(valid) / n
        if len(valid) != n - first:  # a gap or a missing latest commit
            lost = committed.index(NO_OFFSET, first)
            return PartitionStatus(topic=topic, partition=partition, status=Status.ERR, reason=Reason.COMMIT_LOST,
                                   at_ms=now, committed=committed[lost - 1], end=end, log_start=log_start,
                                   since_ms=at[lost], complete=complete)
        # The group started committing inside the window: judge only the part with commits.
        at, committed, ends, commit_ms = at[first:], committed[first:], ends[first:], commit_ms[first:]

    current = committed[-1]
    lag = end - current
    if current > end or (log_start is not None and current < log_start):
        reason = Reason.BEYOND_END if current > end else Reason.BEHIND_LOG_START
        return PartitionStatus(topic=topic, partition=partition, status=Status.ERR, reason=reason, at_ms=now,
                               committed=current, end=end, log_start=log_start, lag=lag, complete=complete)
    behind, method = seconds_behind(current, at, ends, now)

    def result(status: Status, reason: Reason, since_ms: int | None = None) -> PartitionStatus:
        return PartitionStatus(topic=topic, partition=partition, status=status, reason=reason, at_ms=now,
                               committed=current, end=end, log_start=log_start, lag=lag, seconds_behind=behind,
                               lag_time=method, since_ms=since_ms, complete=complete)

    if offsets_rewind(committed):
        return result(Status.REWIND, Reason.OFFSET_WENT_BACK, first_backward(at, committed))
    enough = len(committed) >= policy.min_samples
    if policy.schedule_ms is not None and lag > 0:
        held = window.held_since_ms if window.held_since_ms is not None else at[0]
        if now - held > 2 * policy.schedule_ms:
            return result(Status.STOP, Reason.RUNS_MISSED, held)
        return result(Status.OK, Reason.BETWEEN_RUNS)
    if lag > 0 and enough:
        run = current_run(committed)
        first_commit, last_commit = commit_span(at, commit_ms, run)
        if offsets_stopped(first_commit, last_commit, now) and not recent_lag_zero(current, ends[run:]):
            return result(Status.STOP, Reason.COMMITS_STOPPED, last_commit)
        lags = [e - c for e, c in zip(ends, committed)]
        if lag_always_nonzero(lags):
            if offsets_stalled(committed):
                return result(Status.STALL, Reason.OFFSET_NOT_MOVING)
            if lag_not_decreasing(lags):
                return result(Status.WARN, Reason.LAG_NOT_DECREASING)
    if policy.max_lag_records is not None and lag > policy.max_lag_records:
        return result(Status.WARN, Reason.LAG_OVER_RECORDS)
    if policy.max_lag_seconds is not None and behind is not None and behind > policy.max_lag_seconds:
        return result(Status.WARN, Reason.LAG_OVER_SECONDS)
    return result(Status.OK, Reason.CAUGHT_UP if lag == 0 else Reason.PROGRESSING if enough else Reason.FEW_SAMPLES)


@dataclass(frozen=True, slots=True)
class GroupStatus:
    group: str
    #: The worst partition status; ERR when no partition is tracked (the evaluator is blind).
    status: Status
    partitions: tuple[PartitionStatus, ...]
    total_lag: int
    #: The partition with the largest lag, None when no partition has a known lag.
    max_lag: PartitionStatus | None
    #: Share of partitions whose window carries a commit in every sample.
    complete: float

    @property
    def problems(self) -> tuple[PartitionStatus, ...]:
        """Partitions that are not OK, worst first."""
        bad = [p for p in self.partitions if p.status is not Status.OK]
        bad.sort(key=lambda p: (-p.status, p.topic, p.partition))
        return tuple(bad)

    @property
    def message(self) -> str:
        if not self.partitions:
            return f"group {self.group} ERR: no partitions tracked, so nothing can be judged"
        head = f"group {self.group} {self.status.name}: total lag {self.total_lag:,} records"
        problems = self.problems
        if not problems:
            return head
        return f"{head}; {len(problems)} of {len(self.partitions)} partitions need a look, worst: {problems[0].message}"


def evaluate_group(group: str, windows: Iterable[PartitionWindow], policy: LagPolicy = DEFAULT_POLICY,
                   now_ms: int | None = None) -> GroupStatus:
    """Evaluate every partition of a group; the group's status is its worst partition's."""
    results = tuple(evaluate_partition(w, policy, now_ms) for w in windows)
    if not results:
        return GroupStatus(group, Status.ERR, (), 0, None, 0.0)
    known = [r for r in results if r.lag is not None]
    biggest = max(known, key=lambda r: r.lag or 0, default=None)
    complete = sum(r.complete == 1.0 for r in results) / len(results)
    return GroupStatus(group, max(r.status for r in results), results, sum(r.lag or 0 for r in known), biggest,
                       complete)
