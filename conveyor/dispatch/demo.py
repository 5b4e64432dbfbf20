"""Notifications for ``conveyor dispatch demo``: valid under contracts/notifications.schema.json,
keyed by user like the gateway would, written straight to the cluster the dispatcher reads; and what
the demo's group leaves unread once it is done, as the watcher will judge it."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping

import orjson
from confluent_kafka import KafkaException, TopicPartition

from conveyor import kafka
from conveyor.config import Platform
from conveyor.dispatch.errors import DispatchError


def produce_notifications(platform: Platform, cluster: str, count: int) -> None:
    producer = kafka.producer(platform, cluster, "conveyor-dispatch-demo")
    now = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    for i in range(count):
        user = f"user-{i % 1000}"
        event = {"event_id": str(uuid.uuid4()), "event_time": now, "user_id": user,
                 "channel": "email" if i % 3 else "push", "body": f"notification {i}"}
        producer.produce("notifications", orjson.dumps(event), key=user.encode())
        producer.poll(0)
    if producer.flush(60):
        raise DispatchError("notifications were not all acknowledged by Kafka within 60 s")


def unread(watermarks: Mapping[int, tuple[int, int]], committed: Mapping[int, int]) -> dict[int, int]:
    """Records each partition holds past the group's commit, for the partitions that hold any:
    ``watermarks`` are (log start, end) per partition, ``committed`` the group's offsets (a
    partition without one has all it holds unread)."""
    left = {}
    for partition, (start, end) in watermarks.items():
        offset = committed.get(partition, -1)
        behind = end - (offset if offset >= 0 else start)
        if behind > 0:
            left[partition] = behind
    return left


def unread_records(platform: Platform, cluster: str, topic: str, group: str, timeout: float = 10.0) -> dict[int, int]:
    """:func:`unread` as Kafka has it now: the group's commits and the topic's end offsets, read
    through a consumer handle of the group that never joins it (as ``kafka.committed`` does)."""
    reader = kafka.consumer(platform, cluster, group, "conveyor-dispatch-demo")
    try:
        metadata = reader.list_topics(topic, timeout=timeout).topics[topic]
        partitions = [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
        committed = {tp.partition: tp.offset for tp in reader.committed(partitions, timeout=timeout)}
        watermarks = {tp.partition: reader.get_watermark_offsets(tp, timeout=timeout) for tp in partitions}
    except KafkaException as exc:
        raise DispatchError(f"cannot read the commits of {group} on {topic} ({cluster}): {exc}") from None
    finally:
        reader.close()
    return unread(watermarks, committed)
