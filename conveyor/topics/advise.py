"""Partition advisor: how many partitions a topic needs, and when the dispatcher is the better
answer than more partitions (docs/architecture.md, section 3). Pure: no Kafka, no clock.

Within a consumer group a partition has one consumer, so a topic's partitions cap how many
consumers work in parallel. For a produce rate ``r`` (messages/s) and a per-message processing
time ``t`` (seconds, one consumer), the consumers needed are:

- steady state at a target utilisation ``u``: ``r * t / u`` (a consumer busy all the time has no
  room for a burst);
- to recover within the wanted maximum lag ``L`` after a stall of ``s`` seconds (a rebalance, a
  deploy): the backlog ``r * s`` must drain at ``n / t - r`` within ``L``, so
  ``n >= r * t * (1 + s / L)``;
- to drain a backlog ``B`` already there within ``L``: ``n >= t * (r + B / L)``.

The recommendation is that many partitions, rounded up to a multiple of the broker count so
leaders spread evenly, and never fewer than the topic has (Kafka cannot shrink a topic). The
dispatcher (many consumers per partition, individual acks, no order) is the better answer when:

- the count exceeds the per-topic budget (1,000 partitions for every topic would mean 2 million;
  advice is under 200,000 per cluster), or
- the backlog already there needs more consumers than the topic has partitions: new partitions
  only receive new messages, so they do not help the backlog;

unless consumers need per-key order, which only partitions give.

:func:`measured_processing_seconds` estimates ``t`` from a group that is behind: its consumers
are then busy all the time, so each takes ``consumers / messages consumed per second``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class Verdict(str, Enum):
    ENOUGH = "enough partitions"
    ADD_PARTITIONS = "add partitions"
    DISPATCHER = "use the dispatcher"


@dataclass(frozen=True)
class AdvicePolicy:
    #: Share of time each consumer may be busy in steady state.
    utilisation: float = 0.7
    #: A pause the consumers must recover from within the wanted lag (rebalance, deploy).
    stall_seconds: float = 30.0
    #: Partitions per topic above which more partitions cost the cluster more than they give.
    max_partitions: int = 100
    #: Brokers of the cluster: the count is rounded up to a multiple, so leaders spread evenly.
    brokers: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.utilisation <= 1 or self.stall_seconds < 0 or self.max_partitions < 1 or self.brokers < 1:
            raise ValueError("utilisation in (0, 1], stall_seconds >= 0, max_partitions and brokers >= 1")


@dataclass(frozen=True)
class TopicDemand:
    topic: str
    partitions: int
    #: Messages produced per second.
    rate: float
    #: Seconds one consumer spends on one message.
    processing_seconds: float
    #: Wanted maximum lag, seconds.
    max_lag_seconds: float
    #: Messages already behind (the largest group lag on the topic).
    backlog: int = 0
    #: Consumers need per-key order (the dispatcher gives none).
    ordered: bool = False


@dataclass(frozen=True)
class Advice:
    topic: str
    partitions: int
    consumers_needed: float
    recommended: int
    verdict: Verdict
    reasons: tuple[str, ...]


def steady_consumers(d: TopicDemand, policy: AdvicePolicy) -> tuple[float, str]:
    """Consumers the steady state asks for, and the requirement that asks most."""
    work = d.rate * d.processing_seconds
    return max(
        (work / policy.utilisation, f"{d.rate:g} msg/s x {d.processing_seconds * 1000:g} ms at "
                                    f"{policy.utilisation:.0%} utilisation"),
        (work * (1 + policy.stall_seconds / d.max_lag_seconds),
         f"recovering from a {policy.stall_seconds:g} s stall within {d.max_lag_seconds:g} s of lag"),
    )


def backlog_consumers(d: TopicDemand) -> float:
    """Consumers that drain the backlog already there within the wanted lag, while keeping up."""
    return d.processing_seconds * (d.rate + d.backlog / d.max_lag_seconds)


def advise(d: TopicDemand, policy: AdvicePolicy) -> Advice:
    if d.max_lag_seconds <= 0 or d.rate < 0 or d.processing_seconds < 0:
        raise ValueError(f"{d.topic}: max lag must be above 0, rate and processing time at least 0")
    steady, because = steady_consumers(d, policy)
    backlog = backlog_consumers(d)
    wanted = max(math.ceil(steady - 1e-9), 1)
    recommended = max(math.ceil(wanted / policy.brokers) * policy.brokers, d.partitions)
    reasons = [f"{steady:.1f} consumers needed ({because})"]
    if d.backlog:
        reasons.append(f"{backlog:.1f} consumers drain the {d.backlog:,} messages behind within "
                       f"{d.max_lag_seconds:g} s")

    def advice(verdict: Verdict, partitions: int, *more: str) -> Advice:
        return Advice(d.topic, d.partitions, max(steady, backlog), partitions, verdict, (*reasons, *more))

    if d.backlog and backlog > d.partitions and not d.ordered:
        steady_partitions = recommended if recommended <= policy.max_partitions else d.partitions
        return advice(Verdict.DISPATCHER, steady_partitions,
                      f"the backlog is in the existing {d.partitions} partitions and new partitions only get new "
                      f"messages: run {math.ceil(backlog)} dispatcher clients on them now")
    if wanted <= d.partitions:
        order = ["the backlog drains slower than wanted, and per-key order rules out the dispatcher"] \
            if d.backlog and backlog > d.partitions else []
        return advice(Verdict.ENOUGH, d.partitions,
                      f"{d.partitions} partitions allow {d.partitions} consumers in one group", *order)
    if d.ordered:
        over = [f"{recommended} is above the budget of {policy.max_partitions} per topic, but per-key order "
                "needs partitions (the dispatcher does not keep order)"] if recommended > policy.max_partitions else []
        return advice(Verdict.ADD_PARTITIONS, recommended, *over)
    if recommended > policy.max_partitions:
        return advice(Verdict.DISPATCHER, d.partitions,
                      f"{recommended} partitions is above the budget of {policy.max_partitions} per topic: run "
                      f"{math.ceil(steady)} dispatcher clients on the {d.partitions} partitions instead")
    return advice(Verdict.ADD_PARTITIONS, recommended)


def measured_processing_seconds(consumers: int, consumed_per_second: float, lag_before: int,
                                lag_after: int) -> float | None:
    """Per-message time of a group's consumers, from a window in which the group stayed behind
    (lag above zero at both ends); None when it was not behind, as an idle consumer's speed
    says nothing about its processing time."""
    if consumers < 1 or consumed_per_second <= 0 or lag_before <= 0 or lag_after <= 0:
        return None
    return consumers / consumed_per_second
