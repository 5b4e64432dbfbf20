"""The largest event the gateway accepts crosses the hops after it (conveyor.limits): dc1's gateway
takes it, the replicator copies it to central with its origin header, and nothing stops. One byte
more is refused at the gateway, where the client hears of it, not somewhere later."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import orjson
import pytest

from conveyor.config import Platform
from tests.conftest import demo_event, eventually, padded_to, platform_variant
from tests.integration.gateway.test_gateway import post
from tests.replicatekit import Workers, read_records

pytestmark = pytest.mark.integration
TOPIC = "largest-events"
ROUTE = "dc1-largest"


@pytest.fixture
def largest_platform(provisioned: Platform, platform_data, platform_file: Path) -> tuple[Platform, Path]:
    """A topic of the ad-events contract on dc1 and central, and a route of its own that copies it."""
    from conveyor.topics import provisioner

    data = copy.deepcopy(platform_data)
    data["topics"][TOPIC] = {**data["topics"]["ad-events"], "partitions": 3}
    data["routes"] = {ROUTE: {"source": "dc1", "destination": "central", "topics": [TOPIC]}}
    path = platform_file.parent / "largest.yaml"
    platform = platform_variant(data, path)
    provisioner.apply(platform, provisioner.plan(platform))
    return platform, path


def event_of_size(size: int) -> dict:
    """An ad event whose key and value take exactly ``size`` bytes together."""
    event = padded_to(demo_event(user_id="u" * 40, banner_id="b-1", category="sport"), size)
    assert len(event["user_id"]) + len(orjson.dumps(event)) == size
    return event


def test_the_largest_accepted_event_is_copied_to_central_and_one_byte_more_is_refused(
        largest_platform, serve_gateway, tmp_path):
    platform, path = largest_platform
    url = serve_gateway(platform, "dc1")
    limit = serve_gateway.gateways[url].event_limits[TOPIC]
    largest = event_of_size(limit)
    too_large = event_of_size(limit + 1)
    assert post(url, TOPIC, too_large).status_code == 413
    answer = post(url, TOPIC, largest)
    assert answer.status_code == 200, answer.text

    workers = Workers(path, tmp_path, random.Random(0))  # one worker, never killed: nothing to choose
    workers.start(f"{ROUTE}-w0")
    try:
        copied = eventually(lambda: [v for _, _, _, v in read_records(platform, [TOPIC]) if v == largest], 120,
                            "the largest event on central")
        assert copied == [largest]
    finally:
        workers.stop_all()
    logs = (tmp_path / f"{ROUTE}-w0.log").read_text(errors="replace")
    assert "record too large" not in logs and "partition is stopped" not in logs
