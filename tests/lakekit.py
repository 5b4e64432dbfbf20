"""Fixtures and helpers of the lake tests (integration and chaos); test modules import them.

Every lake test lands its own topic (created on central, declared with the ad-events contract in a
platform file of its own) into one warehouse shared by the session, so one Spark session serves
all of them. Spark starts once per test process; the chaos test runs its jobs as separate processes.
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from conveyor import kafka
from conveyor.config import Platform, load_platform
from conveyor.pipeline.spark import spark_session
from conveyor.pipeline.tables import data_table, quarantine_table

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "ad-events.schema.json"


@pytest.fixture(scope="session")
def lake_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's one folder for the lake: test modules each import these fixtures (and so
    each instantiate them), so it is derived from the session, never made per module."""
    folder = tmp_path_factory.getbasetemp() / "lake"
    folder.mkdir(exist_ok=True)
    return folder


def lake_data(platform_data: dict[str, Any], platform_file: Path, folder: Path, topic: str | None,
              partitions: int, lake: dict[str, Any]) -> dict[str, Any]:
    """The session's platform with its lake in ``folder`` (a Hadoop catalog) and ``topic``, if
    given, on central as the lake's only topic."""
    data = copy.deepcopy(platform_data)
    for spec in data["topics"].values():  # the file is written elsewhere: keep contracts found
        if spec.get("contract"):
            spec["contract"] = str(platform_file.parent / spec["contract"])
    pipeline = data.setdefault("pipeline", {})
    pipeline.update(source="central", catalog={"warehouse": str(folder / "warehouse")})
    if topic is not None:
        data["topics"][topic] = {"partitions": partitions, "contract": str(CONTRACT), "clusters": ["central"]}
        pipeline["lake"] = {"topics": [topic], **lake}
    return data


@functools.cache
def _spark(platform_file: Path) -> Any:
    return spark_session(load_platform(platform_file), "conveyor-tests")


@pytest.fixture(scope="session")
def lake_spark(platform_data: dict[str, Any], platform_file: Path, lake_folder: Path, local_platform: Any) -> Any:
    """One Spark session on the session's warehouse, whichever module asks first."""
    path = lake_folder / "platform.yaml"
    path.write_text(yaml.safe_dump(lake_data(platform_data, platform_file, lake_folder, None, 0, {}), sort_keys=False))
    return _spark(path)


@dataclass(frozen=True)
class LakeCase:
    """A platform whose only lake topic is a new topic on central, and its platform file."""

    platform: Platform
    path: Path
    topic: str


@pytest.fixture
def lake_case(platform_data: dict[str, Any], platform_file: Path, lake_folder: Path, lake_spark: Any,
              topic_factory: Callable[..., str]) -> Callable[..., LakeCase]:
    """``make(partitions=3, config=None, **lake_settings) -> LakeCase``."""

    def make(partitions: int = 3, config: dict[str, str] | None = None, **lake: Any) -> LakeCase:
        topic = topic_factory("central", partitions, config)
        path = lake_folder / f"platform-{topic}.yaml"
        data = lake_data(platform_data, platform_file, lake_folder, topic, partitions, lake)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return LakeCase(load_platform(path), path, topic)

    return make


def produce(platform: Platform, topic: str, values: Iterable[bytes | dict[str, Any] | None],
            partition: int | None = None) -> list[tuple[int, int]]:
    """Produce to central and wait for every acknowledgement; (partition, offset) of each record."""
    producer = kafka.producer(platform, "central", f"lake-test-{uuid.uuid4().hex[:6]}")
    acked: list[tuple[int, int]] = []
    errors: list[Any] = []

    def delivered(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((message.partition(), message.offset()))

    for value in values:
        payload = orjson.dumps(value) if isinstance(value, dict) else value
        key = value["user_id"].encode() if isinstance(value, dict) and "user_id" in value else None
        extra = {} if partition is None else {"partition": partition}
        producer.produce(topic, payload, key=key, on_delivery=delivered, **extra)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, (remaining, errors)
    return acked


def rows_of(spark: Any, topic: str) -> list[Any]:
    return spark.table(data_table(topic)).collect()


def quarantine_of(spark: Any, topic: str) -> list[Any]:
    return spark.table(quarantine_table(topic)).orderBy("kafka_partition", "kafka_offset").collect()


@dataclass(frozen=True)
class GatewayLakeCase:
    """New topics on dc1 that take events through the gateway and that the lake lands straight from
    dc1, and the platform file that declares them."""

    platform: Platform
    path: Path
    #: contract name (a file in contracts/) -> topic
    topics: dict[str, str]


#: The demo service that produces each contract's topic.
PRODUCERS = {"ad-events": "adserver", "notifications": "notifier"}


def gateway_lake_case(platform_data: dict[str, Any], folder: Path, contracts: Iterable[str],
                      realtime: Callable[[dict[str, str]], dict[str, Any]] | None = None,
                      **lake: Any) -> GatewayLakeCase:
    """Declares and creates one new dc1 topic per contract; delete them with :func:`drop_topics`.
    ``realtime``: the pipeline's real-time settings, built from the topics (contract -> topic)."""
    data = lake_data(platform_data, ROOT / "platform.yaml", folder, None, 0, {})
    topics = {contract: f"gw-{contract}-{uuid.uuid4().hex[:8]}" for contract in contracts}
    for contract, topic in topics.items():
        data["topics"][topic] = {"partitions": 3, "contract": str(ROOT / "contracts" / f"{contract}.schema.json"),
                                 "producers": [PRODUCERS[contract]], "consumers": ["lake"], "clusters": ["dc1"]}
    data["pipeline"].update(source="dc1", lake={"topics": list(topics.values()), **lake})
    if realtime is not None:
        data["pipeline"]["realtime"] = realtime(topics)
    path = folder / f"platform-{next(iter(topics.values()))}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    platform = load_platform(path)
    from confluent_kafka.admin import NewTopic

    admin = kafka.admin(platform, "dc1")
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in topics.values()]).values():
        future.result(30)
    return GatewayLakeCase(platform, path, topics)


def drop_topics(case: GatewayLakeCase) -> None:
    admin = kafka.admin(case.platform, "dc1")
    for future in admin.delete_topics(list(case.topics.values())).values():
        future.result(30)
