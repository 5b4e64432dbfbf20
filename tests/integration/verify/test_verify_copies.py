"""``conveyor verify``'s replication invariant on real brokers and a real route worker: it reads every
committed record of the source and every copy on central itself, and fails on a record deleted
from central (naming its offsets) and on records retention deleted from the source before the
route copied them (the gap the route recorded, with its offsets); `--min-events` fails an
invariant that checked too few, and an empty platform is no pass."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import KafkaError, TopicPartition
from typer.testing import CliRunner

from conveyor import kafka
from conveyor.cli import app
from conveyor.config import Platform
from conveyor.verify.checks import Verdict
from conveyor.verify.gather import copies
from tests.conftest import eventually, platform_variant
from tests.replicatekit import InProcessWorker, create_topic

pytestmark = pytest.mark.integration


@pytest.fixture
def route_case(provisioned: Platform, platform_data, platform_file: Path) -> Iterator[tuple[Platform, Path, str, str]]:
    """A platform whose one route copies dc1's topics named ``vcopy-<run>-*`` to central, and one
    such topic of one partition on dc1."""
    run = uuid.uuid4().hex[:6]
    data = copy.deepcopy(platform_data)
    data["routes"] = {f"vcopy-{run}": {"source": "dc1", "destination": "central", "pattern": f"vcopy-{run}-.*",
                                       "buckets": 1, "discovery_interval": "1s", "requested": False}}
    path = platform_file.parent / f"verify-copies-{run}.yaml"
    platform = platform_variant(data, path)
    topic = f"vcopy-{run}-money"
    create_topic(platform, "dc1", topic, 1)
    yield platform, path, f"vcopy-{run}", topic
    for cluster in ("dc1", "central"):
        admin = kafka.admin(provisioned, cluster)
        names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"vcopy-{run}-")]
        for future in admin.delete_topics(names).values() if names else ():
            future.result()


def _produce(platform: Platform, topic: str, first: int, count: int) -> None:
    producer = kafka.producer(platform, "dc1", "verify-copies-test")
    for seq in range(first, first + count):
        producer.produce(topic, orjson.dumps({"seq": seq}), f"k{seq % 7}".encode(), partition=0)
    assert producer.flush(60) == 0


def _delete_below(platform: Platform, cluster: str, topic: str, offset: int) -> None:
    """What retention does, on purpose: the partition's earliest offset becomes ``offset``."""
    admin = kafka.admin(platform, cluster)  # held until the answer: a client collected leaves it unanswered
    (future,) = admin.delete_records([TopicPartition(topic, 0, offset)]).values()
    assert future.result(60).low_watermark == offset


def _committed(platform: Platform, cluster: str, topic: str) -> list:
    """Every committed record of the topic's partition 0 (a transaction's marker may end it, so the
    end is the consumer's end-of-partition event, not an offset)."""
    consumer = kafka.consumer(platform, cluster, f"test-{uuid.uuid4().hex[:8]}", "test-verify-copies",
                              {"enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found = []
    try:
        while True:
            message = consumer.poll(30)
            assert message is not None, f"{topic} on {cluster} returned nothing for 30 s"
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return found
            found.append(message)
    finally:
        consumer.close()


def _copied(platform: Platform, topic: str, missing: int = 0):
    def check():
        (found,) = copies(platform)
        return found if found.missing == missing and found.checked else None
    return eventually(check, 120, f"the route to copy {topic}", interval=1.0)


def test_verify_reads_both_sides_and_fails_on_a_record_deleted_from_central_and_on_a_recorded_gap(route_case):
    platform, path, route, topic = route_case
    _produce(platform, topic, 0, 100)
    with InProcessWorker(platform, route):
        found = _copied(platform, topic)
    assert (found.verdict, found.checked, found.copied_twice, found.differ, found.unknown) == (Verdict.PASS, 100, 0,
                                                                                                0, 0)
    assert found.subject == f"{route}: {topic}"

    # Retention takes offsets 100-129 of the source before the route copies them: the route records
    # the gap and goes on from 130; verify reports the 30 as lost, with their offsets.
    _produce(platform, topic, 100, 50)
    _delete_below(platform, "dc1", topic, 130)
    with InProcessWorker(platform, route):
        found = eventually(lambda: (c := copies(platform)[0]).lost_in_gaps and c.checked == 20 and not c.missing and c,
                           120, "the route to record the gap and copy the rest", interval=1.0)
    assert (found.verdict, found.lost_in_gaps) == (Verdict.FAIL, 30)
    assert f"lost in gaps: {topic}[0]@100..129" in found.problems

    # Central loses the copies of source offsets 130-134 (and all before them, which the source no
    # longer holds to compare): those 5 are missing, named by their source offsets.
    copied_at = {int(dict(m.headers())["conveyor-origin"].split(b"/")[-1]): m.offset()
                 for m in _committed(platform, "central", topic)}
    _delete_below(platform, "central", topic, copied_at[134] + 1)
    result = CliRunner().invoke(app, ["verify", "--platform", str(path), "--only", "replication", "-o", "json"])
    assert result.exit_code == 1, result.output
    (check,) = json.loads(result.stdout[:result.stdout.rindex("}") + 1])["checks"]
    assert (check["verdict"], check["figures"]["missing"], check["figures"]["lost_in_gaps"]) == ("FAIL", 5, 30)
    assert check["problems"][0] == f"missing: {', '.join(f'{topic}[0]@{o}' for o in range(130, 135))}"

    # More events than the invariant checked: fails as too few, whatever its verdict.
    result = CliRunner().invoke(app, ["verify", "--platform", str(path), "--only", "replication",
                                      "--min-events", "1000"])
    assert result.exit_code == 1 and "fewer than --min-events 1,000" in result.output, result.output


def test_nothing_checked_is_no_pass(route_case, platform_data, platform_file):
    platform, path, route, topic = route_case
    # The route's topic holds no record: the invariant holds over nothing, which --min-events refuses.
    held = CliRunner().invoke(app, ["verify", "--platform", str(path), "--only", "replication"])
    assert held.exit_code == 0 and "0 source records" in held.output, held.output
    too_few = CliRunner().invoke(app, ["verify", "--platform", str(path), "--only", "replication", "--min-events", "1"])
    assert too_few.exit_code == 1 and "fewer than --min-events 1" in too_few.output, too_few.output
    # No route at all: a skip, with an exit status of its own.
    data = copy.deepcopy(platform_data)
    data["routes"] = {}
    empty = platform_file.parent / f"verify-empty-{uuid.uuid4().hex[:6]}.yaml"
    platform_variant(data, empty)
    skipped = CliRunner().invoke(app, ["verify", "--platform", str(empty), "--only", "replication"])
    assert skipped.exit_code == 3 and "SKIP" in skipped.output, skipped.output
