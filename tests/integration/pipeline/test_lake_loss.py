"""Loss is never silent: data deleted before it landed is recorded as a gap with its exact offsets,
printed, and the CLI exits 3; the audit compares what the writable clusters' logs hold with what
landed."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import orjson
import pytest
from confluent_kafka import TopicPartition

from conveyor import kafka
from conveyor.config import Platform
from conveyor.pipeline.audit import audit_lake
from conveyor.pipeline.completeness import floor_hour
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.offsets import Gap
from conveyor.pipeline.schedule import EXIT_DATA_LOST
from conveyor.pipeline.tables import current_commit, data_table, gaps_of, quarantine_table
from tests.conftest import demo_event
from tests.lakekit import lake_case, lake_folder, lake_spark, produce, rows_of  # noqa: F401

pytestmark = pytest.mark.integration


def test_retention_deleting_unread_data_is_recorded_as_a_gap_and_the_cli_exits_3(lake_spark, lake_case):
    case = lake_case(partitions=1)
    produce(case.platform, case.topic, [demo_event() for _ in range(10)], partition=0)
    assert run_once(lake_spark, case.platform).topics[0].landed == 10

    later = [demo_event() for _ in range(20)]  # offsets 10..29
    produce(case.platform, case.topic, later, partition=0)
    admin = kafka.admin(case.platform, "central")
    deleted = admin.delete_records([TopicPartition(case.topic, 0, 25)])  # retention, on purpose
    for future in deleted.values():
        assert future.result().low_watermark == 25

    result = subprocess.run(
        [sys.executable, "-m", "conveyor", "lake", "run", "--once", "--platform", str(case.path)],
        capture_output=True, text=True, timeout=600,
    )
    commits = {t: current_commit(lake_spark, t) for t in (data_table(case.topic), quarantine_table(case.topic))}
    assert result.returncode == EXIT_DATA_LOST, (result.stdout + result.stderr, commits)
    assert f"DATA LOST: {case.topic}[0] offsets 10..24 (15 records)" in result.stderr
    assert gaps_of(lake_spark, case.topic) == [Gap(case.topic, 0, 10, 24)]
    landed = {r.event_id for r in rows_of(lake_spark, case.topic)}
    assert len(landed) == 15 and {e["event_id"] for e in later[15:]} <= landed

    # The gap is reported once: the next run starts past it.
    again = run_once(lake_spark, case.platform).topics[0]
    assert (again.lost, again.records_read) == (0, 0)
    assert gaps_of(lake_spark, case.topic) == [Gap(case.topic, 0, 10, 24)]


def _write(platform: Platform, cluster: str, topic: str, events: list[dict], headers=None) -> None:
    producer = kafka.producer(platform, cluster, "lake-test-audit")
    for event in events:
        producer.produce(topic, orjson.dumps(event), key=event["user_id"].encode(), headers=headers)
    assert producer.flush(60) == 0


def test_audit_counts_the_accepted_events_in_the_writable_logs_and_reports_lost_and_duplicated_per_hour_with_dedup_off_so_a_copy_lands(
        lake_spark, lake_case):
    case = lake_case(partitions=2, writable=("dc1",), dedup_window="0s", allowed_lateness="0s")
    first_hour = floor_hour(datetime.now(timezone.utc)) - timedelta(hours=3)
    second_hour = first_hour + timedelta(hours=1)

    def at(hour: datetime, minute: int) -> str:
        return (hour + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")

    first = [demo_event(event_time=at(first_hour, i)) for i in range(6)]
    second = [demo_event(event_time=at(second_hour, i)) for i in range(5)]
    # What the gateways accepted: every event is a record in dc1's log. A copy a replicator wrote
    # there carries its origin and is not accepted twice.
    _write(case.platform, "dc1", case.topic, first + second)
    _write(case.platform, "dc1", case.topic, second[:1], headers=[("conveyor-origin", b"dc2/t/0/7")])
    # On the way to the lake two events of hour two are lost, and one is written twice.
    produce(case.platform, case.topic, first + second[:3] + [second[0]])

    run_once(lake_spark, case.platform)
    hours = {(h.topic, h.hour): h for h in audit_lake(lake_spark, case.platform)}
    ok, bad = hours[(case.topic, first_hour)], hours[(case.topic, second_hour)]
    assert (ok.produced, ok.landed, ok.lost, ok.duplicates, ok.complete, ok.held, ok.failed) == (
        6, 6, 0, 0, True, True, False)
    assert (bad.produced, bad.landed, bad.distinct, bad.lost, bad.duplicates) == (5, 4, 3, 2, 1)
    assert bad.failed

    # Retention deletes dc1's first records: the hours before its first retained record can no
    # longer be counted whole, and are not judged.
    consumer = kafka.consumer(case.platform, "dc1", "lake-test-audit", "lake-test-audit")
    try:
        written = next(p for p in (0, 1) if consumer.get_watermark_offsets(TopicPartition(case.topic, p), 10)[1])
    finally:
        consumer.close()
    admin = kafka.admin(case.platform, "dc1")
    for future in admin.delete_records([TopicPartition(case.topic, written, 1)]).values():
        assert future.result().low_watermark == 1
    hours = {(h.topic, h.hour): h for h in audit_lake(lake_spark, case.platform)}
    bad = hours[(case.topic, second_hour)]
    assert (bad.held, bad.complete, bad.failed) == (False, True, False)
