"""A group's recent commits as ``__consumer_offsets`` holds them: the evidence a rewind or a reset
keeps before the log cleaner compacts the older commits away.

Kafka keeps a group's commits in one partition of ``__consumer_offsets`` (the Java hash of the
group id, modulo the partition count), whose leader is the group's coordinator. Each commit is a
record: the key names the group, topic and partition; the value the offset, the offset's leader
epoch, the committer's metadata and the commit time; a deletion is a tombstone. The batch's
leader epoch says which leadership of that partition, so which coordinator, wrote it: a rewind
right after that epoch changed points at a coordinator failover. Decoding is pure; reading is
bounded (one partition, from a time, at most ``limit`` records, within a timeout).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from conveyor import kafka
from conveyor.kafka import OFFSETS_TOPIC
from conveyor.config import Platform
from conveyor.ops.errors import OpsError

#: Key types of an offset commit (0 and 1 are its two historical key versions); others are group
#: metadata and the new protocol's records.
_COMMIT_KEYS = (0, 1)


def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, as a signed 32-bit int)."""
    value = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def coordinator_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group`` (Kafka's ``Utils.abs(hash) % count``).

    Kafka's ``abs`` negates a negative hash (and maps ``Integer.MIN_VALUE`` to 0); masking the sign
    bit instead would pick another partition for every group whose hash is negative.
    """
    value = java_hash(group)
    return (0 if value == -(1 << 31) else abs(value)) % partitions


@dataclass(frozen=True)
class Commit:
    topic: str
    partition: int
    #: None: a tombstone (the commit was deleted: an offsets reset to nothing, or expiry).
    offset: int | None
    leader_epoch: int | None
    metadata: str
    commit_ms: int | None
    #: Where the record sits in ``__consumer_offsets``, when it was appended, and the leader epoch of
    #: the batch: which coordinator wrote it.
    log_offset: int
    written_ms: int
    coordinator_epoch: int | None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self, compact: bool = False) -> str:
        size = self.uvarint() - 1 if compact else self.take(">h")
        text = self.data[self.at:self.at + max(size, 0)].decode()
        self.at += max(size, 0)
        return text


def decode_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset commit's key; None for any other record."""
    reader = _Reader(key)
    if reader.take(">h") not in _COMMIT_KEYS:
        return None
    return reader.string(), reader.string(), reader.take(">i")


def decode_value(value: bytes | None) -> tuple[int | None, int | None, str, int | None]:
    """(offset, leader epoch, metadata, commit time) of an offset commit's value; a tombstone is
    (None, None, "", None). Versions 0 to 4 (4: flexible, compact strings and tagged fields)."""
    if value is None:
        return None, None, "", None
    reader = _Reader(value)
    version = reader.take(">h")
    offset = reader.take(">q")
    epoch = reader.take(">i") if version >= 3 else None
    metadata = reader.string(compact=version >= 4)
    commit_ms = reader.take(">q")
    return offset, (None if epoch == -1 else epoch), metadata, commit_ms


@dataclass(frozen=True)
class CommitLog:
    group: str
    #: The ``__consumer_offsets`` partition and its leader now (the group's coordinator).
    partition: int
    coordinator: int | None
    commits: tuple[Commit, ...]
    #: True when the read stopped at ``limit`` or the timeout before the partition's end.
    truncated: bool = False


def read_commits(platform: Platform, cluster: str, group: str, since_ms: int, limit: int = 2000,
                 timeout: float = 10.0) -> CommitLog:
    """The group's commit records appended since ``since_ms``, oldest first (at most ``limit``)."""
    return read_groups_commits(platform, cluster, {group: since_ms}, limit, timeout)[group]


def read_groups_commits(platform: Platform, cluster: str, since: dict[str, int], limit: int = 2000,
                        timeout: float = 10.0) -> dict[str, CommitLog]:
    """Each group's commit records appended since its time in ``since``, oldest first: every
    ``__consumer_offsets`` partition that holds one of them read once, from the earliest of its
    groups' times, at most ``limit`` records per partition."""
    admin = kafka.admin(platform, cluster)
    topic = admin.list_topics(OFFSETS_TOPIC, timeout=timeout).topics.get(OFFSETS_TOPIC)
    if topic is None or topic.error is not None or not topic.partitions:
        raise OpsError(f"{OFFSETS_TOPIC} cannot be described on {cluster}: {topic.error if topic else 'not listed'}")
    by_partition: dict[int, list[str]] = {}
    for group in since:
        by_partition.setdefault(coordinator_partition(group, len(topic.partitions)), []).append(group)
    consumer = kafka.consumer(platform, cluster, "conveyor-ops-commit-log", "conveyor-ops-commit-log",
                              {"enable.auto.commit": False, "enable.partition.eof": True})
    try:
        found: dict[str, CommitLog] = {}
        for partition, groups in sorted(by_partition.items()):
            leader = topic.partitions[partition].leader
            commits, truncated = _read_partition(consumer, partition, min(since[g] for g in groups), set(groups),
                                                 limit, timeout)
            for group in groups:
                own = tuple(c for g, c in commits if g == group and c.written_ms >= since[group])
                found[group] = CommitLog(group, partition, leader if leader >= 0 else None, own, truncated)
        return found
    finally:
        consumer.close()


def _read_partition(consumer: Consumer, partition: int, since_ms: int, groups: set[str], limit: int,
                    timeout: float) -> tuple[list[tuple[str, Commit]], bool]:
    """(group, commit) of ``groups`` in one partition from ``since_ms``; True when cut short."""
    _, high = consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, partition), timeout=timeout)
    (start,) = consumer.offsets_for_times([TopicPartition(OFFSETS_TOPIC, partition, since_ms)], timeout=timeout)
    first = high if start.offset in (OFFSET_END, -1) else start.offset
    consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, first)])
    commits: list[tuple[str, Commit]] = []
    deadline, position, seen = time.monotonic() + timeout, first, 0
    while position < high and seen < limit and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error() is not None:
            continue
        position, seen = message.offset() + 1, seen + 1
        key = decode_key(message.key()) if message.key() else None
        if key is None or key[0] not in groups:
            continue
        offset, epoch, metadata, commit_ms = decode_value(message.value())
        commits.append((key[0], Commit(key[1], key[2], offset, epoch, metadata, commit_ms, message.offset(),
                                       message.timestamp()[1], message.leader_epoch())))
    return commits, position < high
