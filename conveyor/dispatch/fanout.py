"""Hands the partitions of one (topic, group) on a node to its connected clients. No I/O.

Messages go round-robin to the clients that have credit, in frames of up to ``batch`` messages;
acks and nacks come back by id (partition, offset). Acks become durable only with the next offset
commit, so each stream is told which of its acks a commit carried (``ReadResponse.committed``):
what a client saw confirmed is never delivered again, by this node or by the next owner. (With
the share backend the broker's answer to the acknowledgement plays the commit's part.)
Not thread-safe: the reader calls it under its lock.
"""

from __future__ import annotations

import itertools
import queue
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

from conveyor.dispatch.acktracker import AckOutcome
from conveyor.dispatch.metrics import ReaderMetrics
from conveyor.dispatch.partition import DeadLetter, Handout
from conveyor_sdk.protos import dispatch_pb2 as pb

#: Most bytes of records in one frame to a client: under gRPC's default 4 MiB message limit,
#: with room for the frame's own fields.
FRAME_BYTES = 3 * 2**20
#: Why an id is ignored when its partition is not served here (revoked, or another node's).
NOT_OWNED = "partition not served here"
_CONFIRMABLE = (AckOutcome.acked, AckOutcome.already_acked, AckOutcome.below_committed)
_client_ids = itertools.count(1)


@dataclass(eq=False)
class Client:
    """The node's side of one Read stream. ``outbox`` holds frames for the stream to send; the
    messages in it never exceed the client's credit, so a client that stops reading costs at
    most its credit."""

    service: str
    credit: int
    id: int = field(default_factory=lambda: next(_client_ids))
    outbox: queue.SimpleQueue[pb.ReadResponse | None] = field(default_factory=queue.SimpleQueue)
    open: bool = True


class Served(Protocol):
    """One partition as the fan-out serves it: ``partition.PartitionQueue`` (the classic backend,
    acks kept in the offset commit) or ``share_partition.SharePartition`` (records a share group
    lent this node). Holders are ``Client``s; times are plain seconds."""

    @property
    def ready(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    def take(self, limit: int, holder: Client, now: float) -> list[Handout]: ...
    def acknowledge(self, offset: int) -> AckOutcome: ...
    def nack(self, offset: int, holder: Client, ready_at: float, now: float) -> str | None: ...
    def expire(self, now: float) -> int: ...
    def release(self, holder: Client, now: float) -> int: ...
    def commit_point(self) -> tuple[int, str] | None: ...
    def take_dead(self) -> list[DeadLetter]: ...
    def dead_again(self, letter: DeadLetter) -> None: ...
    def dead_lettered(self, letter: DeadLetter) -> None: ...


#: Acks applied since the last commit, per partition: (client, offset), confirmed after it.
Unconfirmed = dict[int, list[tuple[Client, int]]]


@dataclass(frozen=True)
class CommitPoint:
    partition: int
    offset: int
    metadata: str


class Fanout:
    def __init__(self, metrics: ReaderMetrics, batch: int, max_credit: int) -> None:
        self.partitions: dict[int, Served] = {}
        self.clients: list[Client] = []
        self._metrics = metrics
        self._batch = batch
        self._max_credit = max_credit
        self._turn = 0
        self._unconfirmed: Unconfirmed = defaultdict(list)
        self._committed: dict[int, tuple[int, str]] = {}

    def add_client(self, client: Client) -> None:
        client.credit = min(client.credit, self._max_credit)
        self.clients.append(client)
        self._metrics.clients.set(len(self.clients))

    def remove_client(self, client: Client, now: float) -> None:
        """The stream ended: what the client held goes to the others."""
        client.open = False
        if client in self.clients:
            self.clients.remove(client)
        for partition in self.partitions.values():
            partition.release(client, now)
        self._metrics.clients.set(len(self.clients))

    def give_credit(self, client: Client, credit: int) -> None:
        client.credit = min(client.credit + credit, self._max_credit)

    def ack(self, client: Client, ids: pb.Ids) -> None:
        acked = 0
        for partition_id, offset in zip(ids.partitions, ids.offsets):
            partition = self.partitions.get(partition_id)
            if partition is None:
                self._ignored(NOT_OWNED)
                continue
            outcome = partition.acknowledge(offset)
            if outcome in _CONFIRMABLE:
                self._unconfirmed[partition_id].append((client, offset))
            if outcome is AckOutcome.acked:
                acked += 1
            else:
                self._ignored(outcome.value)
        if acked:
            self._metrics.acked.inc(acked)

    def nack(self, client: Client, nack: pb.Nack, now: float) -> None:
        ready_at = now + nack.retry_delay_ms / 1000
        for partition_id, offset in zip(nack.ids.partitions, nack.ids.offsets):
            partition = self.partitions.get(partition_id)
            if partition is None:
                self._ignored(NOT_OWNED)
                continue
            why = partition.nack(offset, client, ready_at, now)
            if why is None:
                self._metrics.nacked.inc()
            else:
                self._ignored(why)

    def expire(self, now: float) -> None:
        for partition in self.partitions.values():
            timed_out = partition.expire(now)
            if timed_out:
                self._metrics.timed_out.inc(timed_out)

    def dispatch(self, now: float, wall: float) -> int:
        """Send what is ready to the clients with credit, round-robin; messages sent."""
        sent = 0
        while True:
            eligible = [c for c in self.clients if c.credit > 0]
            ready = sum(p.ready for p in self.partitions.values())
            if not eligible or not ready:
                return sent
            share = -(-ready // len(eligible))
            start = self._turn % len(eligible)
            self._turn += 1
            progressed = False
            for client in eligible[start:] + eligible[:start]:
                handouts = self._take(min(client.credit, share, self._batch), client, now)
                if not handouts:
                    break
                client.credit -= len(handouts)
                for frame in _by_size(handouts):
                    client.outbox.put(self._frame(frame, wall))
                sent += len(handouts)
                progressed = True
            if not progressed:
                return sent

    def commit_points(self, partitions: list[int] | None = None) -> tuple[list[CommitPoint], Unconfirmed]:
        """What to commit for ``partitions`` (default all) that changed since the last commit, and
        the acks it makes durable; pass both to ``committed`` or ``commit_failed`` afterwards."""
        points: list[CommitPoint] = []
        snapshot: Unconfirmed = {}
        for partition_id in self.partitions if partitions is None else partitions:
            partition = self.partitions.get(partition_id)
            point = partition.commit_point() if partition is not None else None
            if point is None:
                continue
            if point != self._committed.get(partition_id):
                points.append(CommitPoint(partition_id, *point))
            if self._unconfirmed.get(partition_id):
                snapshot[partition_id] = self._unconfirmed.pop(partition_id)
        return points, snapshot

    def take_unconfirmed(self) -> Unconfirmed:
        """Every ack applied and not yet confirmed (the share backend confirms from the broker's
        answer, not from an offset commit)."""
        unconfirmed, self._unconfirmed = self._unconfirmed, defaultdict(list)
        return dict(unconfirmed)

    def committed(self, points: list[CommitPoint], snapshot: Unconfirmed) -> None:
        if points:
            self._metrics.commits.inc()
        for point in points:
            self._committed[point.partition] = (point.offset, point.metadata)
        by_client: dict[Client, pb.Ids] = {}
        for partition_id, acks in snapshot.items():
            for client, offset in acks:
                if client.open:
                    ids = by_client.setdefault(client, pb.Ids())
                    ids.partitions.append(partition_id)
                    ids.offsets.append(offset)
        for client, ids in by_client.items():
            client.outbox.put(pb.ReadResponse(committed=ids))

    def commit_failed(self, snapshot: Unconfirmed) -> None:
        """The acks wait for the next commit; those of partitions gone meanwhile are dropped."""
        for partition_id, acks in snapshot.items():
            if partition_id in self.partitions:
                self._unconfirmed[partition_id][:0] = acks

    def assign(self, partition_id: int, partition: Served) -> None:
        self.partitions[partition_id] = partition
        point = partition.commit_point()
        if point is not None:
            self._committed[partition_id] = point

    def revoke(self, partition_id: int) -> None:
        """Forget a partition (after its last commit); later acks for it are ignored, counted."""
        self.partitions.pop(partition_id, None)
        self._unconfirmed.pop(partition_id, None)
        self._committed.pop(partition_id, None)

    def _take(self, limit: int, client: Client, now: float) -> list[tuple[int, Handout]]:
        taken: list[tuple[int, Handout]] = []
        ids = list(self.partitions)
        start = self._turn % len(ids)
        for partition_id in ids[start:] + ids[:start]:
            for handout in self.partitions[partition_id].take(limit - len(taken), client, now):
                taken.append((partition_id, handout))
            if len(taken) >= limit:
                break
        return taken

    def _frame(self, handouts: list[tuple[int, Handout]], wall: float) -> pb.ReadResponse:
        frame = pb.ReadResponse()
        add = frame.messages.add
        redelivered = 0
        oldest = handouts[0][1].record.timestamp_ms
        for partition_id, handout in handouts:
            record = handout.record
            message = add(partition=partition_id, offset=handout.offset, value=record.value,
                          timestamp_ms=record.timestamp_ms, attempt=handout.attempt)
            if record.key is not None:
                message.key = record.key
            for key, value in record.headers:
                message.headers.add(key=key, value=value)
            oldest = min(oldest, record.timestamp_ms)
            redelivered += handout.attempt > 1
        # One observation per frame, for its oldest message: the histogram's upper quantiles
        # stay honest and a 500-message frame costs one observation, not 500.
        self._metrics.delivery_latency.observe(max(0.0, wall - oldest / 1000))
        self._metrics.delivered.inc(len(handouts))
        if redelivered:
            self._metrics.redelivered.inc(redelivered)
        return frame

    def _ignored(self, reason: str) -> None:
        self._metrics.ignored.labels(reason=reason).inc()


def _by_size(handouts: list[tuple[int, Handout]]) -> list[list[tuple[int, Handout]]]:
    """``handouts`` in frames of at most FRAME_BYTES of records each (one record, at most the
    gateway's limit of about 1 MB, always fits): gRPC clients refuse a message above 4 MiB by
    default, and five of the largest events the gateway accepts would make one."""
    frames: list[list[tuple[int, Handout]]] = [[]]
    size = 0
    for handout in handouts:
        record = handout[1].record
        bytes_ = len(record.value) + len(record.key or b"") + sum(len(k.encode()) + len(v) for k, v in record.headers)
        if frames[-1] and size + bytes_ > FRAME_BYTES:
            frames.append([])
            size = 0
        frames[-1].append(handout)
        size += bytes_
    return frames
