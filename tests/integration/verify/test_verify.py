"""``conveyor verify`` on real Kafka, Spark and Redis: the lake invariant passes on what the lake
landed and fails naming the event id once a row is copied into the table, and naming the record's
coordinates once a row is gone or a topic was never landed; a view's counters pass against
verify's recount of its topic less the views job's rejects that hold, and a counter off by one or
an on-time event rejected as late is named."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import orjson
import pytest
from typer.testing import CliRunner

from conveyor import kafka
from conveyor.cli import app
from conveyor.config import RealtimeView
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.realtime.deltas import Reject
from conveyor.pipeline.realtime.plan import ViewPlan, epoch_ms
from conveyor.pipeline.realtime.rejects import reject_headers
from conveyor.pipeline.realtime.store import connect
from conveyor.pipeline.tables import data_table
from conveyor.verify.checks import Verdict
from conveyor.verify.gather import lake_once, rejected, since, view_check, view_topic
from tests.conftest import demo_event
from tests.lakekit import lake_case, lake_folder, lake_spark, produce  # noqa: F401

pytestmark = pytest.mark.integration


def test_lake_invariant_passes_on_landed_events_and_names_a_copied_row(lake_spark, lake_case, tmp_path):
    case = lake_case(partitions=2)
    events = [demo_event(user_id=f"user-{i}") for i in range(6)]
    produce(case.platform, case.topic, events)
    run_once(lake_spark, case.platform)
    accepted = tmp_path / "accepted.ndjson"
    accepted.write_bytes(b"".join(orjson.dumps({"topic": case.topic, "event_id": e["event_id"]}) + b"\n"
                                  for e in events))

    clean = lake_once(lake_spark, case.platform, case.topic, {e["event_id"] for e in events})
    assert clean.verdict is Verdict.PASS, clean.problems
    assert (clean.rows, clean.distinct, clean.accepted, clean.missing, clean.unexpected) == (6, 6, 6, 0, 0)
    assert (clean.source, clean.unlanded, clean.foreign) == (6, 0, 0)

    copied = events[2]["event_id"]
    table = data_table(case.topic)
    lake_spark.sql(f"INSERT INTO {table} SELECT * FROM {table} WHERE event_id = '{copied}'")

    result = CliRunner().invoke(app, ["verify", "--platform", str(case.path), "--only", "lake",
                                      "--accepted", str(accepted), "-o", "json"])
    assert result.exit_code == 1, result.output
    (check,) = json.loads(result.stdout)["checks"]
    assert (check["verdict"], check["subject"]) == ("FAIL", case.topic)
    figures = check["figures"]
    assert (figures["rows"], figures["distinct"], figures["duplicated_ids"]) == (7, 6, [copied])
    assert (figures["missing"], figures["unexpected"], figures["unlanded"]) == (0, 0, 0)
    assert copied in check["problems"][0]

    # A row gone from the table: its record on central is not landed, named by its coordinates,
    # with or without the accepted ids.
    gone = events[4]["event_id"]
    (row,) = lake_spark.table(table).where(f"event_id = '{gone}'").collect()
    lake_spark.sql(f"DELETE FROM {table} WHERE event_id = '{gone}'")
    check = lake_once(lake_spark, case.platform, case.topic, None)
    assert (check.verdict, check.unlanded, check.unlanded_at) == (
        Verdict.FAIL, 1, (f"{case.topic}[{row.kafka_partition}]@{row.kafka_offset}",))


def test_a_topic_the_lake_never_landed_fails_against_its_source(lake_spark, lake_case):
    case = lake_case(partitions=1)
    produce(case.platform, case.topic, [demo_event(user_id=f"user-{i}") for i in range(3)])
    check = lake_once(lake_spark, case.platform, case.topic, None)
    assert (check.verdict, check.rows, check.source, check.unlanded) == (Verdict.FAIL, 0, 3, 3)
    assert check.problems[0].startswith("source records not landed: ")


def test_view_equals_verifys_recount_of_its_topic_and_a_reject_without_cause_or_a_counter_off_by_one_fails(
        lake_case, topic_factory):
    case = lake_case(partitions=1)
    now = datetime.now(timezone.utc)
    late = demo_event(user_id="u2", price_micros=5,
                      event_time=(now - timedelta(minutes=10)).isoformat().replace("+00:00", "Z"))
    events = [demo_event(user_id=user, price_micros=5) for user in ("u1", "u1")] + [late]
    coordinates = produce(case.platform, case.topic, events, partition=0)
    name = f"verify_{uuid.uuid4().hex[:8]}"
    view = RealtimeView.model_validate({"topic": case.topic, "group_by": ["user_id"], "window": 60,
                                        "allowed_lateness": 60, "metrics": {"events": {}, "spend": {"sum": "price_micros"}}})
    # The views job rejected the third event as late, rightly (ten minutes behind the newest, one
    # allowed): its side output names it, in its own format.
    rejects_topic = topic_factory("central", 1)
    producer = kafka.producer(case.platform, "central", "verify-test-rejects")

    def reject(kind: str, event: dict, at: tuple[int, int]) -> None:
        headers = reject_headers(Reject(kind, name, "test", case.topic, *at, None, None), 0)
        producer.produce(rejects_topic, orjson.dumps(event), headers=headers)
        assert producer.flush(30) == 0

    reject("late", late, coordinates[2])
    realtime = case.platform.pipeline.realtime.model_copy(update={"rejects_topic": rejects_topic})
    platform = case.platform.model_copy(update={"pipeline": case.platform.pipeline.model_copy(
        update={"realtime": realtime})})
    # What the views job holds for the two events it counted.
    plan = ViewPlan.of(name, view)
    key = plan.key({"user_id": "u1"}, plan.window_start(epoch_ms(datetime.fromisoformat(events[0]["event_time"]))))
    client = connect(platform)

    def check():
        start = since(view, datetime.now(timezone.utc))
        return view_check(client, name, view, view_topic(platform, case.topic, start), rejected(platform), start)

    try:
        # Both copies of one event id count once.
        produce(case.platform, case.topic, [events[0]], partition=0)
        client.hset(key, mapping={"events": 2, "spend": 10})
        found = check()
        assert found.verdict is Verdict.PASS, found.problems
        assert (found.counters, found.rejected, found.checked, found.unjustified) == (2, 1, 3, 0)

        client.hincrby(key, "events", 1)
        found = check()
        assert found.verdict is Verdict.FAIL
        assert [(m.key, m.field, m.redis, m.recount) for m in found.mismatches] == [(key, "events", 3, 2)]

        # An on-time event rejected as late: the job would not have counted it, and verify says why
        # the reject does not hold.
        client.hset(key, mapping={"events": 1, "spend": 5})
        reject("late", events[1], coordinates[1])
        found = check()
        assert (found.verdict, found.mismatched, found.unjustified) == (Verdict.FAIL, 2, 1)
        assert found.unjustified_at[0].startswith(f"{case.topic}[0]@{coordinates[1][1]}: late (event_time ")
    finally:
        client.delete(key)
