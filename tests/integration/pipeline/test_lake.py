"""The lake job on real Kafka and real Spark: offsets committed with the data, bounded ranges,
quarantine, de-duplication, completeness and status."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from conveyor.ops.lag import Status
from conveyor.ops.rewind import MOVED_BACK
from conveyor.pipeline.catalog import CATALOG
from conveyor.pipeline.completeness import floor_hour
from conveyor.pipeline.kafka_source import java_client_options
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.lake_positions import publish_position
from conveyor.pipeline.status import topic_status
from conveyor.pipeline.tables import OFFSETS_PROPERTY, as_utc, current_commit, data_table, quarantine_table
from conveyor.positions import group_name
from tests.conftest import demo_event
from tests.lakekit import lake_case, lake_folder, lake_spark, produce, quarantine_of, rows_of  # noqa: F401
from tests.opskit import cluster_watch
from tests.positionkit import monitored

pytestmark = pytest.mark.integration


def _snapshots(spark, table: str) -> list:
    return spark.sql(f"SELECT snapshot_id, summary FROM {table}.snapshots ORDER BY committed_at").collect()


def test_each_run_lands_the_new_range_with_its_end_offsets_in_the_same_commit(lake_spark, lake_case):
    case = lake_case(partitions=3)
    # Every other event has the optional fields: they must land as values, the others as nulls.
    # Every third has a field outside the contract: only its row keeps the record's bytes.
    first = [demo_event(user_id=f"user-{i}", **({"price_micros": i, "banner_id": f"b{i}"} if i % 2 else {}),
                        **({"note": f"n{i}"} if i % 3 == 0 else {}))
             for i in range(30)]
    acked = produce(case.platform, case.topic, first)

    summary = run_once(lake_spark, case.platform)
    (run,) = summary.topics
    assert (run.records_read, run.landed, run.quarantined, run.lost) == (30, 30, 0, 0)
    rows = rows_of(lake_spark, case.topic)
    assert sorted(r.event_id for r in rows) == sorted(e["event_id"] for e in first)
    assert {(r.kafka_partition, r.kafka_offset) for r in rows} == set(acked)
    assert all(r.event_time is not None for r in rows)
    sent = {e["event_id"]: e for e in first}
    assert {r.event_id: (r.price_micros, r.banner_id) for r in rows} == {
        i: (e.get("price_micros"), e.get("banner_id")) for i, e in sent.items()
    }
    assert all(as_utc(r.event_time) == datetime.fromisoformat(sent[r.event_id]["event_time"]) for r in rows)
    kept = {r.event_id: json.loads(r.raw_value) for r in rows if r.raw_value is not None}
    assert kept == {i: e for i, e in sent.items() if "note" in e}

    ends = {p: max(o for q, o in acked if q == p) + 1 for p, _ in acked}
    latest = _snapshots(lake_spark, data_table(case.topic))[-1]
    stored = {int(p): o for p, o in json.loads(latest.summary[OFFSETS_PROPERTY]).items()}
    assert {p: o for p, o in stored.items() if p in ends} == ends
    assert int(latest.summary["added-records"]) == 30  # the offsets rode on the commit of the rows

    # Nothing new: no commit at all.
    before = len(_snapshots(lake_spark, data_table(case.topic)))
    again = run_once(lake_spark, case.platform).topics[0]
    assert (again.committed, again.records_read) == (False, 0)
    assert len(_snapshots(lake_spark, data_table(case.topic))) == before

    # More events: exactly those are read.
    second = [demo_event(user_id=f"user-{i}") for i in range(12)]
    produce(case.platform, case.topic, second)
    third = run_once(lake_spark, case.platform).topics[0]
    assert (third.records_read, third.landed) == (12, 12)
    landed = [r.event_id for r in rows_of(lake_spark, case.topic)]
    assert sorted(landed) == sorted(e["event_id"] for e in first + second)
    _the_position_feed_shows_the_table_and_its_rollback(lake_spark, case, watched=len(second))


def _the_position_feed_shows_the_table_and_its_rollback(spark, case, watched: int) -> None:
    """conveyor.lake.<topic> holds the tables' position for monitoring; rolling the data table back one
    snapshot and publishing shows REWIND in ops with exactly the records of the undone commit."""
    group = group_name("lake", case.topic)
    stored = current_commit(spark, data_table(case.topic)).positions
    assert monitored(case.platform, "central", group) == ({(case.topic, p): o for p, o in stored.items()}, {"iceberg"})

    with cluster_watch(case.platform) as watch:
        before = next(g for g in watch.cycle().groups if g.group == group)
        assert before.kept_in == "iceberg" and before.status.total_lag == 0
        table = data_table(case.topic).split(".", 1)[1]
        previous = _snapshots(spark, data_table(case.topic))[-2].snapshot_id
        spark.sql(f"CALL {CATALOG}.system.rollback_to_snapshot('{table}', {previous})")
        publish_position(case.platform, case.topic,
                         [current_commit(spark, t).positions for t in (data_table(case.topic), quarantine_table(case.topic))])
        after = next(g for g in watch.cycle().groups if g.group == group)
    assert after.status.status is Status.REWIND
    moved = [f for f in after.findings.offsets if f.kind in MOVED_BACK]
    assert sum(f.records for f in moved) == watched == after.status.total_lag
    assert {e.finding for e in after.evidence} == set(moved)


def test_a_first_run_over_an_empty_topic_commits_its_positions_and_lands_nothing(lake_spark, lake_case):
    case = lake_case(partitions=2)
    run = run_once(lake_spark, case.platform).topics[0]
    assert (run.committed, run.records_read, run.landed, run.quarantined) == (True, 0, 0, 0)
    for table in (data_table(case.topic), quarantine_table(case.topic)):
        commit = current_commit(lake_spark, table)
        assert commit is not None and commit.positions == {0: 0, 1: 0} and commit.records == 0


def test_bad_records_go_to_quarantine_with_reason_raw_bytes_and_coordinates(lake_spark, lake_case):
    case = lake_case(partitions=1)
    good = [demo_event(), demo_event()]
    bad = {
        b"this is not json": "not JSON",
        b"[1, 2, 3]": "not a JSON object",
        json.dumps({k: v for k, v in demo_event().items() if k != "user_id"}).encode(): "user_id is required",
        json.dumps(demo_event(type="bogus")).encode(): "breaks the contract",
        json.dumps(demo_event(event_id="not-a-uuid")).encode(): "breaks the contract",
    }
    produce(case.platform, case.topic, [good[0], *bad, good[1]], partition=0)

    run = run_once(lake_spark, case.platform).topics[0]
    assert (run.records_read, run.landed, run.quarantined) == (7, 2, 5)
    assert sorted(r.event_id for r in rows_of(lake_spark, case.topic)) == sorted(e["event_id"] for e in good)
    quarantined = quarantine_of(lake_spark, case.topic)
    assert [bytes(q.raw_value) for q in quarantined] == list(bad)
    assert [q.kafka_offset for q in quarantined] == [1, 2, 3, 4, 5]
    assert all(q.kafka_partition == 0 and q.kafka_timestamp is not None for q in quarantined)
    for row, expected in zip(quarantined, bad.values(), strict=True):
        assert expected in row.reason, (row.reason, expected)
    assert "rule enum" in quarantined[3].reason


def test_an_event_id_seen_again_within_the_window_lands_once(lake_spark, lake_case):
    case = lake_case(partitions=2, dedup_window="1h")
    event = demo_event()
    # A producer's retry, in one run; and a bad record, which the quarantine reads back from the
    # parsed range that de-duplication kept on disk.
    produce(case.platform, case.topic, [event, event, demo_event(), b"broken"])
    first = run_once(lake_spark, case.platform).topics[0]
    assert (first.records_read, first.landed, first.duplicates_dropped, first.quarantined) == (4, 2, 1, 1)
    assert [bytes(q.raw_value) for q in quarantine_of(lake_spark, case.topic)] == [b"broken"]

    # Twice again in a later run, beside an event of 50 minutes ago sent twice: the copies' event
    # times span more than one instant (and often two hours), all of which the delete must cover.
    earlier = demo_event(event_time=(datetime.now(timezone.utc) - timedelta(minutes=50)).isoformat())
    produce(case.platform, case.topic, [event, earlier, event, earlier])
    second = run_once(lake_spark, case.platform).topics[0]
    assert (second.records_read, second.landed, second.duplicates_dropped) == (4, 1, 3)
    ids = [r.event_id for r in rows_of(lake_spark, case.topic)]
    assert (ids.count(event["event_id"]), ids.count(earlier["event_id"])) == (1, 1)


def test_an_event_id_landed_again_within_the_window_of_its_landing_lands_once_whatever_its_event_time(
        lake_spark, lake_case):
    # A retry through the other data centre hours after the first: the event is 3 hours old, the
    # window one hour, counted from its first landing.
    case = lake_case(partitions=2)  # de-dup at its default
    old = demo_event(event_time=(datetime.now(timezone.utc) - timedelta(hours=3)).isoformat())
    produce(case.platform, case.topic, [old, demo_event()])
    assert run_once(lake_spark, case.platform).topics[0].landed == 2
    produce(case.platform, case.topic, [old, demo_event()])
    second = run_once(lake_spark, case.platform).topics[0]
    assert (second.landed, second.duplicates_dropped) == (1, 1)
    ids = [r.event_id for r in rows_of(lake_spark, case.topic)]
    assert len(ids) == 3 and ids.count(old["event_id"]) == 1


def test_a_topic_delivered_at_least_once_keeps_its_copies_with_de_dup_at_its_default(lake_spark, lake_case):
    case = lake_case(partitions=2, delivery="at_least_once")
    event = demo_event()
    produce(case.platform, case.topic, [event, event, demo_event()])
    run = run_once(lake_spark, case.platform).topics[0]
    assert (run.records_read, run.landed, run.duplicates_dropped) == (3, 3, 0)
    assert [r.event_id for r in rows_of(lake_spark, case.topic)].count(event["event_id"]) == 2


def test_status_shows_totals_last_run_and_the_last_complete_hour(lake_spark, lake_case):
    case = lake_case(partitions=2, allowed_lateness="10m")
    produce(case.platform, case.topic, [demo_event() for _ in range(8)] + [b"broken"])
    run_once(lake_spark, case.platform)

    status = topic_status(lake_spark, case.platform, case.topic)
    asked = datetime.now(timezone.utc)
    commit = current_commit(lake_spark, data_table(case.topic))
    assert commit is not None and commit.listed_at is not None
    assert (status.rows, status.quarantined, status.lost, status.pending) == (8, 1, 0, 0)
    assert status.files >= 1 and status.bytes > 0
    assert status.last_run == commit.committed_at
    # Nothing pending: complete up to when status asked Kafka, less the allowed lateness.
    hour, lateness = timedelta(hours=1), timedelta(minutes=10)
    assert floor_hour(commit.listed_at - lateness) - hour <= status.last_complete_hour
    assert status.last_complete_hour <= floor_hour(asked - lateness) - hour
    assert current_commit(lake_spark, quarantine_table(case.topic)).records == 1

    produce(case.platform, case.topic, [demo_event() for _ in range(3)])
    assert topic_status(lake_spark, case.platform, case.topic).pending == 3


def test_status_counts_the_rows_a_reader_sees_after_a_merge_on_read_delete(lake_spark, lake_case):
    # An owner erasing a user's events on a table set to merge-on-read: the delete adds position
    # deletes and leaves the data files, so the snapshot's total-records still counts the rows.
    case = lake_case(partitions=1)
    events = [demo_event() for _ in range(5)]
    produce(case.platform, case.topic, events)
    run_once(lake_spark, case.platform)
    table = data_table(case.topic)
    lake_spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read')")
    lake_spark.sql(f"DELETE FROM {table} WHERE event_id = '{events[0]['event_id']}'")
    assert "position-deletes" in json.dumps(_snapshots(lake_spark, table)[-1].summary)  # the delete kept its files

    assert topic_status(lake_spark, case.platform, case.topic).rows == lake_spark.table(table).count() == 4
    assert current_commit(lake_spark, table).records == 4


def test_ranges_are_read_through_the_kafka_connector_s_v2_batch_source(lake_spark, lake_case):
    # Spark's V1 Kafka relation turns each record into an external Row and back (conveyor.pipeline.spark).
    case = lake_case(partitions=1)
    frame = (lake_spark.read.format("kafka").options(**java_client_options(case.platform, "central"))
             .option("subscribe", case.topic).load())
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "BatchScan" in plan and "KafkaRelation" not in plan, plan
