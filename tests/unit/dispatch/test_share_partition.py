"""The share backend's pure parts: what a node does with records a share group lent it, and the
group configs it derives from the dispatch settings."""

from __future__ import annotations

import pytest

from conveyor.config import Dispatch
from conveyor.dispatch.acktracker import AckOutcome
from conveyor.dispatch.partition import Reason, Record
from conveyor.dispatch.share_partition import TAKEN_BACK, Settle, ShareLimits, SharePartition
from conveyor.dispatch.share_reader import share_group_configs

LIMITS = ShareLimits(ack_deadline=10.0, max_attempts=3, lock_hold=27.0)
RECORD = Record(b"k", b"v", (), 0)


def lent(count: int = 3, attempt: int = 1, consumer: int = 0) -> SharePartition[str]:
    q: SharePartition[str] = SharePartition(LIMITS)
    for offset in range(count):
        q.add(offset, RECORD, attempt, consumer, now=0.0)
    return q


def test_an_ack_accepts_and_the_consumer_may_poll_again_once_all_are_settled() -> None:
    q = lent()
    handouts = q.take(10, "a", 0.0)
    assert [(h.offset, h.attempt) for h in handouts] == [(0, 1), (1, 1), (2, 1)]
    assert q.acknowledge(1) is AckOutcome.acked
    assert q.acknowledge(1) is AckOutcome.already_acked
    assert q.acknowledge(99) is AckOutcome.never_delivered
    assert q.unsettled(0) == 2
    assert q.take_settled(0) == [(1, Settle.accept)]
    q.acknowledge(0)
    q.acknowledge(2)
    assert q.unsettled(0) == 0 and q.take_settled(0) == [(0, Settle.accept), (2, Settle.accept)]


def test_a_nack_releases_at_once_or_after_its_delay_and_only_the_holder_may_nack() -> None:
    q = lent(2)
    q.take(2, "a", 0.0)
    assert q.nack(0, "b", 0.0, 0.0) == "stale nack"
    assert q.nack(0, "a", 0.0, 0.0) is None
    assert q.take_settled(0) == [(0, Settle.release)]
    assert q.nack(0, "a", 0.0, 0.0) == TAKEN_BACK, "a late nack of what went back to the broker"
    assert q.acknowledge(0) is AckOutcome.never_delivered, "a late ack: the broker lends it again"
    assert q.nack(1, "a", 5.0, 0.0) is None
    q.expire(4.9)
    assert q.take_settled(0) == [] and q.unsettled(0) == 1, "held back for the delay"
    q.expire(5.0)
    assert q.take_settled(0) == [(1, Settle.release)]


def test_the_last_attempt_goes_to_the_dead_letter_topic_then_is_accepted() -> None:
    q = lent(1, attempt=3)
    q.take(1, "a", 0.0)
    q.nack(0, "a", 0.0, 0.0)
    [letter] = q.take_dead()
    assert (letter.offset, letter.attempts, letter.reason) == (0, 3, Reason.nacked)
    assert q.take_settled(0) == [] and q.unsettled(0) == 1
    q.expire(100.0)  # being dead-lettered: no deadline releases it meanwhile
    assert q.take_settled(0) == []
    q.dead_lettered(letter)
    assert q.take_settled(0) == [(0, Settle.accept)]


def test_a_record_past_max_attempts_is_dead_lettered_without_a_delivery() -> None:
    q = lent(1, attempt=4)
    assert q.take(1, "a", 0.0) == []
    [letter] = q.take_dead()
    assert letter.reason is Reason.deadline and letter.attempts == 3


def test_deadlines_release_unacked_deliveries_and_records_about_to_outlive_their_lock() -> None:
    q = lent(3)
    q.take(1, "a", 0.0)
    assert q.expire(9.9) == 0
    assert q.expire(10.0) == 1
    assert q.take_settled(0) == [(0, Settle.release)]
    assert q.ready == 2
    q.expire(27.0)  # never handed out before the lock nears its end: give them back
    assert sorted(q.take_settled(0)) == [(1, Settle.release), (2, Settle.release)]
    assert q.ready == 0 and q.unsettled(0) == 0


def test_a_delivery_never_outlasts_the_lock_even_with_a_longer_ack_deadline() -> None:
    q: SharePartition[str] = SharePartition(ShareLimits(ack_deadline=100.0, max_attempts=3, lock_hold=27.0))
    q.add(0, RECORD, 1, 0, now=0.0)
    q.take(1, "a", 20.0)
    assert q.expire(26.9) == 0 and q.expire(27.0) == 1


def test_a_disconnected_client_and_a_stopping_node_give_everything_back() -> None:
    q = lent(4)
    q.take(2, "a", 0.0)
    assert q.release("a", 0.0) == 2
    assert q.take_settled(0) == [(0, Settle.release), (1, Settle.release)]
    q.add(9, RECORD, 1, consumer=1, now=0.0)
    q.release_all(0)
    assert sorted(q.take_settled(0)) == [(2, Settle.release), (3, Settle.release)]
    assert q.unsettled(0) == 0 and q.unsettled(1) == 1


def test_a_record_acquired_again_voids_the_old_copy() -> None:
    q = lent(1, consumer=0)
    q.add(0, RECORD, 2, consumer=1, now=30.0)
    assert q.take_settled(0) == [(0, Settle.release)], "the old consumer must still settle it to poll again"
    assert q.unsettled(0) == 0 and q.unsettled(1) == 1


def test_group_configs_follow_the_dispatch_settings_within_the_brokers_bounds() -> None:
    configs, limits = share_group_configs(Dispatch(backend="share", ack_deadline=30.0, max_attempts=5, prefetch=2000))
    assert configs == {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "33000",
                       "share.delivery.count.limit": "6", "share.partition.max.record.locks": "2000"}
    assert limits == ShareLimits(30.0, 5, 30.0)
    short, _ = share_group_configs(Dispatch(backend="share", ack_deadline=2.0, prefetch=10))
    assert short["share.record.lock.duration.ms"] == "15000" and short["share.partition.max.record.locks"] == "100"
    long, _ = share_group_configs(Dispatch(backend="share", ack_deadline=600.0, prefetch=100_000))
    assert long["share.record.lock.duration.ms"] == "60000" and long["share.partition.max.record.locks"] == "4000"


def test_the_share_backend_refuses_more_attempts_than_kafka_allows() -> None:
    with pytest.raises(ValueError, match="above 9"):
        Dispatch(backend="share", max_attempts=10)
    assert Dispatch(backend="classic", max_attempts=10).max_attempts == 10
