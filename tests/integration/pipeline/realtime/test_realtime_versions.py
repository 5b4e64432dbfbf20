"""The real-time views and the contract registry, against real brokers, Spark and Redis: each record
is parsed by the version its gateway header names, so an event valid only under a newer version is
counted, and a record naming a version the registry does not hold goes to the side output."""

from __future__ import annotations

import json
import threading
import time

import orjson
import pytest

from conveyor import kafka
from conveyor.bus.registry import Registry
from conveyor.bus.registry_state import CONTRACT_HEADER
from conveyor.pipeline.realtime.job import run
from conveyor.pipeline.realtime.metrics import RealtimeMetrics
from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.realtime.store import ViewStore, connect
from tests.lakekit import CONTRACT, lake_folder, lake_spark  # noqa: F401
from tests.realtimekit import counters_in_redis, event_at, expected_counters, realtime_case  # noqa: F401

pytestmark = pytest.mark.integration


def test_each_record_is_counted_by_the_version_its_header_names(provisioned, lake_spark, realtime_case):
    case = realtime_case(partitions=1, ctr_lateness="10m", interest_lateness="10m")
    closed = {**json.loads(CONTRACT.read_text()), "additionalProperties": False}
    wider = {**closed, "properties": {**closed["properties"], "country": {"type": "string", "maxLength": 2}}}
    registry = Registry(case.platform, "test-realtime-versions")
    registry.start()
    try:
        v1 = registry.register(f"{case.topic}-value", closed, "test").version
        now = time.time()
        old, new = event_at(now, "impression", "u-1", "b1", 10), {**event_at(now, "click", "u-2", "b1", 5), "country": "NL"}
        refused_by_v1, unknown = ({**event_at(now, "click", u, "b1", 1), "country": "DE"} for u in ("u-3", "u-4"))
        producer = kafka.producer(case.platform, "central", "test-realtime-versions")

        def send(event: dict, header: str) -> None:
            producer.produce(case.topic, orjson.dumps(event), event["user_id"].encode(), partition=0,
                             headers=[(CONTRACT_HEADER, header.encode())])
            assert producer.flush(30) == 0

        send(old, f"{v1.id}:1")
        send(refused_by_v1, f"{v1.id}:1")
        v2 = registry.register(f"{case.topic}-value", wider, "test").version
        send(new, f"{v2.id}:2")
        send(unknown, "999:9")
    finally:
        registry.stop()

    run(lake_spark, case.platform, job_views(case.platform), RealtimeMetrics(), threading.Event(), available_now=True)

    expected_ctr, expected_interests = expected_counters([old, new], case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests
    counters = ViewStore(connect(case.platform), job_id(job_views(case.platform))).state().counters
    assert counters == {"records": 4, "applied": 2, "malformed": 2}, counters
