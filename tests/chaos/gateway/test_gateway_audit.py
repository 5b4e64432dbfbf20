"""The audit across gateway SIGKILLs: a gateway on dc1 is killed at random moments (seeded) while
the SDK publishes events dated in two past hours; a route's worker copies dc1 into central and the
lake lands central. The audit then finds, per hour, exactly the events the test's own ledger sent,
none lost and none duplicated; and one record deleted from central on purpose before the lake read
it is reported lost in its hour and nowhere else. A gateway's kill takes no count with it: what
was accepted is counted from dc1's log.

CONVEYOR_GATEWAY_CHAOS_KILLS sets the number of kills (default 2); CONVEYOR_CHAOS_SEED the seed.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import TopicPartition

from conveyor import kafka
from conveyor.config import Platform
from conveyor.pipeline.audit import audit_lake
from conveyor.pipeline.completeness import floor_hour
from conveyor.pipeline.lake import run_once
from tests.conftest import demo_event, eventually, read_topic
from tests.gatewaykit import GatewayProcess, Traffic
from tests.lakekit import GatewayLakeCase, drop_topics, gateway_lake_case, lake_folder, lake_spark  # noqa: F401
from tests.replicatekit import InProcessWorker, read_records, wait_until_replicated

pytestmark = pytest.mark.chaos

KILLS = int(os.environ.get("CONVEYOR_GATEWAY_CHAOS_KILLS", "2"))
SEED = int(os.environ.get("CONVEYOR_CHAOS_SEED", random.randrange(1 << 32)))
#: Two complete hours the events are dated in, alternately.
HOURS = tuple(floor_hour(datetime.now(timezone.utc)) - timedelta(hours=h) for h in (3, 2))


def _dated(n: int, size: int) -> list[dict[str, Any]]:
    return [demo_event(user_id=f"user-{n + i}", event_time=(HOURS[(n + i) % 2] + timedelta(seconds=(n + i) % 3600))
                       .isoformat().replace("+00:00", "Z")) for i in range(size)]


@pytest.fixture
def case(provisioned: Platform, platform_data: dict[str, Any], lake_folder: Path,  # noqa: F811
         lake_spark: Any) -> Iterator[GatewayLakeCase]:  # noqa: F811
    made = gateway_lake_case(platform_data, lake_folder, ["ad-events"], via="central", dedup_window="1d",
                             allowed_lateness="0s")
    yield made
    drop_topics(made)


def test_the_audit_counts_every_accepted_event_across_gateway_kills_and_names_a_record_removed_on_the_way(
        case: GatewayLakeCase, lake_spark: Any, tmp_path: Path) -> None:  # noqa: F811
    rng = random.Random(SEED)
    topic = case.topics["ad-events"]
    note = f"seed {SEED} (rerun with CONVEYOR_CHAOS_SEED={SEED})"
    gateway = GatewayProcess(case.path, case.platform.runtime.base_port + 502, tmp_path / "gateway.log")
    gateway.start()
    mid_request = 0
    try:
        with Traffic(gateway.url, topic, _dated, size=20) as traffic:
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.5, 2.5))
                mid_request += traffic.in_flight
                gateway.kill()
                time.sleep(rng.uniform(0.0, 1.0))
                gateway.start()
            time.sleep(1.0)
    finally:
        gateway.stop()
    assert traffic.failure is None, f"the SDK gave up: {traffic.failure!r}; {note}"
    # The fault happened where it matters: a kill caught a request on its way.
    assert mid_request >= 1, f"no kill caught a request in flight; {note}"
    ledger = Counter(floor_hour(datetime.fromisoformat(e["event_time"])) for e in traffic.sent)
    written = read_topic(case.platform, "dc1", topic)
    assert {orjson.loads(m.value())["event_id"] for m in written} == {e["event_id"] for e in traffic.sent}, note

    # The route copies dc1 into central; then one record is deleted there before the lake reads it.
    with InProcessWorker(case.platform, "dc1-central"):
        wait_until_replicated(case.platform, topic)
        eventually(lambda: len(read_records(case.platform, [topic])) == len(written), 120,
                   f"central to hold dc1's {len(written)} records", interval=3)
    copied = read_records(case.platform, [topic])
    ids = Counter(event["event_id"] for _, _, _, event in copied)
    # A record whose event the SDK never resent, so no copy of it lands in its place.
    _, partition, _, victim = next(r for r in sorted(copied, key=lambda r: r[1:3])
                                   if r[2] == 0 and ids[r[3]["event_id"]] == 1)
    admin = kafka.admin(case.platform, "central")
    for future in admin.delete_records([TopicPartition(topic, partition, 1)]).values():
        assert future.result().low_watermark == 1

    run_once(lake_spark, case.platform, [topic])
    hours = {h.hour: h for h in audit_lake(lake_spark, case.platform, [topic])}
    retried = len(written) - len(traffic.sent)
    print(f"gateway audit chaos: {KILLS} kills ({mid_request} mid-request), {len(traffic.sent)} events sent, "
          f"{retried} written twice by retries; {note}")
    lost_hour = floor_hour(datetime.fromisoformat(victim["event_time"]))
    assert set(hours) == set(HOURS), note
    for hour in HOURS:
        audit = hours[hour]
        lost = 1 if hour == lost_hour else 0
        assert (audit.complete, audit.held) == (True, True), (hour, note)
        # The accepted count, less the copies the lake de-duplicated, is the ledger's, hour by hour.
        assert audit.produced - audit.copies == ledger[hour], (audit, ledger[hour], note)
        assert (audit.lost, audit.duplicates, audit.distinct) == (lost, 0, ledger[hour] - lost), (audit, note)
