"""Records of one partition that a share group lent this node, served to many clients. Pure.

The broker keeps each record's state (KIP-932): a share consumer acquires records under a lock,
and the record's delivery count is its attempt. This holds what the node has acquired and not yet
settled: records waiting for a client, who holds which, deadlines, nack delays, and the
settlements (ACCEPT or RELEASE) each share consumer must send. Whatever a client gives back goes
back to the broker (RELEASE), which may lend it to any node; the node never redelivers locally.
A record whose attempts are used up goes to the dead-letter topic and is then ACCEPTed.

The node must settle a record before its broker lock ends, so every record has a local deadline
at ``acquired + lock_hold``: unacked then, it is released (or dead-lettered) by the node itself.
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from enum import Enum
from typing import Generic, Hashable, NamedTuple, TypeVar

from conveyor.dispatch.acktracker import AckOutcome
from conveyor.dispatch.partition import STALE_NACK, DeadLetter, Handout, Reason, Record

H = TypeVar("H", bound=Hashable)
#: Settled offsets remembered, to tell a repeated or late ack from a wrong one.
_REMEMBER = 4096


class Settle(str, Enum):
    accept = "accept"
    release = "release"


#: Why an ack changed nothing: the node gave the record back to the broker before it came.
TAKEN_BACK = "taken back"


@dataclass(frozen=True)
class ShareLimits:
    ack_deadline: float
    max_attempts: int
    #: Seconds the node may keep an acquired record: the group's lock duration minus a margin.
    lock_hold: float


class _Lent(NamedTuple):
    record: Record
    attempt: int
    consumer: int
    deadline: float  # the lock's end, as the node counts it


class SharePartition(Generic[H]):
    def __init__(self, limits: ShareLimits) -> None:
        self._limits = limits
        self._lent: dict[int, _Lent] = {}
        self._fresh: deque[int] = deque()  # never handed out on this acquisition
        self._holder: dict[int, H] = {}
        self._deadlines: list[tuple[float, int, int]] = []  # (deadline, offset, attempt)
        self._delayed: list[tuple[float, int]] = []  # (release at, offset), nacked with a delay
        self._dead: list[DeadLetter] = []
        self._dying: set[int] = set()  # on their way to the dead-letter topic
        self._waiting: set[int] = set()  # held back for a nack's delay
        self._settled: dict[int, list[tuple[int, Settle]]] = {}
        self._past: OrderedDict[int, Settle] = OrderedDict()
        self._per_consumer: Counter[int] = Counter()

    @property
    def ready(self) -> int:
        return len(self._fresh)

    @property
    def in_flight(self) -> int:
        return len(self._holder)

    @property
    def lent(self) -> int:
        """Acquired and not settled yet (waiting, held, delayed or being dead-lettered)."""
        return len(self._lent)

    def unsettled(self, consumer: int) -> int:
        """Records ``consumer`` acquired that are not settled: it may poll again at 0."""
        return self._per_consumer[consumer]

    def add(self, offset: int, record: Record, attempt: int, consumer: int, now: float) -> None:
        """A record ``consumer`` acquired, with the broker's delivery count as ``attempt``."""
        previous = self._lent.get(offset)
        if previous is not None:  # its lock ended before the node settled it: that copy is void
            self._settle(offset, previous.consumer, Settle.release)
        self._lent[offset] = _Lent(record, attempt, consumer, now + self._limits.lock_hold)
        self._per_consumer[consumer] += 1
        self._past.pop(offset, None)
        if attempt > self._limits.max_attempts:
            # Its last attempt ended without a word to this node (another node died holding it,
            # or a lock ran out): dead-letter it rather than let the broker drop it silently.
            self._die(DeadLetter(offset, record, attempt - 1, Reason.deadline))
        else:
            self._fresh.append(offset)
            heapq.heappush(self._deadlines, (now + self._limits.lock_hold, offset, attempt))

    def take(self, limit: int, holder: H, now: float) -> list[Handout]:
        out: list[Handout] = []
        while self._fresh and len(out) < limit:
            offset = self._fresh.popleft()
            lent = self._lent.get(offset)
            if lent is None:
                continue
            self._holder[offset] = holder
            heapq.heappush(self._deadlines, (min(now + self._limits.ack_deadline, lent.deadline), offset,
                                             lent.attempt))
            out.append(Handout(offset, lent.record, lent.attempt))
        return out

    def acknowledge(self, offset: int) -> AckOutcome:
        if offset in self._holder:
            del self._holder[offset]
            self._settle(offset, self._lent[offset].consumer, Settle.accept)
            return AckOutcome.acked
        past = self._past.get(offset)
        if past is Settle.accept:
            return AckOutcome.already_acked
        return AckOutcome.never_delivered

    def nack(self, offset: int, holder: H, ready_at: float, now: float) -> str | None:
        if self._holder.get(offset) != holder:
            if offset in self._past or offset in self._lent:
                return TAKEN_BACK if self._past.get(offset) is Settle.release else STALE_NACK
            return AckOutcome.never_delivered.value
        del self._holder[offset]
        lent = self._lent[offset]
        if lent.attempt >= self._limits.max_attempts:
            self._die(DeadLetter(offset, lent.record, lent.attempt, Reason.nacked))
        elif ready_at > now:
            # RELEASE makes a record available at once, so the delay is served by holding it
            # here, no longer than the lock allows.
            heapq.heappush(self._delayed, (min(ready_at, lent.deadline), offset))
            self._waiting.add(offset)
        else:
            self._settle(offset, lent.consumer, Settle.release)
        return None

    def expire(self, now: float) -> int:
        """Give back deliveries past their deadline, records about to outlive their lock, and
        due nack delays; how many deliveries timed out."""
        timed_out = 0
        while self._deadlines and self._deadlines[0][0] <= now:
            _, offset, attempt = heapq.heappop(self._deadlines)
            lent = self._lent.get(offset)
            if lent is None or lent.attempt != attempt or offset in self._dying:
                continue
            if offset in self._holder:
                del self._holder[offset]
                timed_out += 1
                self._give_back(offset, lent, Reason.deadline)
            elif lent.deadline <= now and offset not in self._waiting:
                self._fresh_remove(offset)
                self._settle(offset, lent.consumer, Settle.release)
        while self._delayed and self._delayed[0][0] <= now:
            _, offset = heapq.heappop(self._delayed)
            self._waiting.discard(offset)
            lent = self._lent.get(offset)
            if lent is not None:
                self._settle(offset, lent.consumer, Settle.release)
        return timed_out

    def release(self, holder: H, now: float) -> int:
        """Give back everything ``holder`` holds (it disconnected); how many."""
        held = [offset for offset, h in self._holder.items() if h == holder]
        for offset in held:
            del self._holder[offset]
            self._give_back(offset, self._lent[offset], Reason.disconnected)
        return len(held)

    def release_all(self, consumer: int) -> None:
        """Give back everything ``consumer`` acquired (the node stops): another node gets it now
        rather than when the locks end."""
        for offset, lent in list(self._lent.items()):
            if lent.consumer == consumer:
                self._holder.pop(offset, None)
                self._waiting.discard(offset)
                self._dying.discard(offset)
                self._fresh_remove(offset)
                self._settle(offset, consumer, Settle.release)

    def take_settled(self, consumer: int) -> list[tuple[int, Settle]]:
        """Settlements ``consumer`` must send to the broker: (offset, ACCEPT or RELEASE)."""
        return self._settled.pop(consumer, [])

    def take_dead(self) -> list[DeadLetter]:
        dead, self._dead = self._dead, []
        return dead

    def dead_again(self, letter: DeadLetter) -> None:
        self._dead.append(letter)

    def dead_lettered(self, letter: DeadLetter) -> None:
        """The dead-letter topic has it: ACCEPT it, so the broker never lends it again."""
        self._dying.discard(letter.offset)
        lent = self._lent.get(letter.offset)
        if lent is not None:
            self._settle(letter.offset, lent.consumer, Settle.accept)

    def commit_point(self) -> tuple[int, str] | None:
        return None  # the broker keeps the share group's progress

    def _give_back(self, offset: int, lent: _Lent, reason: Reason) -> None:
        if lent.attempt >= self._limits.max_attempts:
            self._die(DeadLetter(offset, lent.record, lent.attempt, reason))
        else:
            self._settle(offset, lent.consumer, Settle.release)

    def _die(self, letter: DeadLetter) -> None:
        self._dead.append(letter)
        self._dying.add(letter.offset)

    def _settle(self, offset: int, consumer: int, how: Settle) -> None:
        if self._lent.pop(offset, None) is not None:
            self._per_consumer[consumer] -= 1
        self._settled.setdefault(consumer, []).append((offset, how))
        self._past[offset] = how
        if len(self._past) > _REMEMBER:
            self._past.popitem(last=False)

    def _fresh_remove(self, offset: int) -> None:
        try:
            self._fresh.remove(offset)
        except ValueError:
            pass
