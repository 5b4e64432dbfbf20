"""The lake's Kafka side: a topic's offsets now (librdkafka, through conveyor.kafka), and a bounded
read of an offset range through Spark's official Kafka connector.

Both ends are read committed: the end of a range is the last stable offset, so a range never waits
for records of an open transaction (the replicator writes transactionally), and aborted records
never land.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from conveyor import kafka
from conveyor.config import Platform
from conveyor.pipeline.errors import LakeConfigError
from conveyor.pipeline.offsets import RangePlan, Watermarks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_TIMEOUT = 30.0
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def source_cluster(platform: Platform) -> str:
    return platform.read_cluster(setting="pipeline.source")


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_client_options(platform: Platform, cluster: str) -> dict[str, str]:
    """The cluster's librdkafka settings as the Java client's, prefixed for Spark's connector.

    Most names are shared; librdkafka's SASL user and password become a JAAS line, its plural
    ``sasl.mechanisms`` the Java singular, and a PEM CA file a PEM trust store.
    """
    config = kafka.client_config(platform, cluster)
    options = {"kafka.bootstrap.servers": str(config.pop("bootstrap.servers"))}
    if "sasl.mechanisms" in config:
        config["sasl.mechanism"] = config.pop("sasl.mechanisms")
    username, password = config.pop("sasl.username", None), config.pop("sasl.password", None)
    if username is not None:
        mechanism = str(config.get("sasl.mechanism", "PLAIN")).upper()
        module = _LOGIN_MODULES.get(mechanism)
        if module is None:
            raise LakeConfigError(f"clusters.{cluster}.client: the lake cannot log in with SASL mechanism {mechanism}")
        credentials = f"username={_jaas_quote(str(username))} password={_jaas_quote(str(password or ''))}"
        options["kafka.sasl.jaas.config"] = f"{module} required {credentials};"
    if "ssl.ca.location" in config:
        options["kafka.ssl.truststore.location"] = str(config.pop("ssl.ca.location"))
        options["kafka.ssl.truststore.type"] = "PEM"
    options.update({f"kafka.{key}": str(value) for key, value in config.items()})
    return options


def list_watermarks(platform: Platform, topic: str) -> tuple[datetime, dict[int, Watermarks]]:
    """(when, per partition its earliest offset and last stable offset). ``when`` is taken before
    asking, so every record appended before it lies below the listed end."""
    cluster = source_cluster(platform)
    admin = kafka.admin(platform, cluster)  # kept referenced until its futures resolve
    listed_at = datetime.now(timezone.utc)
    try:
        metadata = admin.list_topics(topic, timeout=_TIMEOUT).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise LakeConfigError(f"topic {topic} does not exist on cluster {cluster}")
        partitions = sorted(metadata.partitions)
        answers: dict[str, dict[int, int]] = {}
        for name, spec in (("low", OffsetSpec.earliest()), ("high", OffsetSpec.latest())):
            futures = admin.list_offsets(
                {TopicPartition(topic, p): spec for p in partitions},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=_TIMEOUT,
            )
            answers[name] = {tp.partition: future.result().offset for tp, future in futures.items()}
    except KafkaException as err:
        raise kafka.KafkaOperationError.from_exception(f"listing offsets of {topic} on {cluster}", err) from None
    return listed_at, {p: Watermarks(answers["low"][p], answers["high"][p]) for p in partitions}


def read_range(spark: SparkSession, platform: Platform, plan: RangePlan) -> DataFrame:
    """The plan's records as Spark's Kafka rows (partition, offset, timestamp, key, value...).

    failOnDataLoss stays on: should retention delete part of the range while the run reads it, the
    run fails before its commit and the next one records the gap, instead of skipping it here.
    """
    options: dict[str, Any] = {
        **java_client_options(platform, source_cluster(platform)),
        "assign": json.dumps({plan.topic: [r.partition for r in plan.ranges]}),
        "startingOffsets": plan.starting_json(),
        "endingOffsets": plan.ending_json(),
        "kafka.isolation.level": "read_committed",
        "failOnDataLoss": "true",
    }
    return spark.read.format("kafka").options(**options).load()
