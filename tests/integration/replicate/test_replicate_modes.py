"""A route copies each topic as its delivery promises: an exact topic in transactions, one delivered
at least once with plain writes, side by side in the same buckets. A topic whose delivery changes
between two runs of the worker is taken up where the other mode left it: nothing copied twice,
nothing skipped."""

from __future__ import annotations

import copy
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.replicate.status import route_status
from conveyor.replicate.worker import Worker
from tests.conftest import eventually, platform_variant
from tests.replicatekit import InProcessWorker, create_topic, read_records

pytestmark = pytest.mark.integration
BATCH = 300


def _owned(worker: Worker, mode: str) -> float:
    return worker.registry.get_sample_value("conveyor_replicate_buckets_owned",
                                            {"route": worker.state.name, "worker": worker.worker_id, "mode": mode}) or 0


def _until_owned(worker: Worker, exactly_once: int, at_least_once: int) -> None:
    """A copier with nothing to copy may take its bucket over after the others have copied all."""
    eventually(lambda: (_owned(worker, "exactly-once"), _owned(worker, "at-least-once")) == (exactly_once, at_least_once),
               60, f"copiers owning ({exactly_once}, {at_least_once}) buckets")


@pytest.fixture
def modes_route(provisioned: Platform, platform_data, platform_file: Path) -> Iterator[tuple[dict, Path, str]]:
    run = uuid.uuid4().hex[:6]
    data = copy.deepcopy(platform_data)
    data["routes"] = {f"modes-{run}": {"source": "dc1", "destination": "central", "pattern": f"mode-{run}-.*",
                                       "buckets": 2, "discovery_interval": "1s", "requested": False}}
    yield data, platform_file.parent / f"replicate-modes-{run}.yaml", run
    for cluster in ("dc1", "central"):
        admin = kafka.admin(provisioned, cluster)
        names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"mode-{run}-")]
        for future in admin.delete_topics(names).values() if names else ():
            future.result()


def _variant(data: dict, path: Path, deliveries: dict[str, str]) -> Platform:
    data = copy.deepcopy(data)
    for topic, delivery in deliveries.items():
        data["topics"][topic] = {"partitions": 3, "delivery": delivery, "clusters": ["dc1", "central"]}
    return platform_variant(data, path)


def _produce(platform: Platform, topic: str, first: int) -> None:
    producer = kafka.producer(platform, "dc1", "modes-test")
    for seq in range(first, first + BATCH):
        producer.produce(topic, orjson.dumps({"seq": seq}), f"k{seq % 7}".encode())
    assert producer.flush(60) == 0


def _copies(platform: Platform, topics: list[str]) -> Counter[tuple[str, int]]:
    return Counter((topic, value["seq"]) for topic, _, _, value in read_records(platform, topics))


def _until_copied(platform: Platform, topics: list[str], count: int) -> None:
    eventually(lambda: sum(_copies(platform, topics).values()) >= count * len(topics), 120,
               f"{count} events of each of {topics} on central", interval=1.0,
               errors=(KeyError,))  # a topic not on central yet


def test_each_topic_is_copied_as_its_delivery_promises_and_a_changed_delivery_resumes_where_it_was(modes_route):
    data, path, run = modes_route
    money, logs = f"mode-{run}-money", f"mode-{run}-logs"
    route = f"modes-{run}"
    platform = _variant(data, path, {money: "exact", logs: "at_least_once"})
    for topic in (money, logs):
        create_topic(platform, "dc1", topic, 3)
        _produce(platform, topic, 0)

    # Both modes in one route: each bucket has a copier per mode.
    with InProcessWorker(platform, route) as worker:
        _until_copied(platform, [money, logs], BATCH)
        _until_owned(worker, 2, 2)

    # The money topic now delivered at least once, the logs exactly once: each copier takes up the
    # other's offsets from the buckets' partitions of the route topic.
    platform = _variant(data, path, {money: "at_least_once", logs: "exact"})
    for topic in (money, logs):
        _produce(platform, topic, BATCH)
    with InProcessWorker(platform, route) as worker:
        _until_copied(platform, [money, logs], 2 * BATCH)
        _until_owned(worker, 2, 2)
        shown = {t.topic: (t.mode, t.waiting) for t in route_status(platform, route).topics}
        assert shown == {money: ("at-least-once", 0), logs: ("exactly-once", 0)}

    # Both exact: the at-least-once copiers have nothing to copy, so none start.
    platform = _variant(data, path, {money: "exact", logs: "exact"})
    for topic in (money, logs):
        _produce(platform, topic, 2 * BATCH)
    with InProcessWorker(platform, route) as worker:
        _until_copied(platform, [money, logs], 3 * BATCH)
        assert (_owned(worker, "exactly-once"), _owned(worker, "at-least-once")) == (2, 0)

    copies = _copies(platform, [money, logs])
    expected = Counter({(topic, seq): 1 for topic in (money, logs) for seq in range(3 * BATCH)})
    assert copies == expected, (f"missing {sum((expected - copies).values())}, "
                                f"copied twice {sum((copies - expected).values())}")
