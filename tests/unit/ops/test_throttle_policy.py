"""The throttle controller's rules, from tables of cases (no Kafka)."""

from __future__ import annotations

import pytest

from conveyor.ops.throttle.policy import (
    Action, Assigned, BrokerSignal, Consumer, ThrottlePolicy, broker_busy, client_verdict, decide, feed_readers,
)

POLICY = ThrottlePolicy(p99_busy_ms=500, disk_busy=0.9, healthy_ratio=0.7, lag_far=10_000, lag_tail=1_000,
                        quota_bytes=1_000_000)


@pytest.mark.parametrize(("signal", "was_busy", "busy"), [
    (BrokerSignal(1), False, None),                                          # nothing reported
    (BrokerSignal(1, produce_p99_ms=499), False, None),
    (BrokerSignal(1, produce_p99_ms=500), False, "produce p99 500ms >= 500"),    # at the threshold is busy
    (BrokerSignal(1, disk_util=0.95), False, "disk util 0.95 >= 0.9"),
    (BrokerSignal(1, produce_p99_ms=600, disk_util=0.91), False, "produce p99 600ms >= 500, disk util 0.91 >= 0.9"),
    (BrokerSignal(1, produce_p99_ms=400), True, "still busy: produce p99 400ms not yet below 350"),  # hysteresis
    (BrokerSignal(1, produce_p99_ms=349, disk_util=0.5), True, None),          # healthy again
    (BrokerSignal(1, produce_p99_ms=400), False, None),                        # the band only holds a busy one
])
def test_broker_busy(signal: BrokerSignal, was_busy: bool, busy: str | None) -> None:
    assert broker_busy(signal, was_busy, POLICY) == busy


def consumer(group: str, client: str, *lags: tuple[int, int | None]) -> Consumer:
    return Consumer(group, client, tuple(Assigned("t", i, lag, leader) for i, (lag, leader) in enumerate(lags)))


BUSY = {1: "produce p99 800ms >= 500"}


@pytest.mark.parametrize(("consumers", "busy", "throttle", "why"), [
    ([consumer("batch", "c", (50_000, 1))], BUSY, True,
     "group batch is 50,000 records behind on t-0, led by busy broker 1 (produce p99 800ms >= 500)"),
    ([consumer("batch", "c", (50_000, 1))], {}, False, "no broker is busy"),
    ([consumer("batch", "c", (50_000, 2))], BUSY, False, "not 10,000 records behind on a partition of a busy broker"),
    ([consumer("batch", "c", (9_999, 1))], BUSY, False, "not 10,000 records behind on a partition of a busy broker"),
    ([consumer("live", "c", (0, 1), (1_000, 1))], BUSY, False, "at the tail (group live): never throttled"),
    # one far-behind partition makes the consumer a disk reader, even with others at the tail
    ([consumer("batch", "c", (0, 1), (20_000, 1))], BUSY, True,
     "group batch is 20,000 records behind on t-1, led by busy broker 1 (produce p99 800ms >= 500)"),
    # a client id shared with a tail consumer is never throttled: the quota would slow both
    ([consumer("batch", "c", (50_000, 1)), consumer("live", "c", (3, 1))], BUSY, False,
     "at the tail (group live): never throttled"),
    ([consumer("idle", "c")], BUSY, False, "at the tail (group idle): never throttled"),  # no partitions
])
def test_client_verdict(consumers: list[Consumer], busy: dict, throttle: bool, why: str) -> None:
    assert client_verdict(consumers, busy, POLICY) == (throttle, why)


def test_a_round_sets_lifts_and_keeps_quotas_and_says_why() -> None:
    signals = [BrokerSignal(1, produce_p99_ms=800), BrokerSignal(2, produce_p99_ms=10), BrokerSignal(3, produce_p99_ms=400)]
    consumers = [
        consumer("batch", "lagger", (50_000, 1)),           # far behind on busy broker 1: quota
        consumer("live", "tail", (0, 1), (2, 3)),            # at the tail: never
        consumer("backfill", "kept", (80_000, 3)),           # broker 3 still busy (hysteresis): keeps its quota
        consumer("report", "recovered", (500, 1)),           # caught up: lifted
    ]
    quotas = {"kept": 1_000_000, "recovered": 1_000_000, "gone": 1_000_000}
    result = decide(signals, consumers, quotas, previously_busy={3}, policy=POLICY)
    assert dict(result.busy) == {1: "produce p99 800ms >= 500", 3: "still busy: produce p99 400ms not yet below 350"}
    assert [(d.action, d.client_id, d.rate) for d in result.decisions] == [
        (Action.SET, "lagger", 1_000_000),
        (Action.LIFT, "recovered", None),
        (Action.LIFT, "gone", None),
    ]
    assert result.decisions[1].reason == "at the tail (group report): never throttled"
    assert result.decisions[2].reason == "no consumer uses this client id any more"
    assert result.spared == {"tail": "at the tail (group live): never throttled"}


def test_every_quota_is_lifted_once_the_brokers_are_healthy() -> None:
    consumers = [consumer("batch", "lagger", (50_000, 1))]
    result = decide([BrokerSignal(1, produce_p99_ms=5, disk_util=0.1)], consumers, {"lagger": 1_000_000},
                    previously_busy={1}, policy=POLICY)
    assert result.busy == {}
    assert [(d.action, d.client_id, d.reason) for d in result.decisions] == [
        (Action.LIFT, "lagger", "no broker is busy")]


def test_a_threshold_of_zero_marks_every_reporting_broker_busy() -> None:
    zero = ThrottlePolicy(p99_busy_ms=0, lag_far=10, lag_tail=0)
    result = decide([BrokerSignal(1, produce_p99_ms=0.0)], [consumer("g", "c", (11, 1))], {}, (), zero)
    assert result.busy and [d.action for d in result.decisions] == [Action.SET]


@pytest.mark.parametrize("kwargs", [{"healthy_ratio": 0}, {"lag_tail": 10, "lag_far": 10}, {"quota_bytes": 0}])
def test_bad_policies_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ThrottlePolicy(**kwargs)


# -- readers seen only through the position feed (conveyor.positions) ------------------------------

ENDS = {("t", 0): 60_000, ("t", 1): 60_000, ("t", 2): 60_000}
LEADERS = {("t", 0): 1, ("t", 1): 2, ("t", 2): -1}


@pytest.mark.parametrize(("readers", "committed", "expected"), [
    # A copier: one client id for the partitions it copies, with their lag and leader.
    ({("t", 0): ("w1-b0",), ("t", 1): ("w1-b0",)}, {("t", 0): 10_000, ("t", 1): 59_500},
     [Consumer("conveyor.replicate.r", "w1-b0", (Assigned("t", 0, 50_000, 1), Assigned("t", 1, 500, 2)))]),
    # Two copiers of one route, each under its own client id.
    ({("t", 0): ("w1-b0",), ("t", 1): ("w2-b1",)}, {("t", 0): 0, ("t", 1): 0},
     [Consumer("conveyor.replicate.r", "w1-b0", (Assigned("t", 0, 60_000, 1),)),
      Consumer("conveyor.replicate.r", "w2-b1", (Assigned("t", 1, 60_000, 2),))]),
    # Share dispatcher nodes all read every partition; an offline leader is no leader.
    ({("t", 2): ("conveyor-dispatch@a:1", "conveyor-dispatch@b:2")}, {("t", 2): 70_000},
     [Consumer("conveyor.replicate.r", "conveyor-dispatch@a:1", (Assigned("t", 2, 0, None),)),
      Consumer("conveyor.replicate.r", "conveyor-dispatch@b:2", (Assigned("t", 2, 0, None),))]),
    # No commit or no end offset: no known lag, left out.
    ({("t", 0): ("w1-b0",), ("u", 0): ("w1-b0",)}, {("u", 0): 5}, []),
    # An unquotable reader names no client id.
    ({}, {("t", 0): 0}, []),
])
def test_feed_readers_stand_for_the_client_ids_their_commits_name(readers, committed, expected) -> None:
    assert feed_readers("conveyor.replicate.r", readers, committed, ENDS, LEADERS) == expected


def test_a_feed_reader_far_behind_on_a_busy_broker_gets_the_quota_on_its_own_client_id() -> None:
    lake = feed_readers("conveyor.lake.t", {("t", 0): ("conveyor-lake.t",)}, {("t", 0): 0}, ENDS, LEADERS)
    tail = feed_readers("conveyor.replicate.r", {("t", 1): ("w1-b0",)}, {("t", 1): 59_900}, ENDS, LEADERS)
    result = decide([BrokerSignal(1, produce_p99_ms=800), BrokerSignal(2, produce_p99_ms=800)], lake + tail, {},
                    [], POLICY)
    assert [(d.action, d.client_id, d.rate) for d in result.decisions] == [
        (Action.SET, "conveyor-lake.t", 1_000_000)]
    assert result.spared["w1-b0"] == "at the tail (group conveyor.replicate.r): never throttled"
