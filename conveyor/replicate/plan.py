"""The replicator's pure rules: which bucket a partition is in, where its copy goes, and the
names and record formats of a route's bookkeeping topic.

A route hashes every source partition into a fixed number of buckets. Buckets, not partitions,
are what workers own, so a new topic or partition falls into a bucket someone already owns: no
rebalance and no pause. Each route has one compacted topic on the destination with one partition
per bucket; the worker group is assigned its partitions (so owning partition b means owning bucket
b), and partition b also holds bucket b's next source offsets, written in the same transaction as
the copies they account for.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import orjson

ORIGIN_HEADER = "conveyor-origin"


def bucket_of(topic: str, partition: int, buckets: int) -> int:
    return zlib.crc32(f"{topic}\0{partition}".encode()) % buckets


def route_topic(route: str) -> str:
    return f"_conveyor_replicate_{route}"


def group_id(route: str) -> str:
    return f"conveyor-replicate-{route}"


def transactional_id(route: str, bucket: int) -> str:
    """Stable per (route, bucket): a worker taking a bucket fences whoever had it before."""
    return f"conveyor-replicate-{route}-bucket-{bucket}"


def offset_record(topic: str, partition: int, next_offset: int) -> tuple[bytes, bytes]:
    return f"{topic}\0{partition}".encode(), orjson.dumps({"topic": topic, "partition": partition,
                                                          "next": next_offset})


def parse_offset_record(value: bytes) -> tuple[str, int, int]:
    record = orjson.loads(value)
    return record["topic"], int(record["partition"]), int(record["next"])


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


def partitions_by_bucket(partition_counts: dict[str, int], buckets: int) -> dict[int, set[SourcePartition]]:
    grouped: dict[int, set[SourcePartition]] = {b: set() for b in range(buckets)}
    for topic, count in partition_counts.items():
        for partition in range(count):
            grouped[bucket_of(topic, partition, buckets)].add(SourcePartition(topic, partition))
    return grouped
