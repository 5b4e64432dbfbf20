"""The dead-letter topic of a (topic, group): where messages go after ``max_attempts`` deliveries,
with why in their headers."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform
from conveyor.dispatch.partition import DeadLetter

log = logging.getLogger(__name__)


def dead_letter_producer(platform: Platform, cluster_name: str, topic: str, group: str) -> Producer:
    """A producer for ``topic``, created first if missing (one partition, the cluster's replication)."""
    admin = kafka.admin(platform, cluster_name)
    cluster = platform.cluster(cluster_name)
    spec = NewTopic(topic, 1, cluster.default_replication_factor,
                    config={"min.insync.replicas": str(cluster.default_min_insync)})
    try:
        admin.create_topics([spec])[topic].result(30)
        log.info("created dead-letter topic %s", topic)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return kafka.producer(platform, cluster_name, f"conveyor-dispatch-dead-letter-{group}")


def dead_letter_headers(topic: str, group: str, partition: int, letter: DeadLetter) -> list[tuple[str, bytes]]:
    return [
        ("conveyor-dead-letter-reason", letter.reason.value.encode()),
        ("conveyor-dead-letter-attempts", str(letter.attempts).encode()),
        ("conveyor-dead-letter-topic", topic.encode()),
        ("conveyor-dead-letter-partition", str(partition).encode()),
        ("conveyor-dead-letter-offset", str(letter.offset).encode()),
        ("conveyor-dead-letter-group", group.encode()),
    ]
