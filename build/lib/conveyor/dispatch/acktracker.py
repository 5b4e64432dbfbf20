"""Individual acks of one partition: what the dispatcher may commit, and when to hold back. Pure.

Clients sharing a partition ack out of order (docs/dispatch.md). The committed offset is the
lowest offset still owed an ack, so it advances over each contiguous run of acks; the acks above
it ride in the commit metadata (``ackcodec``). The broker caps that metadata, so instead of
dropping acks on overflow, as Confluent's parallel-consumer does, the tracker bounds the metadata
any later mix of acks could need, and the dispatcher holds messages back (``may_deliver``) and
pauses the fetch (``may_fetch_more``) while the bound is at the cap.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from dataclasses import dataclass
from enum import Enum

from conveyor.dispatch.ackcodec import MAX_SPAN, decode, encode, max_length
from conveyor.dispatch.errors import StaleAckMetadataError

#: Kafka's default offset.metadata.max.bytes.
METADATA_LIMIT = 4096
#: Offsets the dispatcher fetches between two questions to ``may_fetch_more``.
FETCH_HEADROOM = 500


class AckOutcome(str, Enum):
    acked = "acked"
    nacked = "nacked"
    #: Another copy of the message was acked first; normal after a redelivery.
    already_acked = "already acked"
    below_committed = "below committed"
    never_delivered = "never delivered"


class Delivery(str, Enum):
    first = "first"
    redelivery = "redelivery"
    #: Acked before a takeover: skip it, never hand it out again.
    already_acked = "already acked"


@dataclass(frozen=True)
class AckResult:
    offset: int
    outcome: AckOutcome
    #: The committed offset afterwards; it moves only when the lowest pending offset is acked.
    committed_offset: int

    @property
    def applied(self) -> bool:
        return self.outcome in (AckOutcome.acked, AckOutcome.nacked)


def backlog(end_offset: int, committed_offset: int, acked_above: int) -> int:
    """Messages still to consume: partition end - committed offset - individually acked.

    Clamped at zero because the end offset is read at another moment than the acks.
    """
    return max(0, end_offset - committed_offset - acked_above)


class PartitionAcks:
    """Ack state of one partition, fed the offsets in the order Kafka returns them."""

    def __init__(self, start_offset: int) -> None:
        if start_offset < 0:
            raise ValueError(f"start offset {start_offset} is not a Kafka offset")
        #: Next offset Kafka may return; lower ones were delivered or skipped by Kafka
        #: (transaction markers, compaction).
        self._position = start_offset
        self._committed = start_offset
        self._pending: set[int] = set()  # delivered, not yet acked
        self._in_flight: set[int] = set()  # pending and with a client now (not nacked)
        # Pending offsets in delivery order; acked ones stay until they reach the front.
        self._order: deque[int] = deque()
        self._acked: set[int] = set()  # acked above the committed offset
        # The same offsets as a heap, to drop those the committed offset passes even when
        # Kafka never returns them again (a restored ack compacted away).
        self._acked_heap: list[int] = []
        # Both feed the metadata bound: runs of consecutive offsets in _acked, and the highest
        # ack, which a restore can place beyond the fetch position.
        self._runs = 0
        self._max_acked = -1
        self._outcomes: Counter[AckOutcome] = Counter()

    @classmethod
    def restore(cls, committed_offset: int, metadata: str) -> PartitionAcks:
        """State after a takeover, so offsets acked before it are never delivered again.

        Raises an AckMetadataError when the metadata cannot be used; start from
        ``PartitionAcks(committed_offset)`` then, and the acks above it are redelivered.
        """
        recorded = decode(metadata)
        if recorded.base is not None and recorded.base != committed_offset:
            raise StaleAckMetadataError(committed_offset, recorded.base)
        acks = cls(committed_offset)
        for offset in recorded.acked:
            acks._add_acked(offset)
        return acks

    @property
    def committed_offset(self) -> int:
        return self._committed

    @property
    def acked_count(self) -> int:
        """Acked offsets above the committed offset."""
        return len(self._acked)

    @property
    def pending_count(self) -> int:
        """Delivered offsets not acked yet, nacked ones included."""
        return len(self._pending)

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def acked_above(self) -> tuple[int, ...]:
        return tuple(sorted(self._acked))

    def is_acked(self, offset: int) -> bool:
        """Done with: behind the committed offset or individually acked."""
        return offset < self._committed or offset in self._acked

    def outcome_counts(self) -> dict[AckOutcome, int]:
        """Acks and nacks by outcome since this state was created, ignored ones included."""
        return dict(self._outcomes)

    def commit_metadata(self) -> str:
        """The metadata to commit with ``committed_offset``."""
        return encode(self._committed, self._acked)

    def encoded_size(self) -> int:
        return len(self.commit_metadata())

    def backlog(self, end_offset: int) -> int:
        return backlog(end_offset, self._committed, len(self._acked))

    def deliver(self, offset: int) -> Delivery:
        """Record that ``offset`` goes to a client, first or again after a nack or timeout.

        Raises ValueError for an offset out of Kafka's order, or one ``may_deliver`` refuses for
        its distance from the commit (``MAX_SPAN``), since its ack could not be recorded.
        """
        if offset in self._pending:
            self._in_flight.add(offset)
            return Delivery.redelivery
        if self.is_acked(offset):
            delivery = Delivery.already_acked
        elif offset < self._position:
            raise ValueError(
                f"offset {offset} is behind fetch position {self._position} and was never "
                "delivered: feed offsets in the order Kafka returns them"
            )
        elif self._pending and offset - self._committed > MAX_SPAN:
            raise ValueError(
                f"offset {offset} is more than {MAX_SPAN} offsets above the committed offset "
                f"{self._committed}: its ack could not be recorded; ask may_deliver first"
            )
        else:
            delivery = Delivery.first
            self._pending.add(offset)
            self._in_flight.add(offset)
            self._order.append(offset)
        self._position = max(self._position, offset + 1)
        # Offsets Kafka skipped on the way here (transaction markers, compaction) no longer hold
        # the commit back.
        self._advance()
        return delivery

    def ack(self, offset: int) -> AckResult:
        """Any pending offset may be acked, also one nacked or handed to another client since:
        at-least-once needs one ack, and later ones come back as ``already_acked``.
        """
        ignored = self._why_ignored(offset)
        if ignored is not None:
            return self._result(offset, ignored)
        self._pending.remove(offset)
        self._in_flight.discard(offset)
        self._add_acked(offset)
        if offset == self._committed:
            self._advance()
        return self._result(offset, AckOutcome.acked)

    def nack(self, offset: int) -> AckResult:
        """The client gave ``offset`` back: it stays owed an ack and awaits redelivery."""
        ignored = self._why_ignored(offset)
        if ignored is not None:
            return self._result(offset, ignored)
        self._in_flight.discard(offset)
        return self._result(offset, AckOutcome.nacked)

    def may_deliver(self, offset: int, limit_bytes: int = METADATA_LIMIT) -> bool:
        """Whether delivering ``offset`` keeps the metadata within ``limit_bytes`` however the
        pending offsets are acked. False means hold the message until acks come in.

        With nothing pending the answer is always yes: only a delivery can move the commit then,
        and only a restore of metadata this tracker did not gate can leave acks whose bound
        exceeds the limit.
        """
        if not self._pending or offset in self._pending or self.is_acked(offset):
            return True
        return self._fits(offset, 1, limit_bytes)

    def may_fetch_more(
        self, limit_bytes: int = METADATA_LIMIT, headroom: int = FETCH_HEADROOM
    ) -> bool:
        """Whether ``headroom`` more consecutive offsets could all be delivered: False means
        pause fetching this partition until acks come in.

        Offsets Kafka skips (transaction markers, compaction) widen the bitset beyond this
        estimate; ``may_deliver`` is the exact gate. Always yes with nothing pending, as there.
        """
        if not self._pending:
            return True
        return self._fits(self._position - 1 + headroom, headroom, limit_bytes)

    def _fits(self, top: int, extra: int, limit_bytes: int) -> bool:
        # The commit never passes a pending offset, so every ack to come lies between the
        # committed offset and the highest offset delivered or acked, and each one adds at most
        # one run. A higher commit only narrows the span; the base is sized for top + 1.
        top = max(top, self._max_acked, self._position - 1)
        span = max(0, top - self._committed)
        runs = self._runs + len(self._pending) + extra
        return span <= MAX_SPAN and max_length(top + 1, span, runs) <= limit_bytes

    def _why_ignored(self, offset: int) -> AckOutcome | None:
        if offset < self._committed:
            return AckOutcome.below_committed
        if offset in self._acked:
            return AckOutcome.already_acked
        if offset not in self._pending:
            return AckOutcome.never_delivered
        return None

    def _result(self, offset: int, outcome: AckOutcome) -> AckResult:
        self._outcomes[outcome] += 1
        return AckResult(offset, outcome, self._committed)

    def _add_acked(self, offset: int) -> None:
        self._runs += 1 - ((offset - 1) in self._acked) - ((offset + 1) in self._acked)
        self._acked.add(offset)
        heapq.heappush(self._acked_heap, offset)
        self._max_acked = max(self._max_acked, offset)

    def _advance(self) -> None:
        order = self._order
        while order and order[0] not in self._pending:
            order.popleft()
        if order:
            committed = order[0]
        else:
            # Restored acks can carry the commit past the fetch position; it never moves back.
            committed = max(self._position, self._committed)
            while committed in self._acked:
                committed += 1
        self._committed = committed
        heap = self._acked_heap
        while heap and heap[0] < committed:
            offset = heapq.heappop(heap)
            if offset + 1 not in self._acked:
                self._runs -= 1
            self._acked.discard(offset)
