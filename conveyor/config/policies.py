"""The thresholds of the watcher's offset judging (conveyor.ops.rewind), with their defaults.

Typed settings rather than rules: the ``ops:`` section of platform.yaml exposes the amplification
threshold (its default is this one), and the rules take the policy as an argument. The thresholds
of the alerts are ``ops:`` settings that conveyor.ops.rules writes into Prometheus's rules.
"""

from __future__ import annotations

from dataclasses import dataclass


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
