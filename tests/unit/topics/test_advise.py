"""The partition advisor's rules, from a table of topics (no Kafka)."""

from __future__ import annotations

import pytest

from conveyor.topics.advise import AdvicePolicy, TopicDemand, Verdict, advise, measured_processing_seconds

POLICY = AdvicePolicy(utilisation=0.5, stall_seconds=30, max_partitions=100, brokers=3)


@pytest.mark.parametrize(("demand", "verdict", "recommended", "needed"), [
    # 100 msg/s x 10 ms = 1 busy consumer; at 50 % utilisation 2; a 30 s stall within 60 s: 1.5
    (TopicDemand("quiet", 9, 100, 0.010, 60), Verdict.ENOUGH, 9, 2.0),
    # 1,000 msg/s x 20 ms = 20 busy consumers, 40 at 50 %: rounded up to 42 for 3 brokers
    (TopicDemand("busy", 9, 1000, 0.020, 60), Verdict.ADD_PARTITIONS, 42, 40.0),
    # a tight lag wins over utilisation: 20 x (1 + 30/5) = 140, above the budget of 100
    (TopicDemand("tight", 9, 1000, 0.020, 5), Verdict.DISPATCHER, 9, 140.0),
    # the same, but consumers need per-key order: only partitions can give it
    (TopicDemand("ordered", 9, 1000, 0.020, 5, ordered=True), Verdict.ADD_PARTITIONS, 141, 140.0),
    # steady state fits, but 600,000 messages are behind: 0.01 x (100 + 600000/60) = 101 consumers now
    (TopicDemand("behind", 9, 100, 0.010, 60, backlog=600_000), Verdict.DISPATCHER, 9, 101.0),
    # behind and ordered: nothing but waiting helps, the partitions are enough for the steady state
    (TopicDemand("behind-ordered", 9, 100, 0.010, 60, backlog=600_000, ordered=True), Verdict.ENOUGH, 9, 101.0),
    # a topic never shrinks
    (TopicDemand("big", 48, 10, 0.001, 60), Verdict.ENOUGH, 48, 0.02),
    (TopicDemand("idle", 1, 0, 0.5, 60), Verdict.ENOUGH, 1, 0.0),
])
def test_advice(demand: TopicDemand, verdict: Verdict, recommended: int, needed: float) -> None:
    advice = advise(demand, POLICY)
    assert (advice.verdict, advice.recommended) == (verdict, recommended), advice.reasons
    assert advice.consumers_needed == pytest.approx(needed)
    assert advice.reasons


def test_the_reasons_say_what_to_do() -> None:
    tight = advise(TopicDemand("tight", 9, 1000, 0.020, 5), POLICY)
    assert tight.reasons == (
        "140.0 consumers needed (recovering from a 30 s stall within 5 s of lag)",
        "141 partitions is above the budget of 100 per topic: run 140 dispatcher clients on the 9 partitions instead",
    )
    behind = advise(TopicDemand("behind", 9, 100, 0.010, 60, backlog=600_000), POLICY)
    assert behind.reasons[-1] == ("the backlog is in the existing 9 partitions and new partitions only get new "
                                  "messages: run 101 dispatcher clients on them now")


@pytest.mark.parametrize("demand", [TopicDemand("t", 1, 1, 0.1, 0), TopicDemand("t", 1, -1, 0.1, 5)])
def test_bad_demands_are_refused(demand: TopicDemand) -> None:
    with pytest.raises(ValueError):
        advise(demand, POLICY)


@pytest.mark.parametrize(("consumers", "rate", "lag_before", "lag_after", "seconds"), [
    (4, 200.0, 5000, 4000, 0.02),     # behind all window long: 4 consumers / 200 msg/s
    (4, 200.0, 5000, 0, None),        # caught up inside the window: idle part of the time
    (4, 0.0, 5000, 6000, None),       # consumed nothing: stuck, not slow
    (0, 200.0, 5000, 4000, None),
])
def test_processing_time_is_only_measured_on_a_group_that_stays_behind(consumers, rate, lag_before, lag_after,
                                                                        seconds) -> None:
    assert measured_processing_seconds(consumers, rate, lag_before, lag_after) == seconds
