"""The replicator's pure rules: which bucket a partition is in, where its copy goes, and the
names and record formats of a route's bookkeeping topic.

A route hashes every source partition into a fixed number of buckets. Buckets, not partitions,
are what workers own, so a new topic or partition falls into a bucket someone already owns: no
rebalance and no pause. Each route has one compacted topic on the destination with one partition
per bucket; the worker group is assigned its partitions (so owning partition b means owning bucket
b), and partition b also holds bucket b's next source offsets, written in the same transaction as
the copies they account for, and the gaps: source offsets retention deleted before they were copied.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import orjson

ORIGIN_HEADER = "conveyor-origin"


def bucket_of(topic: str, partition: int, buckets: int) -> int:
    return zlib.crc32(f"{topic}\0{partition}".encode()) % buckets


def route_topic(route: str) -> str:
    return f"_conveyor_replicate_{route}"


def group_id(route: str) -> str:
    return f"conveyor-replicate-{route}"


def transactional_prefix(route: str) -> str:
    """What every transactional id of the route starts with (its ACL is granted by this prefix)."""
    return f"{group_id(route)}-bucket-"


def transactional_id(route: str, bucket: int) -> str:
    """Stable per (route, bucket): a worker taking a bucket fences whoever had it before."""
    return f"{transactional_prefix(route)}{bucket}"


def offset_record(topic: str, partition: int, next_offset: int) -> tuple[bytes, bytes]:
    return f"{topic}\0{partition}".encode(), orjson.dumps({"topic": topic, "partition": partition,
                                                          "next": next_offset})


def parse_offset_record(value: bytes) -> tuple[str, int, int]:
    """(topic, partition, next offset) of any record of the route topic, gap records included."""
    record = orjson.loads(value)
    return record["topic"], int(record["partition"]), int(record["next"])


def gap_record(gap: Gap) -> tuple[bytes, bytes]:
    """A gap, keyed by its first offset so that compaction keeps every gap and a gap recorded twice
    (a worker killed after writing it, before its offsets moved) is one record. It also carries the
    offset copying resumes from, as every record of the route topic does: a worker of the previous
    version, which reads each record as an offset record, then still resumes at the right place."""
    key = f"{gap.topic}\0{gap.partition}\0gap\0{gap.first}".encode()
    return key, orjson.dumps({"topic": gap.topic, "partition": gap.partition, "next": gap.last + 1,
                              "gap": {"first": gap.first, "last": gap.last, "found_ms": gap.found_ms}})


def parse_gap_record(value: bytes) -> Gap | None:
    """The gap a record of the route topic holds; None for an offset record."""
    record = orjson.loads(value)
    gap = record.get("gap")
    if gap is None:
        return None
    return Gap(record["topic"], int(record["partition"]), int(gap["first"]), int(gap["last"]),
               int(gap.get("found_ms", 0)))


def destination_partition(partition: int, source_partitions: int, destination_partitions: int) -> int | None:
    """The same partition number when the counts match (per-key order stays per partition);
    otherwise None: the producer's murmur2 partitioner places the record by key."""
    return partition if source_partitions == destination_partitions else None


def origin(cluster: str, topic: str, partition: int, offset: int) -> bytes:
    return f"{cluster}/{topic}/{partition}/{offset}".encode()


@dataclass(frozen=True)
class SourcePartition:
    topic: str
    partition: int


@dataclass(frozen=True)
class Gap:
    """Offsets ``first`` to ``last`` (inclusive) of a source partition were deleted by retention
    before the route copied them."""

    topic: str
    partition: int
    first: int
    last: int
    #: When a copier found it, epoch ms (not part of the gap's identity).
    found_ms: int = field(default=0, compare=False)

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class Resume:
    """Where a copier goes on after its source partition said "offset out of range"."""

    offset: int
    #: The offsets it will never copy, if retention deleted them first.
    gap: Gap | None = None
    #: The position was beyond the partition's end: the source log was truncated (an unclean leader
    #: election) or the topic was deleted and created again.
    truncated: bool = False


def after_out_of_range(source: SourcePartition, position: int, low: int, high: int) -> Resume:
    """``position`` is the next offset the route has committed for ``source``; ``low`` and ``high``
    the partition's earliest and end offsets now."""
    if position < low:
        return Resume(low, Gap(source.topic, source.partition, position, low - 1))
    if position > high:
        # From the earliest, as Kafka's own reset would: copies repeated rather than records skipped.
        return Resume(low, truncated=True)
    return Resume(position)  # back in range since the fetch failed: nothing was lost


def partitions_by_bucket(partition_counts: dict[str, int], buckets: int) -> dict[int, set[SourcePartition]]:
    grouped: dict[int, set[SourcePartition]] = {b: set() for b in range(buckets)}
    for topic, count in partition_counts.items():
        for partition in range(count):
            grouped[bucket_of(topic, partition, buckets)].add(SourcePartition(topic, partition))
    return grouped
