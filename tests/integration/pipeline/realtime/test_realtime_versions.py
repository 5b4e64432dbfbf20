"""The views parse each record by the contract version its header names, against real brokers, the
registry, Spark and Redis. Version 1 of the topic's contract is closed, so an event with version 2's
new field breaks it: only a record parsed by its own version counts. A micro-batch reads the registry
before each batch; a real-time query meets a version registered after it started, and starts over."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import orjson
import pytest

from conveyor.bus.registry import Registry
from conveyor.bus.registry_state import Version
from conveyor.pipeline.realtime.job import run
from conveyor.pipeline.realtime.live import live_state
from conveyor.pipeline.realtime.metrics import RealtimeMetrics
from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.realtime.store import ViewStore, connect
from conveyor_sdk.contract import ContractVersion
from tests.conftest import eventually
from tests.lakekit import CONTRACT, lake_folder, lake_spark  # noqa: F401
from tests.realtimekit import counters_in_redis, event_at, expected_counters, realtime_case, start_job  # noqa: F401

pytestmark = pytest.mark.integration

CLOSED = {**json.loads(CONTRACT.read_text()), "additionalProperties": False}
WITH_COUNTRY = {**CLOSED, "properties": {**CLOSED["properties"], "country": {"type": "string", "maxLength": 2}}}


def _closed_case(realtime_case, tmp_path: Path, **settings):
    contract = tmp_path / "closed.schema.json"
    contract.write_text(json.dumps(CLOSED))
    return realtime_case(partitions=1, ctr_lateness="10m", interest_lateness="10m", contract=contract, **settings)


def _register(case, schema: dict) -> Version:
    registry = Registry(case.platform, f"test-{case.topic}")
    try:
        registry.start()
        return registry.register(f"{case.topic}-value", schema, "test").version
    finally:
        registry.stop()


def _events(count: int, country: str | None) -> list[dict]:
    now = time.time()
    events = [event_at(now - 60 + i, "impression", f"user-{i % 3}", f"b{i % 2}", price=10 + i) for i in range(count)]
    return [{**e, "country": country} if country else e for e in events]


def _send(case, events: list[dict], version: Version | ContractVersion) -> None:
    from conveyor import kafka

    header = ContractVersion(version.id, version.version).header()
    producer = kafka.producer(case.platform, "central", f"test-{case.topic}")
    for event in events:  # as the replicator copies them from the gateway: the header with the record
        producer.produce(case.topic, orjson.dumps(event), key=event["user_id"].encode(), headers=[header])
    assert producer.flush(30) == 0


def test_a_micro_batch_counts_each_record_by_the_version_it_was_checked_against(provisioned, lake_spark,
                                                                               realtime_case, tmp_path):
    case = _closed_case(realtime_case, tmp_path)
    first = _register(case, CLOSED)
    old = _events(6, None)
    _send(case, old, first)
    second = _register(case, WITH_COUNTRY)
    new = _events(6, "NL")
    _send(case, new, second)
    _send(case, _events(1, "NL"), first)  # version 1 is closed to the field: malformed
    _send(case, _events(1, None), ContractVersion(second.id + 1000, 9))  # a version the registry never held

    run(lake_spark, case.platform, job_views(case.platform), RealtimeMetrics(), threading.Event(), available_now=True)

    expected_ctr, expected_interests = expected_counters(old + new, case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests
    counters = ViewStore(connect(case.platform), job_id(job_views(case.platform))).state().counters
    assert dict(counters) == {"records": 14, "applied": 12, "malformed": 2}


def test_a_real_time_query_starts_over_on_a_version_registered_after_it_started(provisioned, realtime_case,
                                                                                tmp_path):
    case = _closed_case(realtime_case, tmp_path, spark={"master": "local[1]"}, mode="real-time",
                        real_time_batch="5s")
    first = _register(case, CLOSED)
    log = tmp_path / "realtime.log"
    job = start_job(case.path, log)
    views = job_views(case.platform)
    try:
        def counted() -> dict[str, int]:
            assert job.poll() is None, log.read_text()[-3000:]
            return dict(live_state(connect(case.platform), job_id(views), [(case.topic, 0)])[1])

        old = _events(6, None)
        _send(case, old, first)
        eventually(lambda: counted().get("applied") == 6, 240, f"the query to count version 1's events ({log})")
        second = _register(case, WITH_COUNTRY)
        new = _events(6, "NL")
        _send(case, new, second)
        eventually(lambda: counted().get("applied") == 12, 240, f"the query to count version 2's events ({log})")
        assert counted() == {"records": 12, "applied": 12}
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(120)
    # The fault: the query met version 2 after its start, and started over rather than reject.
    assert "reading the registry again and starting the query over" in log.read_text()
    expected_ctr, expected_interests = expected_counters(old + new, case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests
