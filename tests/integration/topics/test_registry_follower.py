"""The contract registry reads its own writes: a registration answers only once the registering
process's follower holds the new version, so whoever asked next, there or in a fresh process,
sees it. Kafka answers a transaction's commit before it writes the commit's markers, so the end a
process waits for must be the log's, not the committed readers' stable end. A reader that takes the
versions once leaves no follower behind, even when the registry's topic does not exist yet."""

from __future__ import annotations

import threading
import uuid

import pytest

from conveyor.bus.registry import Registry, topic_versions
from conveyor.config import Platform
from tests.conftest import without_registry_topic

pytestmark = pytest.mark.integration

ROUNDS = 10


def _schema(fields: int) -> dict:
    required = {"event_id": {"type": "string", "format": "uuid"}, "event_time": {"type": "string", "format": "date-time"}}
    return {"type": "object", "additionalProperties": False, "required": sorted(required), "x-key": "event_id",
            "properties": {**required, **{f"f{i}": {"type": "string"} for i in range(fields)}}}


def test_each_registration_is_held_by_its_registry_when_it_answers(provisioned: Platform) -> None:
    subject = f"test-follower-{uuid.uuid4().hex[:8]}-value"
    registry = Registry(provisioned, "test-registry-follower")
    registry.start()
    try:
        seen = []
        for n in range(1, ROUNDS + 1):
            registered = registry.register(subject, _schema(n), "test")
            assert registered.created and registered.version.version == n
            with registry.reading() as state:
                seen.append(state.latest(subject).version if state.latest(subject) else None)
    finally:
        registry.stop()
    assert seen == list(range(1, ROUNDS + 1))

    fresh = Registry(provisioned, "test-registry-follower-2")
    fresh.start()
    try:
        with fresh.reading() as state:
            assert [v.version for v in state.versions(subject)] == list(range(1, ROUNDS + 1))
    finally:
        fresh.stop()


def test_a_one_time_read_of_a_missing_registry_leaves_no_follower_running(provisioned, platform_data, platform_file,
                                                                          tmp_path):
    platform = without_registry_topic(platform_data, platform_file, tmp_path / "platform.yaml")
    before = {t.ident for t in threading.enumerate() if t.name == "registry"}
    assert topic_versions(platform, "ad-events") == []
    assert [t for t in threading.enumerate() if t.name == "registry" and t.ident not in before] == []
