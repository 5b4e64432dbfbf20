"""Per-partition ack tracking: the commit, takeovers, back-pressure, ignored acks, backlog."""

from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.dispatch.ackcodec import MAX_SPAN, decode, encode
from conveyor.dispatch.acktracker import (
    AckOutcome,
    AckResult,
    Delivery,
    PartitionAcks,
    backlog,
)
from conveyor.dispatch.errors import (
    AckMetadataError,
    MalformedAckMetadataError,
    StaleAckMetadataError,
    UnknownAckVersionError,
)


def delivered(offsets: list[int] | range, start: int | None = None) -> PartitionAcks:
    offsets = list(offsets)
    acks = PartitionAcks(offsets[0] if start is None else start)
    for offset in offsets:
        assert acks.deliver(offset) is Delivery.first
    return acks


@pytest.mark.parametrize(
    ("offsets", "acked", "committed", "above"),
    [
        (range(5), [], 0, ()),
        (range(5), [0, 1, 2], 3, ()),
        (range(5), [1, 2], 0, (1, 2)),
        (range(5), [4, 3, 2, 1, 0], 5, ()),
        (range(5), [2, 0], 1, (2,)),
        (range(5), [1, 3, 0], 2, (3,)),
        (range(5), [1, 3, 0, 2], 4, ()),
        # 11 and 14 are transaction markers Kafka never returns: the commit steps over them.
        ([10, 12, 13, 15], [10], 12, ()),
        ([10, 12, 13, 15], [13, 12, 10], 15, ()),
        ([10, 12, 13, 15], [15, 12], 10, (12, 15)),
    ],
    ids=[
        "nothing-acked",
        "in-order",
        "gap-at-the-bottom",
        "reverse-order",
        "bottom-then-stop",
        "fills-to-next-hole",
        "all-contiguous",
        "over-a-marker",
        "over-two-markers",
        "markers-stay-unacked",
    ],
)
def test_commit_advances_over_contiguous_acks(
    offsets: range | list[int], acked: list[int], committed: int, above: tuple[int, ...]
) -> None:
    acks = delivered(offsets)
    for offset in acked:
        assert acks.ack(offset).outcome is AckOutcome.acked
    assert acks.committed_offset == committed
    assert acks.acked_above() == above
    assert decode(acks.commit_metadata()).acked == above


def test_the_commit_starts_at_the_first_offset_kafka_returns() -> None:
    # Retention deleted offsets 100 to 104 since the last commit.
    acks = delivered([105, 106], start=100)
    assert acks.committed_offset == 105


def test_ack_result_reports_the_commit_after_the_ack() -> None:
    acks = delivered(range(3))
    assert acks.ack(1) == AckResult(1, AckOutcome.acked, committed_offset=0)
    assert acks.ack(0) == AckResult(0, AckOutcome.acked, committed_offset=2)
    assert acks.ack(0).applied is False


def test_nacked_offsets_hold_the_commit_until_redelivered_and_acked() -> None:
    acks = delivered(range(3))
    acks.ack(1)
    assert acks.nack(0).outcome is AckOutcome.nacked
    assert (acks.in_flight_count, acks.pending_count) == (1, 2)
    assert acks.committed_offset == 0
    assert acks.deliver(0) is Delivery.redelivery
    assert acks.in_flight_count == 2
    acks.ack(0)
    assert acks.committed_offset == 2


@pytest.mark.parametrize(
    ("offset", "outcome"),
    [
        (3, AckOutcome.below_committed),
        (5, AckOutcome.already_acked),
        (8, AckOutcome.never_delivered),  # a transaction marker
        (42, AckOutcome.never_delivered),  # beyond the fetch position
    ],
)
def test_ignored_acks_say_why_and_change_nothing(offset: int, outcome: AckOutcome) -> None:
    acks = delivered([3, 4, 5, 6, 7, 9])
    acks.ack(3)
    acks.ack(5)
    before = (acks.committed_offset, acks.acked_above(), acks.pending_count)
    for settle in (acks.ack, acks.nack):
        result = settle(offset)
        assert (result.outcome, result.applied) == (outcome, False)
    assert (acks.committed_offset, acks.acked_above(), acks.pending_count) == before


def test_outcomes_are_counted() -> None:
    acks = delivered(range(4))
    for offset in (1, 1, 0, 0, 2, 99):
        acks.ack(offset)
    acks.nack(3)
    acks.nack(1)
    assert acks.outcome_counts() == {
        AckOutcome.acked: 3,
        AckOutcome.already_acked: 1,
        AckOutcome.below_committed: 2,
        AckOutcome.never_delivered: 1,
        AckOutcome.nacked: 1,
    }


def test_deliveries_must_follow_kafkas_order() -> None:
    acks = delivered([5, 7])
    with pytest.raises(ValueError):
        acks.deliver(6)


def test_takeover_never_redelivers_acked_offsets() -> None:
    before = delivered(range(10))
    for offset in (0, 1, 3, 5, 6, 9):
        before.ack(offset)
    committed, metadata = before.committed_offset, before.commit_metadata()
    assert committed == 2

    after = PartitionAcks.restore(committed, metadata)
    deliveries = {offset: after.deliver(offset) for offset in range(committed, 12)}
    assert [o for o, d in deliveries.items() if d is Delivery.first] == [2, 4, 7, 8, 10, 11]
    assert all(after.is_acked(o) for o in (0, 1, 3, 5, 6, 9))
    assert not any(after.is_acked(o) for o in (2, 4, 7, 8, 10, 11))
    for offset in (4, 2, 8, 7):
        after.ack(offset)
    assert after.committed_offset == 10
    assert after.acked_above() == ()


def test_restored_acks_just_past_the_commit_move_it_once_it_is_acked() -> None:
    acks = PartitionAcks.restore(100, encode(100, [101, 102, 104]))
    acks.deliver(100)
    acks.ack(100)
    assert acks.committed_offset == 103
    assert acks.acked_above() == (104,)
    assert [acks.deliver(o) for o in range(101, 105)] == [
        Delivery.already_acked,
        Delivery.already_acked,
        Delivery.first,
        Delivery.already_acked,
    ]


def test_restored_acks_kafka_never_returns_are_dropped_once_passed() -> None:
    # 2 was acked, then compacted away before the takeover fetched it again.
    acks = PartitionAcks.restore(0, encode(0, [2]))
    for offset in (0, 1, 3):
        acks.deliver(offset)
    acks.ack(1)
    acks.ack(0)
    assert acks.committed_offset == 3
    assert acks.acked_above() == ()
    assert decode(acks.commit_metadata()).acked == ()


def test_restore_from_empty_metadata_acks_nothing_above() -> None:
    acks = PartitionAcks.restore(7, "")
    assert acks.committed_offset == 7
    assert acks.acked_above() == ()
    assert acks.deliver(7) is Delivery.first


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        (encode(90, [95]), StaleAckMetadataError),
        ("written by another tool", MalformedAckMetadataError),
        (base64.b85encode(bytes([1, 1])).decode(), MalformedAckMetadataError),  # no base
    ],
)
def test_restore_refuses_metadata_it_cannot_trust(
    metadata: str, error: type[AckMetadataError]
) -> None:
    with pytest.raises(error):
        PartitionAcks.restore(100, metadata)


def test_stale_metadata_names_both_offsets() -> None:
    with pytest.raises(StaleAckMetadataError) as caught:
        PartitionAcks.restore(100, encode(90, [95]))
    assert (caught.value.committed_offset, caught.value.metadata_base) == (100, 90)


def test_restore_refuses_a_newer_layout() -> None:
    with pytest.raises(UnknownAckVersionError):
        PartitionAcks.restore(0, base64.b85encode(bytes([2, 1, 0])).decode())


def test_back_pressure_flips_before_every_other_ack_overflows_the_limit() -> None:
    # Acking every other offset is the worst case for run lengths; parallel-consumer drops
    # its acks here. The tracker refuses the next delivery just before the cap instead.
    acks = PartitionAcks(0)
    offset = 0
    while acks.may_deliver(offset):
        acks.deliver(offset)
        offset += 1
    assert not acks.may_fetch_more()
    for odd in range(1, offset, 2):
        acks.ack(odd)
    assert 4_000 < acks.encoded_size() <= 4096
    assert not acks.may_deliver(offset)
    # Acking the bottom half lets the commit move and frees room again.
    for even in range(0, offset // 2, 2):
        acks.ack(even)
    assert acks.committed_offset > offset // 2 - 2
    assert acks.may_deliver(offset)
    assert acks.may_fetch_more()


def test_one_stuck_message_still_lets_long_runs_of_acks_through() -> None:
    acks = delivered(range(50_000))
    for offset in range(1, 50_000):
        acks.ack(offset)
    assert acks.committed_offset == 0
    assert acks.encoded_size() < 20
    assert acks.may_fetch_more()
    assert acks.may_deliver(50_000)


def test_nothing_pending_always_allows_delivery() -> None:
    # Metadata this tracker did not gate (another limit, a hand-made commit) can restore acks
    # whose worst case exceeds the limit; refusing then would stall the partition for good,
    # since only deliveries move the commit.
    metadata = encode(0, range(100, 150_000, 100))
    assert len(metadata) <= 4096
    acks = PartitionAcks.restore(0, metadata)
    assert acks.pending_count == 0
    assert acks.may_fetch_more()
    assert acks.may_deliver(0)
    acks.deliver(0)
    assert not acks.may_deliver(1)


def test_deliveries_stay_within_the_span_metadata_can_record() -> None:
    acks = delivered([0])
    assert not acks.may_deliver(MAX_SPAN + 1, limit_bytes=10**9)
    assert acks.may_deliver(MAX_SPAN, limit_bytes=10**9)
    with pytest.raises(ValueError):
        acks.deliver(MAX_SPAN + 1)


def test_acking_100k_offsets_out_of_order_ends_with_an_empty_commit() -> None:
    order = list(range(100_000))
    random.Random(7).shuffle(order)
    acks = delivered(range(100_000))
    for offset in order:
        acks.ack(offset)
    assert (acks.committed_offset, acks.acked_count, acks.pending_count) == (100_000, 0, 0)


@pytest.mark.parametrize(
    ("end", "committed", "acked", "expected"),
    [(1_000, 400, 100, 500), (1_000, 1_000, 0, 0), (1_000, 990, 20, 0), (0, 0, 0, 0)],
    ids=["mission-formula", "caught-up", "end-read-before-acks", "empty"],
)
def test_backlog(end: int, committed: int, acked: int, expected: int) -> None:
    assert backlog(end, committed, acked) == expected


def test_tracker_backlog_counts_individual_acks() -> None:
    acks = delivered(range(10))
    for offset in (0, 1, 5, 7):
        acks.ack(offset)
    assert acks.backlog(end_offset=20) == 20 - 2 - 2


@settings(deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 10**9))
def test_tracker_matches_a_plain_model(seed: int, start: int) -> None:
    # The model: the commit is the lowest delivered offset not acked, or the fetch position.
    rnd = random.Random(seed)
    acks = PartitionAcks(start)
    delivered_offsets: list[int] = []
    acked: set[int] = set()
    position = start
    for _ in range(400):
        if rnd.random() < 0.5:
            position += rnd.choice((0, 0, 0, 1, 5))
            acks.deliver(position)
            delivered_offsets.append(position)
            position += 1
        elif delivered_offsets:
            offset = rnd.choice(delivered_offsets) + rnd.choice((0, 0, 0, -1, 1))
            applies = offset in delivered_offsets and offset not in acked
            assert acks.ack(offset).applied == applies
            if applies:
                acked.add(offset)
        unacked = [o for o in delivered_offsets if o not in acked]
        committed = min(unacked, default=position)
        assert acks.committed_offset == committed
        assert acks.acked_above() == tuple(sorted(o for o in acked if o > committed))
        assert decode(acks.commit_metadata()).acked == acks.acked_above()


@settings(deadline=None)
@given(st.integers(0, 2**32))
def test_takeovers_at_random_points_neither_lose_nor_redeliver_acked_messages(seed: int) -> None:
    rnd = random.Random(seed)
    log, offset = [], rnd.randrange(1_000)
    for _ in range(300):  # gaps stand for transaction markers and compaction
        log.append(offset)
        offset += rnd.choice((1, 1, 1, 2, 7))
    acked: set[int] = set()
    acks, fetched, pending = PartitionAcks(log[0]), 0, []
    committed_before = log[0]
    for _ in range(900):
        action = rnd.random()
        if action < 0.03:
            # The old dispatcher dies with its in-flight messages; the new one resumes from
            # the committed offset and metadata, and Kafka returns the log from there again.
            committed, metadata = acks.committed_offset, acks.commit_metadata()
            acks, pending = PartitionAcks.restore(committed, metadata), []
            fetched = next((i for i, o in enumerate(log) if o >= committed), len(log))
        elif action < 0.55 and fetched < len(log):
            offset = log[fetched]
            fetched += 1
            delivery = acks.deliver(offset)
            assert (delivery is Delivery.already_acked) == (offset in acked)
            if delivery is Delivery.first:
                pending.append(offset)
        elif pending:
            offset = pending.pop(rnd.randrange(len(pending)))
            assert acks.ack(offset).applied
            acked.add(offset)
        committed = acks.committed_offset
        assert committed >= committed_before
        assert all(o in acked for o in log if o < committed)
        committed_before = committed
