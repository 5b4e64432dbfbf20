"""The exactly-once state machine of one bucket's copier, apart from the I/O that carries out its
decisions (conveyor.replicate.copier): pure, with no Kafka, no threads and no clock, so that every
transition is tested from a table (tests/unit/replicate/test_bucket_state.py).

The copier reports what happened as an event; :func:`step` answers with the bucket's next
:class:`BucketState` and a decision, what the copier does next.

- taking over --TakenOver--> copying;
- taking over --TakeoverFailed (not fatal)--> taking over, after a back-off that doubles;
- taking over or copying --ProducerLost (by a newer owner)--> fenced;
- taking over or copying --ProducerLost (the producer's own state failed)--> taking over, with a
  new producer, since nobody else will while this worker holds the bucket;
- taking over or copying --Stop (the bucket revoked, the worker stopping)--> stopped;
- taking over or copying --Failed--> failed (the worker exits non-zero).

While copying, ``next`` holds only offsets committed to the route topic: a batch (Copied), an
earliest offset (StartsStored) or a gap (GapStored) committed moves it, and a batch not copied
(NotCopied) rewinds to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from conveyor.replicate import plan
from conveyor.replicate.plan import Gap, SourcePartition

#: Seconds the first failed takeover waits; each failure after it doubles the wait, up to the max.
TAKEOVER_BACKOFF = 1.0
TAKEOVER_BACKOFF_MAX = 30.0
#: Seconds before the earliest offsets of new partitions are asked again after a failure.
START_RETRY = 1.0
#: Seconds before a commit refused for a retriable reason is tried again.
COMMIT_RETRY = 1.0
#: Seconds a copier waits after an aborted write before the next, so a lasting failure does not spin.
AFTER_ABORT = 0.2
#: Least seconds between two measurements of the bucket's lag (the end offsets are cached ones).
LAG_INTERVAL = 1.0


class Phase(Enum):
    #: Fencing the bucket's previous owner and reading its stored offsets.
    taking_over = "taking over"
    copying = "copying"
    #: Asked to stop: the bucket was revoked or the worker is stopping.
    stopped = "stopped"
    #: A newer owner has the bucket; this copier writes nothing more.
    fenced = "fenced"
    #: An error the copier cannot handle; the worker exits non-zero.
    failed = "failed"


@dataclass(frozen=True)
class ProducerError:
    """A failure the copier's producer reported (from a KafkaError), as the decisions read it."""

    text: str
    #: The producer cannot be used any more.
    fatal: bool = False
    #: Another producer with the bucket's transactional id exists: a newer owner.
    fenced: bool = False
    #: The transaction can still be aborted, and what it held written again.
    abortable: bool = False
    retriable: bool = False


@dataclass(frozen=True)
class Refusal:
    """Why a batch was not copied: a record the destination refused (``source`` and ``offset``), or
    (``source`` None) a failure of the whole batch."""

    error: str
    source: SourcePartition | None = None
    offset: int | None = None
    #: The destination refuses the record for its size, and always will.
    too_large: bool = False


@dataclass(frozen=True)
class BucketState:
    phase: Phase = Phase.taking_over
    #: The next source offset of each partition, as the bucket's partition of the route topic holds it.
    next: Mapping[SourcePartition, int] = field(default_factory=dict)
    #: Partitions not copied until the worker restarts, each with the record that stopped it; kept
    #: through a new producer's takeover, since the record stays as large.
    stopped: Mapping[SourcePartition, Refusal] = field(default_factory=dict)
    #: Partitions the source consumer fetches (a new producer's takeover comes with a new consumer).
    assigned: frozenset[SourcePartition] = frozenset()
    #: Partitions whose earliest offsets were asked of the source and are not answered yet.
    asked: frozenset[SourcePartition] | None = None
    #: Monotonic time before which earliest offsets are not asked again after a failure.
    starts_retry_at: float = 0.0
    #: Seconds the next failed takeover waits.
    backoff: float = TAKEOVER_BACKOFF
    #: Monotonic time of each partition's last committed copy.
    last_copy: Mapping[SourcePartition, float] = field(default_factory=dict)
    #: Partitions that had records waiting when the lag was last measured.
    backlog: frozenset[SourcePartition] = frozenset()
    lag_checked: float = 0.0
    #: What failed the copier (phase failed); the worker logs it and exits non-zero.
    failure: BaseException | None = None


# -- events: what the copier reports --------------------------------------------------------------

@dataclass(frozen=True)
class TakenOver:
    """The previous owner is fenced (exactly once) and the bucket's stored offsets are read."""

    offsets: Mapping[SourcePartition, int]


@dataclass(frozen=True)
class TakeoverFailed:
    """Fencing or reading the stored offsets failed; ``error`` is None when the destination did not
    answer in time."""

    error: ProducerError | None


@dataclass(frozen=True)
class ProducerLost:
    """The producer cannot go on (the copier raised Fenced): fenced by a newer owner, or its own
    transactional state failed (INVALID_TXN_STATE after a just-created route topic)."""

    by_newer_owner: bool


@dataclass(frozen=True)
class Failed:
    error: BaseException


@dataclass(frozen=True)
class Stop:
    """The bucket was revoked (a rebalance moved it) or the worker is stopping."""


@dataclass(frozen=True)
class StartsAnswer:
    """The source's answer to every earliest offset asked: the offsets, or why there are none."""

    earliest: Mapping[SourcePartition, int] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class FindStarts:
    """A round of copying begins; ``wanted`` are the bucket's partitions the destination has, and
    ``answer`` is set once the source answered every earliest offset asked."""

    wanted: frozenset[SourcePartition]
    now: float
    answer: StartsAnswer | None = None


@dataclass(frozen=True)
class StartsStored:
    """The earliest offsets of new partitions were written to the route topic, or (``stored``
    False) their write was aborted."""

    earliest: Mapping[SourcePartition, int]
    stored: bool
    now: float


@dataclass(frozen=True)
class Assign:
    """After FindStarts (and StartsStored): which partitions the source consumer fetches from now."""

    wanted: frozenset[SourcePartition]
    now: float


@dataclass(frozen=True)
class Copied:
    """A batch is committed with ``next``, the next offset of each partition it held."""

    next: Mapping[SourcePartition, int]
    now: float


@dataclass(frozen=True)
class NotCopied:
    """A batch failed and its transaction is aborted; ``first`` is the first offset of each
    partition it held (the consumer's position is past all of them)."""

    first: Mapping[SourcePartition, int]
    refusals: tuple[Refusal, ...]


@dataclass(frozen=True)
class CommitFailed:
    error: ProducerError


@dataclass(frozen=True)
class AbortFailed:
    error: ProducerError


@dataclass(frozen=True)
class OutOfRange:
    """The source said "offset out of range" for ``source`` at fetch position ``at``; ``bounds`` are
    the partition's earliest and end offsets now, None when they cannot be read."""

    source: SourcePartition
    at: int
    bounds: tuple[int, int] | None
    found_ms: int


@dataclass(frozen=True)
class GapStored:
    """A gap and the offset past it were written together, or (``stored`` False) aborted."""

    gap: Gap
    resume: int
    stored: bool


@dataclass(frozen=True)
class LagMeasured:
    """The end offsets of assigned partitions (those the consumer has cached)."""

    ends: Mapping[SourcePartition, int]
    now: float


Event = (TakenOver | TakeoverFailed | ProducerLost | Failed | Stop | FindStarts | StartsStored | Assign | Copied
         | NotCopied | CommitFailed | AbortFailed | OutOfRange | GapStored | LagMeasured)


# -- decisions: what the copier does --------------------------------------------------------------

@dataclass(frozen=True)
class RetryTakeover:
    after: float


@dataclass(frozen=True)
class DropProducer:
    """The producer cannot go on: the copier raises Fenced, and then reports ProducerLost."""


@dataclass(frozen=True)
class Fail:
    """Raise the error: the copier fails (Failed)."""


@dataclass(frozen=True)
class AskStarts:
    partitions: frozenset[SourcePartition]


@dataclass(frozen=True)
class StoreStarts:
    earliest: Mapping[SourcePartition, int]


@dataclass(frozen=True)
class StartsUnknown:
    """The source could not answer for ``partitions`` (no leader yet, a source away): asked again."""

    partitions: frozenset[SourcePartition]
    error: str


@dataclass(frozen=True)
class AssignFrom:
    """Start fetching these partitions at these offsets (in topic and partition order)."""

    starts: tuple[tuple[SourcePartition, int], ...]


@dataclass(frozen=True)
class Pauses:
    """Seconds since the previous copy of each partition that had records waiting."""

    seconds: Mapping[SourcePartition, float]


@dataclass(frozen=True)
class Rewind:
    """Fetch each partition from its offset again, then stop fetching those ``stop`` names, each
    with the first record refused."""

    offsets: Mapping[SourcePartition, int]
    stop: Mapping[SourcePartition, Refusal] = field(default_factory=dict)
    wait: float = AFTER_ABORT


@dataclass(frozen=True)
class RetryCommit:
    after: float = COMMIT_RETRY


@dataclass(frozen=True)
class AbortBatch:
    """The transaction cannot commit but can be aborted: the batch is not copied (NotCopied)."""


@dataclass(frozen=True)
class Reposition:
    source: SourcePartition
    offset: int


@dataclass(frozen=True)
class Truncated:
    """The position is beyond the partition's end (a truncated log, a topic created again): fetch
    from its earliest offset, repeating copies rather than skipping records."""

    source: SourcePartition
    position: int
    offset: int


@dataclass(frozen=True)
class RecordGap:
    """Write the gap and ``resume``, the offset past it, in one transaction (then GapStored)."""

    gap: Gap
    resume: int


@dataclass(frozen=True)
class Lags:
    records: Mapping[SourcePartition, int]


Decision = (RetryTakeover | DropProducer | Fail | AskStarts | StoreStarts | StartsUnknown | AssignFrom | Pauses
            | Rewind | RetryCommit | AbortBatch | Reposition | Truncated | RecordGap | Lags)


@dataclass(frozen=True)
class Step:
    state: BucketState
    decision: Decision | None = None


class InvalidTransition(ValueError):
    """An event the copier cannot report in the bucket's phase: a fault in the copier."""


_LIVE = frozenset({Phase.taking_over, Phase.copying})
#: The phases in which each event can happen.
_PHASES: dict[type, frozenset[Phase]] = {
    TakenOver: frozenset({Phase.taking_over}), TakeoverFailed: frozenset({Phase.taking_over}),
    ProducerLost: _LIVE, Failed: _LIVE, Stop: _LIVE,
    **{kind: frozenset({Phase.copying}) for kind in (FindStarts, StartsStored, Assign, Copied, NotCopied,
                                                      CommitFailed, AbortFailed, OutOfRange, GapStored, LagMeasured)},
}


def step(state: BucketState, event: Event) -> Step:
    """The bucket's state after ``event``, and what the copier does about it."""
    phases = _PHASES.get(type(event))
    if phases is None:
        raise TypeError(f"not an event: {event!r}")
    if state.phase not in phases:
        raise InvalidTransition(f"{type(event).__name__} while {state.phase.value}")
    match event:
        case TakenOver(offsets):
            return Step(replace(state, phase=Phase.copying, next=dict(offsets)))
        case TakeoverFailed(error):
            if error is not None and error.fatal:
                return Step(state, DropProducer())
            return Step(replace(state, backoff=min(state.backoff * 2, TAKEOVER_BACKOFF_MAX)),
                        RetryTakeover(state.backoff))
        case ProducerLost(by_newer_owner=True):
            return Step(replace(state, phase=Phase.fenced))
        case ProducerLost():
            # A new producer takes the bucket over, and a new consumer starts with nothing assigned
            # and nothing asked; its takeover waits from the first back-off again.
            return Step(replace(state, phase=Phase.taking_over, assigned=frozenset(), asked=None,
                                backoff=TAKEOVER_BACKOFF))
        case Failed(error):
            return Step(replace(state, phase=Phase.failed, failure=error))
        case Stop():
            return Step(replace(state, phase=Phase.stopped))
        case FindStarts():
            return _find_starts(state, event)
        case StartsStored(earliest, stored, now):
            if stored:
                return Step(replace(state, next={**state.next, **earliest}))
            return Step(replace(state, starts_retry_at=now + START_RETRY))
        case Assign(wanted, now):
            new = sorted((p for p in _new(state, wanted) if p in state.next), key=_order)
            if not new:
                return Step(state)
            return Step(replace(state, assigned=state.assigned | set(new),
                                last_copy={**{p: now for p in new}, **state.last_copy}),
                        AssignFrom(tuple((p, state.next[p]) for p in new)))
        case Copied(next_offsets, now):
            pauses = {p: now - state.last_copy.get(p, now) for p in next_offsets if p in state.backlog}
            return Step(replace(state, next={**state.next, **next_offsets},
                                last_copy={**state.last_copy, **{p: now for p in next_offsets}}), Pauses(pauses))
        case NotCopied():
            return _not_copied(state, event)
        case CommitFailed(error):
            if error.fatal or error.fenced:
                return Step(state, DropProducer())
            if error.abortable:
                return Step(state, AbortBatch())
            return Step(state, RetryCommit() if error.retriable else Fail())
        case AbortFailed(error):
            return Step(state, DropProducer() if error.fatal else Fail())
        case OutOfRange():
            return _out_of_range(state, event)
        case GapStored(gap, resume, stored):
            source = SourcePartition(gap.topic, gap.partition)
            if not stored:  # found again, and written again, on the next fetch
                return Step(state, Reposition(source, gap.first))
            return Step(replace(state, next={**state.next, source: resume}), Reposition(source, resume))
        case LagMeasured(ends, now):
            lags = {p: max(0, end - state.next.get(p, 0)) for p, end in ends.items()}
            waiting = {p for p, lag in lags.items() if lag > 0}
            return Step(replace(state, lag_checked=now, backlog=(state.backlog - set(lags)) | waiting), Lags(lags))


def lag_due(state: BucketState, now: float) -> bool:
    return now - state.lag_checked >= LAG_INTERVAL


def to_resolve(state: BucketState, out_of_range: Mapping[SourcePartition, int],
               rewound: frozenset[SourcePartition]) -> tuple[tuple[SourcePartition, int], ...]:
    """The out-of-range reports to act on, in order: not those of partitions a failed batch just
    rewound (fetched from their offset again, they are reported again there), nor of partitions
    no longer fetched."""
    return tuple(sorted(((p, at) for p, at in out_of_range.items() if p not in rewound and p in state.assigned),
                        key=lambda item: _order(item[0])))


def _order(source: SourcePartition) -> tuple[str, int]:
    return source.topic, source.partition


def _new(state: BucketState, wanted: frozenset[SourcePartition]) -> set[SourcePartition]:
    return set(wanted) - set(state.stopped) - state.assigned


def _find_starts(state: BucketState, event: FindStarts) -> Step:
    """New partitions the route has no offset for are stored at their earliest offset before they are
    copied. Asked without waiting, since a partition too new to have a leader can hold the answer
    back while the bucket's other partitions go on copying; stored on a later round."""
    unknown = frozenset(p for p in _new(state, event.wanted) if p not in state.next)
    if not unknown:
        return Step(state)  # an answer still coming is taken once new partitions want it
    if state.asked is None:
        if event.now < state.starts_retry_at:
            return Step(state)
        return Step(replace(state, asked=unknown), AskStarts(unknown))
    answer = event.answer
    if answer is None:
        return Step(state)
    if answer.error is not None:
        return Step(replace(state, asked=None, starts_retry_at=event.now + START_RETRY),
                    StartsUnknown(state.asked, answer.error))
    # Partitions the bucket lost meanwhile (a partition never shrinks, but a topic can go) are left.
    earliest = {p: offset for p, offset in answer.earliest.items() if p in unknown}
    return Step(replace(state, asked=None), StoreStarts(earliest))


def _not_copied(state: BucketState, event: NotCopied) -> Step:
    """Every partition of the batch goes back to its committed offset, and a partition whose record
    the destination refuses for its size stops there: copied later, that record would be refused
    again, and skipped, it would be lost."""
    stop: dict[SourcePartition, Refusal] = {}
    for refusal in event.refusals:
        # A produce request refused for its size reports each of its records: one stop a partition.
        if refusal.source is not None and refusal.too_large:
            stop.setdefault(refusal.source, refusal)
    rewind = {p: state.next.get(p, offset) for p, offset in event.first.items()}
    return Step(replace(state, stopped={**state.stopped, **stop}, assigned=state.assigned - set(stop)),
                Rewind(rewind, stop))


def _out_of_range(state: BucketState, event: OutOfRange) -> Step:
    source = event.source
    position = state.next.get(source, event.at)
    if event.bounds is None:  # tried again on the next fetch
        return Step(state, Reposition(source, position))
    low, high = event.bounds
    resume = plan.after_out_of_range(source, position, low, high)
    if resume.gap is not None:
        return Step(state, RecordGap(replace(resume.gap, found_ms=event.found_ms), resume.offset))
    if resume.truncated:
        return Step(state, Truncated(source, position, resume.offset))
    return Step(state, Reposition(source, resume.offset))
