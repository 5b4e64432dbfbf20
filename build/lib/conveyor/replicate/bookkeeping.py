"""Reading a route's bookkeeping topic on the destination: per bucket, the next source offset of
each of its partitions and the gaps retention left (record formats in conveyor.replicate.plan)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from conveyor import kafka
from conveyor.config import Platform
from conveyor.replicate import plan
from conveyor.replicate.plan import Gap, SourcePartition

_TIMEOUT = 60.0


@dataclass(frozen=True)
class BucketRecords:
    """What a bucket's partition of the route topic holds (committed)."""

    #: The next source offset to copy, per partition.
    offsets: dict[SourcePartition, int]
    gaps: tuple[Gap, ...]


def read_bucket(platform: Platform, route_name: str, destination: str, client_id: str, bucket: int) -> BucketRecords:
    """The committed offsets and gaps of a bucket (read_committed, to the end)."""
    route_topic = plan.route_topic(route_name)
    consumer = kafka.consumer(platform, destination, f"{plan.group_id(route_name)}-offsets", f"{client_id}-offsets",
                              {"enable.partition.eof": True})
    offsets: dict[SourcePartition, int] = {}
    gaps: dict[tuple[str, int, int], Gap] = {}
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(route_topic, bucket), timeout=_TIMEOUT)
        if high <= low:
            return BucketRecords(offsets, ())
        consumer.assign([TopicPartition(route_topic, bucket, OFFSET_BEGINNING)])
        deadline = time.monotonic() + _TIMEOUT
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return BucketRecords(offsets, tuple(gaps[k] for k in sorted(gaps)))
                raise KafkaException(message.error())
            topic, partition, next_offset = plan.parse_offset_record(message.value())
            offsets[SourcePartition(topic, partition)] = next_offset
            gap = plan.parse_gap_record(message.value())
            if gap is not None:
                # Found again further on (an owner killed before its offsets moved): the latest wins.
                gaps[(gap.topic, gap.partition, gap.first)] = gap
        raise TimeoutError(f"could not read the offsets of bucket {bucket} of route {route_name}")
    finally:
        consumer.close()
