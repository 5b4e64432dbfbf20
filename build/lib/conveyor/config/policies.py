"""The thresholds of the ops watcher's judging rules, with their defaults.

Typed settings rather than rules: the ``ops:`` section of platform.yaml exposes them (its defaults
are these), and the rules in conveyor.ops.health, conveyor.ops.offset_manager and
conveyor.ops.rewind take them as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    p99_warn_ms: float = 1_000.0
    p99_alarm_ms: float = 10_000.0
    skew_warn: float = 1.5
    #: Mean per broker below which skew is not judged: a few bytes or leaders say nothing.
    skew_min_bytes: float = 1_048_576.0
    skew_min_count: float = 3.0
    #: Follower lag must stay above zero across this many samples to count.
    min_samples: int = 2

    def __post_init__(self) -> None:
        if self.p99_warn_ms > self.p99_alarm_ms:
            raise ValueError("p99_warn_ms must not be above p99_alarm_ms")
        if self.skew_warn <= 1 or self.min_samples < 1:
            raise ValueError("skew_warn must be above 1 and min_samples at least 1")


@dataclass(frozen=True, slots=True)
class OffsetManagerPolicy:
    #: The cleaner compacts a log once its dirty ratio passes min.cleanable.dirty.ratio (0.5 for
    #: __consumer_offsets): a ratio that stays well above it means compaction is not happening.
    dirty_percent_warn: float = 80.0
    #: Samples in a row the dirty ratio must stay above the threshold.
    dirty_samples: int = 3
    #: The cleaner looks for work every log.cleaner.backoff.ms (15 s): far longer means it is dead.
    cleaner_idle_alarm_ms: float = 15 * 60 * 1000.0
    coordinator_load_warn_ms: float = 10_000.0

    def __post_init__(self) -> None:
        if not 0 < self.dirty_percent_warn <= 100 or self.dirty_samples < 1:
            raise ValueError("dirty_percent_warn must be in (0, 100] and dirty_samples at least 1")
        if self.cleaner_idle_alarm_ms <= 0 or self.coordinator_load_warn_ms <= 0:
            raise ValueError("cleaner_idle_alarm_ms and coordinator_load_warn_ms must be above 0")


@dataclass(frozen=True, slots=True)
class RewindPolicy:
    #: A reset lands at the log start or at the end, then the consumer reads on before the next
    #: sample: within this many records, or this share of the distance jumped, still counts as "at".
    reset_slack_records: int = 0
    reset_slack_ratio: float = 0.01
    #: With no other sign (a lost commit, a position behind the log start), a jump to the end is a
    #: skip only when the backlog it passed is this large and it moved this many times faster than
    #: the group's other moves in the window.
    min_skip_records: int = 1_000
    skip_rate_factor: float = 10.0
    #: Read rate over write rate at or above this is read amplification (the incident was 4x).
    amplification_threshold: float = 3.0
    #: Below this read rate nobody cares how it compares with the write rate.
    min_read_per_s: float = 1.0

    def __post_init__(self) -> None:
        if self.reset_slack_records < 0 or not 0 <= self.reset_slack_ratio < 1:
            raise ValueError("reset_slack_records must be >= 0 and reset_slack_ratio in [0, 1)")
        if self.skip_rate_factor <= 1 or self.amplification_threshold <= 1:
            raise ValueError("skip_rate_factor and amplification_threshold must be above 1")
