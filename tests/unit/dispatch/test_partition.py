"""Serving one partition to many clients: hand-out order, redelivery, deadlines, dead letters."""

from __future__ import annotations

from conveyor.dispatch.ackcodec import decode
from conveyor.dispatch.acktracker import AckOutcome, PartitionAcks
from conveyor.dispatch.partition import STALE_NACK, Limits, PartitionQueue, Reason, Record

LIMITS = Limits(ack_deadline=10.0, max_attempts=3, prefetch=100)


def record(n: int) -> Record:
    return Record(str(n).encode(), str(n).encode(), (), 1_000 + n)


def queue(offsets: range, acks: PartitionAcks | None = None, limits: Limits = LIMITS) -> PartitionQueue[str]:
    q: PartitionQueue[str] = PartitionQueue(acks, limits)
    for offset in offsets:
        assert q.add(offset, record(offset))
    return q


def test_fresh_messages_go_out_in_kafka_order_and_refetched_ones_are_dropped() -> None:
    q = queue(range(5, 10))
    assert not q.add(7, record(7)), "Kafka re-sent an offset after a pause"
    assert [h.offset for h in q.take(3, "a", 0.0)] == [5, 6, 7]
    assert [(h.offset, h.attempt) for h in q.take(10, "b", 0.0)] == [(8, 1), (9, 1)]
    assert q.in_flight == 5 and q.ready == 0


def test_a_nack_redelivers_first_and_counts_the_attempt() -> None:
    q = queue(range(4))
    q.take(2, "a", 0.0)
    assert q.nack(1, "a", ready_at=0.0, now=0.0) is None
    assert [(h.offset, h.attempt) for h in q.take(2, "b", 0.0)] == [(1, 2), (2, 1)]


def test_a_nack_delay_holds_the_message_until_it_passes() -> None:
    q = queue(range(1))
    q.take(1, "a", 0.0)
    q.nack(0, "a", ready_at=5.0, now=1.0)
    q.expire(4.9)
    assert q.take(1, "a", 4.9) == []
    q.expire(5.0)
    assert [h.offset for h in q.take(1, "a", 5.0)] == [0]


def test_only_the_latest_holder_can_nack_and_late_ids_say_why_they_are_ignored() -> None:
    q = queue(range(3))
    q.take(1, "a", 0.0)
    q.expire(10.0)  # a's deadline passed: 0 goes to b
    assert [h.offset for h in q.take(1, "b", 10.0)] == [0]
    assert q.nack(0, "a", 10.0, 10.0) == STALE_NACK
    assert q.ack(0).outcome is AckOutcome.acked, "any copy's ack counts: at least once"
    assert q.ack(0).outcome is AckOutcome.below_committed
    assert q.nack(0, "b", 10.0, 10.0) == AckOutcome.below_committed.value
    assert q.nack(2, "b", 10.0, 10.0) == AckOutcome.never_delivered.value


def test_the_ack_deadline_takes_messages_back_once() -> None:
    q = queue(range(2))
    q.take(2, "a", 0.0)
    q.ack(1)
    assert q.expire(9.9) == 0
    assert q.expire(10.0) == 1, "only the unacked one"
    assert q.expire(30.0) == 0, "the stale deadline of the acked one is skipped"


def test_a_disconnected_client_gives_back_everything_it_held() -> None:
    q = queue(range(4))
    q.take(2, "a", 0.0)
    q.take(1, "b", 0.0)
    assert q.release("a", 1.0) == 2
    assert sorted(h.offset for h in q.take(5, "b", 1.0)) == [0, 1, 3]


def test_out_of_attempts_the_message_becomes_a_dead_letter_with_the_last_reason() -> None:
    q = queue(range(2))
    for now in (0.0, 10.0):
        q.take(1, "a", now)
        q.expire(now + 10.0)
    q.take(1, "a", 20.0)
    q.nack(0, "a", 20.0, 20.0)
    [letter] = q.take_dead()
    assert (letter.offset, letter.attempts, letter.reason) == (0, 3, Reason.nacked)
    assert [h.offset for h in q.take(5, "a", 20.0)] == [1], "a dead letter is not handed out again"
    q.dead_again(letter)  # writing it failed
    assert q.take_dead() == [letter]
    q.ack(0)  # written: settled
    q.ack(1)
    assert q.commit_point() == (2, q.acks.commit_metadata())  # type: ignore[union-attr]


def test_a_takeover_skips_acked_offsets_and_commits_past_them() -> None:
    restored = PartitionAcks(10)
    for offset in (10, 12):
        restored.deliver(offset)
    restored.ack(12)
    acks = PartitionAcks.restore(10, restored.commit_metadata())
    q = queue(range(10, 14), acks)
    assert [h.offset for h in q.take(10, "a", 0.0)] == [10, 11, 13]


def test_an_uncommitted_partition_starts_tracking_at_the_first_offset_kafka_returns() -> None:
    q: PartitionQueue[str] = PartitionQueue(None, LIMITS)
    assert q.commit_point() is None and q.take(1, "a", 0.0) == []
    q.add(40, record(40))
    q.take(1, "a", 0.0)
    q.ack(40)
    assert q.commit_point() == (41, q.acks.commit_metadata())  # type: ignore[union-attr]
    assert decode(q.acks.commit_metadata()).acked == ()  # type: ignore[union-attr]


def test_the_fetch_pauses_when_prefetch_is_full_or_the_metadata_bound_is_near() -> None:
    assert not queue(range(100)).wants_fetch()
    assert queue(range(99)).wants_fetch()
    # A paused partition resumes only below half the prefetch.
    q = queue(range(100))
    q.take(49, "a", 0.0)
    assert not q.wants_fetch(paused=True) and q.wants_fetch(paused=False)
    q.take(2, "a", 0.0)
    assert q.wants_fetch(paused=True)
    tight = Limits(ack_deadline=10.0, max_attempts=3, metadata_limit=64, prefetch=10_000)
    q = queue(range(2_000), limits=tight)
    handed = q.take(2_000, "a", 0.0)
    assert len(handed) < 2_000, "deliveries stop where the acks could no longer be recorded"
    assert not q.wants_fetch()
    for h in handed[1:]:
        q.ack(h.offset)
    assert len(q.acks.commit_metadata()) <= 64  # type: ignore[union-attr]
    q.ack(0)
    assert q.wants_fetch() and q.take(10, "a", 0.0)
