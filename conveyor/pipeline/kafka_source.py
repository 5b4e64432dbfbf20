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
from conveyor_sdk.contract import CONTRACT_HEADER, EXTRA_FIELDS_HEADER
from conveyor.config import Platform
from conveyor.java_client import JavaClientSettingError, java_settings
from conveyor.pipeline.errors import LakeConfigError
from conveyor.pipeline.offsets import RangePlan, Watermarks
from conveyor.positions import spark_client_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_TIMEOUT = 30.0
def source_cluster(platform: Platform) -> str:
    return platform.read_cluster(setting="pipeline.source")


def java_client_options(platform: Platform, cluster: str) -> dict[str, str]:
    """The cluster's client settings (its own, or a secured local cluster's) as Spark's Kafka
    connector takes them: the Java client's names (conveyor.java_client), prefixed ``kafka.``."""
    try:
        settings = java_settings(kafka.client_config(platform, cluster))
    except JavaClientSettingError as err:
        raise LakeConfigError(f"clusters.{cluster}.client: {err}") from None
    return {f"kafka.{key}": value for key, value in settings.items()}


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


#: A Kafka row's contract header (conveyor_sdk.contract.CONTRACT_HEADER) as a column, for a
#: read with ``includeHeaders``: its value, or null for a record without one.
CONTRACT_HEADER_SQL = f"try_element_at(filter(headers, h -> h.key = '{CONTRACT_HEADER}'), 1).value"
#: Whether a Kafka row carries the gateway's mark of fields outside its contract version
#: (conveyor_sdk.contract.EXTRA_FIELDS_HEADER); false for a row without headers.
EXTRA_FIELDS_SQL = f"coalesce(exists(headers, h -> h.key = '{EXTRA_FIELDS_HEADER}'), false)"


def read_range(spark: SparkSession, platform: Platform, plan: RangePlan, headers: bool = False) -> DataFrame:
    """The plan's records as Spark's Kafka rows (partition, offset, timestamp, key, value...;
    ``headers``: their headers too).

    failOnDataLoss stays on: should retention delete part of the range while the run reads it, the
    run fails before its commit and the next one records the gap, instead of skipping it here.
    """
    options: dict[str, Any] = {
        **java_client_options(platform, source_cluster(platform)),
        "assign": json.dumps({plan.topic: [r.partition for r in plan.ranges]}),
        "startingOffsets": plan.starting_json(),
        "endingOffsets": plan.ending_json(),
        "kafka.isolation.level": "read_committed",
        # One client id for every consumer of the run, so the throttle can quota it (conveyor.positions).
        "kafka.client.id": spark_client_id("lake", plan.topic),
        "failOnDataLoss": "true",
        "includeHeaders": "true" if headers else "false",
    }
    return spark.read.format("kafka").options(**options).load()
