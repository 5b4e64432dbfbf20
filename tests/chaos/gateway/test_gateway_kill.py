"""The gateway SIGKILLed under SDK traffic: it is killed at random moments (seeded) and started
again on the same port while a Publisher keeps sending. Every event the gateway answered 2xx for is
on Kafka, every batch is accepted in the end through the SDK's retries, and the lake, with
de-duplication on, holds every event the SDK sent exactly once (a retried batch whose first answer
was lost to a kill is written twice; its event ids are the same).

CONVEYOR_GATEWAY_CHAOS_KILLS sets the number of kills (default 2); CONVEYOR_CHAOS_SEED the seed.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from conveyor.config import Platform
from conveyor.pipeline.lake import run_once
from tests.conftest import read_topic
from tests.gatewaykit import GatewayProcess, Traffic
from tests.lakekit import GatewayLakeCase, drop_topics, gateway_lake_case, lake_folder, lake_spark, rows_of  # noqa: F401

pytestmark = pytest.mark.chaos

KILLS = int(os.environ.get("CONVEYOR_GATEWAY_CHAOS_KILLS", "2"))
SEED = int(os.environ.get("CONVEYOR_CHAOS_SEED", random.randrange(1 << 32)))


@pytest.fixture
def case(provisioned: Platform, platform_data: dict[str, Any], lake_folder: Path,  # noqa: F811
         lake_spark: Any) -> Iterator[GatewayLakeCase]:  # noqa: F811
    made = gateway_lake_case(platform_data, lake_folder, ["ad-events"], dedup_window="1h")
    yield made
    drop_topics(made)


def test_killed_gateway_loses_nothing_it_answered_and_the_lake_counts_each_event_once(
        case: GatewayLakeCase, lake_spark: Any, tmp_path: Path) -> None:  # noqa: F811
    rng = random.Random(SEED)
    topic = case.topics["ad-events"]
    gateway = GatewayProcess(case.path, case.platform.runtime.base_port + 500, tmp_path / "gateway.log")
    gateway.start()
    try:
        with Traffic(gateway.url, topic) as traffic:
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.3, 2.5))
                gateway.kill()
                time.sleep(rng.uniform(0.0, 1.0))
                gateway.start()
            time.sleep(1.0)
        note = f"seed {SEED} (rerun with CONVEYOR_CHAOS_SEED={SEED}); gateway log {gateway.log}"
        assert traffic.failure is None, f"the SDK gave up: {traffic.failure!r}; {note}"
        written = [orjson.loads(m.value())["event_id"] for m in read_topic(case.platform, "dc1", topic)]
        on_kafka = set(written)
        print(f"gateway chaos: {KILLS} kills, {len(traffic.sent)} events sent, {len(written) - len(on_kafka)} "
              f"written twice by retries; {note}")
        missing = set(traffic.acked) - on_kafka
        assert not missing, f"{len(missing)} events answered 2xx are not on Kafka; {note}"
    finally:
        gateway.stop()

    run_once(lake_spark, case.platform, [topic])
    sent = {e["event_id"] for e in traffic.sent}
    landed = [row["event_id"] for row in rows_of(lake_spark, topic)]
    assert len(landed) == len(set(landed)), f"the lake holds duplicates; {note}"
    assert set(landed) == sent, (
        f"lake: {len(set(landed) - sent)} unexpected, {len(sent - set(landed))} missing "
        f"of {len(traffic.sent)} sent; {note}")
