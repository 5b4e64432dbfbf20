"""Notifications for ``conveyor dispatch demo``: valid under contracts/notifications.schema.json,
keyed by user like the gateway would, written straight to the cluster the dispatcher reads."""

from __future__ import annotations

import datetime as dt
import uuid

import orjson

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
