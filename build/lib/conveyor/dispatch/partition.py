"""What one partition owes its clients: fetched messages, who holds which, deadlines, attempts. Pure.

``PartitionAcks`` knows which offsets are acked and what may be committed; this adds the rest of
serving a partition to many clients: messages fetched and not yet handed out (kept in Kafka's
order, which the tracker needs), redeliveries (nacked, past their ack deadline, or held by a
client that went away), nack delays, attempt counts, and the messages that used up their attempts
and go to the dead-letter topic. Times are plain seconds passed in by the caller.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Generic, Hashable, NamedTuple, TypeVar

from conveyor.dispatch.acktracker import METADATA_LIMIT, AckOutcome, AckResult, Delivery, PartitionAcks

H = TypeVar("H", bound=Hashable)
#: Stale deadline entries (their message acked since) tolerated before the heap is rebuilt.
_HEAP_SLACK = 1024


class Record(NamedTuple):
    """A fetched Kafka message, reduced to what clients receive."""

    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


class Reason(str, Enum):
    """Why a delivered message came back unacked; the dead-letter header says the last one."""

    nacked = "nacked"
    deadline = "ack deadline passed"
    disconnected = "client disconnected"


#: Why an ack or nack changed nothing (a metric label).
STALE_NACK = "stale nack"


@dataclass(frozen=True)
class Handout:
    offset: int
    record: Record
    attempt: int


@dataclass(frozen=True)
class DeadLetter:
    offset: int
    record: Record
    attempts: int
    reason: Reason


@dataclass(frozen=True)
class Limits:
    ack_deadline: float
    max_attempts: int
    metadata_limit: int = METADATA_LIMIT
    prefetch: int = 2000


class PartitionQueue(Generic[H]):
    """One assigned partition. ``acks`` is the restored tracker, or None when the group has no
    commit for the partition yet: then tracking starts at the first offset Kafka returns."""

    def __init__(self, acks: PartitionAcks | None, limits: Limits) -> None:
        self.acks = acks
        self._limits = limits
        self._records: dict[int, Record] = {}  # fetched and not acked
        self._fresh: deque[int] = deque()  # never handed out, Kafka's order
        self._retry: deque[int] = deque()  # to hand out again now
        self._delayed: list[tuple[float, int]] = []  # (ready at, offset), nacked with a delay
        self._deadlines: list[tuple[float, int, int]] = []  # (deadline, offset, attempt)
        self._attempts: dict[int, int] = {}
        self._holder: dict[int, H] = {}  # offset -> client holding it now
        self._dead: list[DeadLetter] = []
        # Kafka re-sends offsets after a pause or a fetch retry; what was fetched once is kept.
        self._next_fetch = acks.committed_offset if acks is not None else 0

    @property
    def buffered(self) -> int:
        """Fetched and never handed out."""
        return len(self._fresh)

    @property
    def ready(self) -> int:
        return len(self._fresh) + len(self._retry)

    @property
    def in_flight(self) -> int:
        return len(self._holder)

    def add(self, offset: int, record: Record) -> bool:
        """A message Kafka returned; False for one already fetched."""
        if offset < self._next_fetch:
            return False
        if self.acks is None:
            self.acks = PartitionAcks(offset)
        self._next_fetch = offset + 1
        self._records[offset] = record
        self._fresh.append(offset)
        return True

    def take(self, limit: int, holder: H, now: float) -> list[Handout]:
        """Up to ``limit`` messages for ``holder``: redeliveries first, then fresh ones while the
        tracker says their acks still fit in the commit metadata."""
        out: list[Handout] = []
        acks = self.acks
        if acks is None:
            return out
        retry, fresh = self._retry, self._fresh
        while retry and len(out) < limit:
            offset = retry.popleft()
            if offset in self._records and not acks.is_acked(offset) and offset not in self._holder:
                acks.deliver(offset)
                out.append(self._hand_out(offset, holder, now))
        while fresh and len(out) < limit:
            offset = fresh[0]
            if not acks.may_deliver(offset, self._limits.metadata_limit):
                break
            fresh.popleft()
            if acks.deliver(offset) is Delivery.already_acked:
                del self._records[offset]  # acked before a takeover: never again
                continue
            out.append(self._hand_out(offset, holder, now))
        return out

    def ack(self, offset: int) -> AckResult:
        assert self.acks is not None, "an ack before any delivery is refused by the caller"
        result = self.acks.ack(offset)
        if result.outcome is AckOutcome.acked:
            self._forget(offset)
        return result

    def acknowledge(self, offset: int) -> AckOutcome:
        """A client's ack, from whichever client: a redelivered message may be acked by either copy."""
        return AckOutcome.never_delivered if self.acks is None else self.ack(offset).outcome

    def nack(self, offset: int, holder: H, ready_at: float, now: float) -> str | None:
        """Give ``offset`` back for redelivery at ``ready_at``; None when applied, else why not.
        Only the client holding the latest delivery may nack it: an older holder's nack is late."""
        acks = self.acks
        if acks is None:
            return AckOutcome.never_delivered.value
        if self._holder.get(offset) == holder:
            self._give_back(offset, Reason.nacked, ready_at, now)
            return None
        if offset < acks.committed_offset:
            return AckOutcome.below_committed.value
        if acks.is_acked(offset):
            return AckOutcome.already_acked.value
        return STALE_NACK if offset in self._attempts else AckOutcome.never_delivered.value

    def expire(self, now: float) -> int:
        """Take back deliveries past their ack deadline and release due nack delays; how many
        deliveries timed out."""
        expired = 0
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, offset, attempt = heapq.heappop(deadlines)
            if offset in self._holder and self._attempts.get(offset) == attempt:
                self._give_back(offset, Reason.deadline, now, now)
                expired += 1
        if len(deadlines) > 2 * len(self._holder) + _HEAP_SLACK:
            self._deadlines = [d for d in deadlines if self._attempts.get(d[1]) == d[2] and d[1] in self._holder]
            heapq.heapify(self._deadlines)
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            self._retry.append(heapq.heappop(delayed)[1])
        return expired

    def release(self, holder: H, now: float) -> int:
        """Take back everything ``holder`` holds (it disconnected); how many."""
        held = [offset for offset, h in self._holder.items() if h == holder]
        for offset in held:
            self._give_back(offset, Reason.disconnected, now, now)
        return len(held)

    def take_dead(self) -> list[DeadLetter]:
        """Messages out of attempts; settle each with ``dead_lettered`` once the dead-letter topic has it,
        or hand it back with ``dead_again`` when writing it failed."""
        dead, self._dead = self._dead, []
        return dead

    def dead_again(self, letter: DeadLetter) -> None:
        self._dead.append(letter)

    def dead_lettered(self, letter: DeadLetter) -> None:
        """The dead-letter topic has it: done with, like an ack."""
        self.ack(letter.offset)

    def commit_point(self) -> tuple[int, str] | None:
        """(offset, metadata) to commit, or None before the first message of an uncommitted partition."""
        if self.acks is None:
            return None
        return self.acks.committed_offset, self.acks.commit_metadata()

    def wants_fetch(self, paused: bool = False) -> bool:
        """False: pause the partition (enough buffered, or the metadata bound is near the cap).

        A paused partition resumes only once half the prefetch is handed out: librdkafka drops
        what it fetched ahead for a paused partition, so a resume costs a fetch round trip, and
        the other half keeps the clients busy meanwhile."""
        if len(self._fresh) >= (self._limits.prefetch // 2 if paused else self._limits.prefetch):
            return False
        return self.acks is None or self.acks.may_fetch_more(self._limits.metadata_limit)

    def _hand_out(self, offset: int, holder: H, now: float) -> Handout:
        attempt = self._attempts.get(offset, 0) + 1
        self._attempts[offset] = attempt
        self._holder[offset] = holder
        heapq.heappush(self._deadlines, (now + self._limits.ack_deadline, offset, attempt))
        return Handout(offset, self._records[offset], attempt)

    def _give_back(self, offset: int, reason: Reason, ready_at: float, now: float) -> None:
        assert self.acks is not None
        del self._holder[offset]
        self.acks.nack(offset)
        attempts = self._attempts[offset]
        if attempts >= self._limits.max_attempts:
            self._dead.append(DeadLetter(offset, self._records[offset], attempts, reason))
        elif ready_at > now:
            heapq.heappush(self._delayed, (ready_at, offset))
        else:
            self._retry.append(offset)

    def _forget(self, offset: int) -> None:
        self._records.pop(offset, None)
        self._holder.pop(offset, None)
        self._attempts.pop(offset, None)
