"""The watcher's rewind records on each cluster it watches (format and rules:
:mod:`conveyor.ops.rewind_history`): a compacted topic of one partition, created on first use,
read whole at start and written as rounds find evidence and groups commit."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform
from conveyor.ops.errors import OpsError
from conveyor.config.topics import REWINDS_TOPIC
from conveyor.ops.rewind_history import Seen, decode, evidence_record, restored, seen_record
from conveyor.ops.tracker import RewindEvidence

_TIMEOUT = 15.0


class RewindStore:
    def __init__(self, platform: Platform, cluster: str) -> None:
        self.platform, self.cluster = platform, cluster
        self._producer = None

    def _ensure(self) -> None:
        spec = self.platform.cluster(self.cluster)
        topic = NewTopic(REWINDS_TOPIC, 1, spec.default_replication_factor,
                         config={"cleanup.policy": "compact", "min.insync.replicas": str(spec.default_min_insync)})
        admin = kafka.admin(self.platform, self.cluster)  # kept referenced until the future resolves
        try:
            admin.create_topics([topic])[REWINDS_TOPIC].result(_TIMEOUT)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise OpsError(f"{REWINDS_TOPIC} cannot be created on {self.cluster}: {exc.args[0].str()}") from None

    def load(self) -> tuple[list[RewindEvidence], dict[str, Seen]]:
        """Every record of the topic (created first if absent), read to its end."""
        self._ensure()
        consumer = kafka.consumer(self.platform, self.cluster, f"conveyor-ops-rewinds-{uuid.uuid4().hex[:8]}",
                                  "conveyor-ops-rewinds", {"enable.auto.commit": False})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(REWINDS_TOPIC, 0), timeout=_TIMEOUT)
            consumer.assign([TopicPartition(REWINDS_TOPIC, 0, low)])
            records, position, deadline = [], low, time.monotonic() + _TIMEOUT
            while position < high:
                if time.monotonic() > deadline:
                    raise OpsError(f"{REWINDS_TOPIC} on {self.cluster} was not read to its end in {_TIMEOUT:g}s")
                message = consumer.poll(0.5)
                if message is None or message.error() is not None:
                    continue
                position = message.offset() + 1
                records.append(decode(message.key() or b"", message.value()))
            return restored(records)
        finally:
            consumer.close()

    def save(self, evidence: Iterable[RewindEvidence] = (), seen: Iterable[Seen] = ()) -> None:
        """Written and acknowledged, or an OpsError."""
        records = [evidence_record(e) for e in evidence] + [seen_record(s) for s in seen]
        if not records:
            return
        if self._producer is None:
            self._producer = kafka.producer(self.platform, self.cluster, "conveyor-ops-rewinds")
        failed: list[KafkaError] = []
        for key, value in records:
            self._producer.produce(REWINDS_TOPIC, value, key,
                                   on_delivery=lambda err, _: failed.append(err) if err is not None else None)
        left = self._producer.flush(_TIMEOUT)
        if left or failed:
            raise OpsError(f"{REWINDS_TOPIC} on {self.cluster}: {left} record(s) undelivered, {len(failed)} failed "
                           f"({failed[0].str() if failed else 'timeout'})")
