"""The bucket copier's state machine, from a table: one row per transition, each with the state
before, the event, the state after and the decision (no Kafka, no threads, no clock)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from confluent_kafka import KafkaError

from conveyor.replicate.bucket_state import (
    AbortBatch, AbortFailed, AskStarts, Assign, AssignFrom, BucketState, CommitFailed, Copied, Decision,
    DropProducer, Event, Fail, Failed, FindStarts, GapStored, InvalidTransition, LagMeasured, Lags, NotCopied,
    OutOfRange, Pauses, Phase, ProducerError, ProducerLost, RecordGap, Refusal, Reposition, RetryCommit,
    RetryTakeover, Rewind, StartsAnswer, StartsStored, StartsUnknown, Stop, StoreStarts, TakenOver, TakeoverFailed,
    Truncated, lag_due, step, to_resolve,
)
from conveyor.replicate.errors import CopyFailure, producer_error
from conveyor.replicate.plan import Gap, SourcePartition

A, B, NEW, GONE = SourcePartition("a", 0), SourcePartition("a", 1), SourcePartition("b", 0), SourcePartition("c", 0)
TAKING_OVER = BucketState()
COPYING = BucketState(Phase.copying, next={A: 10, B: 20}, assigned=frozenset({A, B}), last_copy={A: 90.0, B: 90.0})
#: NEW is in the bucket now, and the route has no offset for it.
ASKED = replace(COPYING, asked=frozenset({NEW}))
BOOM = RuntimeError("boom")

TIMED_OUT = ProducerError("Local: Timed out", retriable=True)
FENCED = ProducerError("Broker: Producer fenced", fenced=True)
FATAL_FENCED = ProducerError("Local: This instance has been fenced", fatal=True, fenced=True)
FATAL = ProducerError("Broker: Invalid transaction state", fatal=True)
ABORTABLE = ProducerError("Broker: Not enough replicas", abortable=True, retriable=True)
REFUSED = ProducerError("Broker: Invalid request")
LARGE = Refusal("Broker: Message size too large", B, 25, too_large=True)
SEND_FAILED = Refusal("Broker: Not leader for partition", A, 12)
FLUSH_TIMED_OUT = Refusal("Local: Timed out")


@dataclass(frozen=True)
class Row:
    before: BucketState
    event: Event
    after: BucketState
    decision: Decision | None = None


ROWS = {
    # -- taking the bucket over ------------------------------------------------------------------
    "takeover resumes at the stored offsets": Row(
        TAKING_OVER, TakenOver({A: 10}), replace(TAKING_OVER, phase=Phase.copying, next={A: 10})),
    "takeover of a bucket nothing was stored for": Row(
        TAKING_OVER, TakenOver({}), replace(TAKING_OVER, phase=Phase.copying)),
    "takeover timed out: retried after the back-off, which doubles": Row(
        TAKING_OVER, TakeoverFailed(None), replace(TAKING_OVER, backoff=2.0), RetryTakeover(1.0)),
    "takeover failed for a reason that passes: retried": Row(
        replace(TAKING_OVER, backoff=4.0), TakeoverFailed(TIMED_OUT), replace(TAKING_OVER, backoff=8.0),
        RetryTakeover(4.0)),
    "takeover back-off stops doubling at 30 s": Row(
        replace(TAKING_OVER, backoff=16.0), TakeoverFailed(None), replace(TAKING_OVER, backoff=30.0),
        RetryTakeover(16.0)),
    "takeover with a fenced code that is not fatal: retried": Row(
        TAKING_OVER, TakeoverFailed(FENCED), replace(TAKING_OVER, backoff=2.0), RetryTakeover(1.0)),
    "takeover by a fatal producer: the producer is dropped": Row(
        TAKING_OVER, TakeoverFailed(FATAL), TAKING_OVER, DropProducer()),
    "fenced during takeover: a newer owner has the bucket": Row(
        TAKING_OVER, ProducerLost(by_newer_owner=True), replace(TAKING_OVER, phase=Phase.fenced)),
    # -- producer lost, stop, failure --------------------------------------------------------------
    "fenced while copying: stops without writing anything more": Row(
        COPYING, ProducerLost(by_newer_owner=True), replace(COPYING, phase=Phase.fenced)),
    "producer's own state failed: a new producer takes over, with a new consumer": Row(
        replace(ASKED, backoff=8.0, stopped={B: LARGE}), ProducerLost(by_newer_owner=False),
        replace(COPYING, phase=Phase.taking_over, assigned=frozenset(), stopped={B: LARGE})),
    "bucket revoked (rebalance) or worker stopping, while copying": Row(
        COPYING, Stop(), replace(COPYING, phase=Phase.stopped)),
    "bucket revoked while taking over": Row(TAKING_OVER, Stop(), replace(TAKING_OVER, phase=Phase.stopped)),
    "an unexpected error fails the copier": Row(COPYING, Failed(BOOM), replace(COPYING, phase=Phase.failed,
                                                                                failure=BOOM)),
    "an unexpected error while taking over": Row(
        TAKING_OVER, Failed(BOOM), replace(TAKING_OVER, phase=Phase.failed, failure=BOOM)),
    # -- commit ------------------------------------------------------------------------------------
    "batch committed: next offsets move": Row(
        COPYING, Copied({A: 15}, 100.0), replace(COPYING, next={A: 15, B: 20}, last_copy={A: 100.0, B: 90.0}),
        Pauses({})),
    "batch committed for a partition that had records waiting: its pause is measured": Row(
        replace(COPYING, backlog=frozenset({A})), Copied({A: 15, B: 21}, 100.0),
        replace(COPYING, backlog=frozenset({A}), next={A: 15, B: 21}, last_copy={A: 100.0, B: 100.0}),
        Pauses({A: 10.0})),
    "commit refused for a reason that passes: tried again": Row(COPYING, CommitFailed(TIMED_OUT), COPYING,
                                                                RetryCommit(1.0)),
    "fence during commit: the producer is dropped": Row(COPYING, CommitFailed(FENCED), COPYING, DropProducer()),
    "fatal error during commit: the producer is dropped": Row(COPYING, CommitFailed(FATAL), COPYING, DropProducer()),
    "commit that needs an abort: the batch is aborted": Row(COPYING, CommitFailed(ABORTABLE), COPYING, AbortBatch()),
    "commit refused for good: the copier fails": Row(COPYING, CommitFailed(REFUSED), COPYING, Fail()),
    # -- abort -------------------------------------------------------------------------------------
    "abort after a failed send: every partition of the batch back to its committed offset": Row(
        COPYING, NotCopied({A: 10, B: 20}, (SEND_FAILED,)), COPYING, Rewind({A: 10, B: 20})),
    "abort of a batch that failed as a whole (a flush timed out)": Row(
        COPYING, NotCopied({A: 10}, (FLUSH_TIMED_OUT,)), COPYING, Rewind({A: 10})),
    "abort of a batch with a partition nothing was committed for yet: back to its first offset": Row(
        replace(COPYING, next={B: 20}), NotCopied({A: 3, B: 20}, (SEND_FAILED,)), replace(COPYING, next={B: 20}),
        Rewind({A: 3, B: 20})),
    "abort that fails fatally: the producer is dropped": Row(COPYING, AbortFailed(FATAL), COPYING, DropProducer()),
    "abort that fails otherwise: the copier fails": Row(COPYING, AbortFailed(TIMED_OUT), COPYING, Fail()),
    # -- too large -----------------------------------------------------------------------------------
    "too-large event: the batch is rewound and its partition stopped, nothing skipped": Row(
        COPYING, NotCopied({A: 10, B: 20}, (LARGE, SEND_FAILED)),
        replace(COPYING, stopped={B: LARGE}, assigned=frozenset({A})), Rewind({A: 10, B: 20}, {B: LARGE})),
    "too-large produce request: each record of it refused, its partition stopped once, at the first": Row(
        COPYING, NotCopied({A: 10, B: 20}, (LARGE, replace(LARGE, offset=26))),
        replace(COPYING, stopped={B: LARGE}, assigned=frozenset({A})), Rewind({A: 10, B: 20}, {B: LARGE})),
    "too large said of no record stops no partition": Row(
        COPYING, NotCopied({A: 10}, (Refusal("Broker: Message size too large", too_large=True),)), COPYING,
        Rewind({A: 10})),
    "a stopped partition is never fetched again": Row(
        replace(COPYING, assigned=frozenset({A}), stopped={B: LARGE}), Assign(frozenset({A, B}), 100.0),
        replace(COPYING, assigned=frozenset({A}), stopped={B: LARGE})),
    # -- new partitions: stored at their earliest offset first -----------------------------------
    "new partition with no stored offset: its earliest offset is asked": Row(
        COPYING, FindStarts(frozenset({A, B, NEW}), 100.0), ASKED, AskStarts(frozenset({NEW}))),
    "earliest offsets not answered yet: the bucket's other partitions go on": Row(
        ASKED, FindStarts(frozenset({A, B, NEW}), 100.0), ASKED),
    "earliest offsets answered: stored before the partition is fetched": Row(
        ASKED, FindStarts(frozenset({A, B, NEW}), 100.0, StartsAnswer({NEW: 0})), COPYING, StoreStarts({NEW: 0})),
    "earliest offsets of a partition the bucket lost meanwhile are not stored": Row(
        ASKED, FindStarts(frozenset({A, B, NEW}), 100.0, StartsAnswer({NEW: 0, GONE: 4})), COPYING,
        StoreStarts({NEW: 0})),
    "an answer no new partition wants now is kept for one that will": Row(
        ASKED, FindStarts(frozenset({A, B}), 100.0, StartsAnswer({NEW: 0})), ASKED),
    "earliest offsets unknown (no leader yet): asked again a second later": Row(
        ASKED, FindStarts(frozenset({A, B, NEW}), 100.0, StartsAnswer(error="Broker: Leader not available")),
        replace(COPYING, starts_retry_at=101.0), StartsUnknown(frozenset({NEW}), "Broker: Leader not available")),
    "earliest offsets not asked again before the retry time": Row(
        replace(COPYING, starts_retry_at=101.0), FindStarts(frozenset({A, B, NEW}), 100.5),
        replace(COPYING, starts_retry_at=101.0)),
    "earliest offsets stored: the partition has a committed offset": Row(
        COPYING, StartsStored({NEW: 0}, True, 100.0), replace(COPYING, next={A: 10, B: 20, NEW: 0})),
    "earliest offsets not stored: asked again a second later": Row(
        COPYING, StartsStored({NEW: 0}, False, 100.0), replace(COPYING, starts_retry_at=101.0)),
    "a partition with a stored offset is fetched from it, in topic and partition order": Row(
        replace(COPYING, next={A: 10, B: 20, NEW: 0}, assigned=frozenset()), Assign(frozenset({NEW, B, A}), 100.0),
        replace(COPYING, next={A: 10, B: 20, NEW: 0}, assigned=frozenset({A, B, NEW}),
                last_copy={A: 90.0, B: 90.0, NEW: 100.0}),
        AssignFrom(((A, 10), (B, 20), (NEW, 0)))),
    "partitions all fetched already: nothing to assign": Row(COPYING, Assign(frozenset({A, B}), 100.0), COPYING),
    "a partition with no stored offset is not fetched": Row(
        replace(COPYING, assigned=frozenset({A})), Assign(frozenset({A, NEW}), 100.0),
        replace(COPYING, assigned=frozenset({A}))),
    # -- gaps: offsets retention deleted before they were copied ----------------------------------
    "gap: the deleted offsets are recorded with the offset past them": Row(
        COPYING, OutOfRange(A, 12, (30, 50), 7), COPYING, RecordGap(Gap("a", 0, 10, 29, found_ms=7), 30)),
    "gap at the start of a bucket's partition: from its stored earliest offset": Row(
        replace(COPYING, next={A: 10, B: 20, NEW: 0}), OutOfRange(NEW, 0, (100, 120), 7),
        replace(COPYING, next={A: 10, B: 20, NEW: 0}), RecordGap(Gap("b", 0, 0, 99), 100)),
    "gap recorded: the partition resumes past it": Row(
        COPYING, GapStored(Gap("a", 0, 10, 29), 30, True), replace(COPYING, next={A: 30, B: 20}), Reposition(A, 30)),
    "gap not recorded: fetched again where it was, found again": Row(
        COPYING, GapStored(Gap("a", 0, 10, 29), 30, False), COPYING, Reposition(A, 10)),
    "position beyond the source's end (truncated): copied again from the earliest": Row(
        COPYING, OutOfRange(A, 10, (0, 5), 7), COPYING, Truncated(A, 10, 0)),
    "back in range since the fetch failed: nothing lost": Row(
        COPYING, OutOfRange(A, 10, (5, 50), 7), COPYING, Reposition(A, 10)),
    "offsets that cannot be read now: tried again where it was": Row(
        COPYING, OutOfRange(A, 10, None, 7), COPYING, Reposition(A, 10)),
    # -- lag -------------------------------------------------------------------------------------------
    "lag measured: the partitions with records waiting are remembered": Row(
        replace(COPYING, backlog=frozenset({B, NEW})), LagMeasured({A: 15, B: 20}, 100.0),
        replace(COPYING, backlog=frozenset({A, NEW}), lag_checked=100.0), Lags({A: 5, B: 0})),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_transition(row: Row) -> None:
    result = step(row.before, row.event)
    assert (result.state, result.decision) == (row.after, row.decision)


@pytest.mark.parametrize(("state", "event"), [
    (TAKING_OVER, Copied({A: 1}, 1.0)),
    (TAKING_OVER, CommitFailed(FENCED)),
    (COPYING, TakenOver({})),
    (replace(COPYING, phase=Phase.fenced), Stop()),
    (replace(COPYING, phase=Phase.stopped), ProducerLost(by_newer_owner=False)),
    (replace(COPYING, phase=Phase.failed), Failed(BOOM)),
])
def test_events_that_cannot_happen_in_a_phase_are_refused(state: BucketState, event: Event) -> None:
    with pytest.raises(InvalidTransition):
        step(state, event)


def test_fence_during_commit_ends_the_bucket_with_nothing_more_written() -> None:
    dropped = step(COPYING, CommitFailed(FATAL_FENCED))
    assert dropped.decision == DropProducer()
    assert step(dropped.state, ProducerLost(by_newer_owner=True)).state.phase is Phase.fenced


def test_a_stopped_partition_stays_stopped_through_a_new_producer_s_takeover() -> None:
    stopped = step(COPYING, NotCopied({A: 10, B: 20}, (LARGE,))).state
    retaken = step(step(stopped, ProducerLost(by_newer_owner=False)).state, TakenOver({A: 10, B: 20})).state
    assigned = step(retaken, Assign(frozenset({A, B}), 5.0))
    assert assigned.decision == AssignFrom(((A, 10),))
    assert assigned.state.stopped == {B: LARGE}


def test_out_of_range_reports_of_rewound_or_unfetched_partitions_wait_for_the_next_fetch() -> None:
    found = {B: 20, NEW: 0, A: 10}
    assert to_resolve(COPYING, found, frozenset()) == ((A, 10), (B, 20))
    assert to_resolve(COPYING, found, frozenset({A})) == ((B, 20),)


def test_lag_is_measured_once_a_second() -> None:
    measured = replace(COPYING, lag_checked=100.0)
    assert not lag_due(measured, 100.9)
    assert lag_due(measured, 101.0)


@pytest.mark.parametrize(("error", "expected"), [
    (KafkaError(KafkaError.PRODUCER_FENCED, "fenced"), ProducerError("fenced", fenced=True)),
    (KafkaError(KafkaError._FENCED, "fenced", fatal=True), ProducerError("fenced", fatal=True, fenced=True)),
    (KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, "epoch"), ProducerError("epoch", fenced=True)),
    (KafkaError(KafkaError.INVALID_TXN_STATE, "state", fatal=True), ProducerError("state", fatal=True)),
    (KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, "isr", retriable=True, txn_requires_abort=True),
     ProducerError("isr", abortable=True, retriable=True)),
])
def test_producer_errors_as_the_machine_reads_them(error: KafkaError, expected: ProducerError) -> None:
    assert producer_error(error) == expected


def test_only_a_refusal_for_size_is_too_large() -> None:
    large = CopyFailure(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "large"), B, 25).refusal()
    assert large == Refusal("large", B, 25, too_large=True)
    assert CopyFailure(KafkaError(KafkaError.RECORD_LIST_TOO_LARGE, "list"), B, 25).refusal().too_large
    assert not CopyFailure(KafkaError(KafkaError._TIMED_OUT, "timed out")).refusal().too_large


def test_what_is_not_an_event_is_refused() -> None:
    with pytest.raises(TypeError):
        step(COPYING, Pauses({}))  # type: ignore[arg-type]
