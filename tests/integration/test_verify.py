"""``conveyor verify`` on real Kafka and Spark: the lake invariant passes on what the lake landed,
and fails naming the event id once a row is copied into the table."""

from __future__ import annotations

import json

import orjson
import pytest
from typer.testing import CliRunner

from conveyor.cli import app
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.tables import data_table
from conveyor.verify.checks import Verdict
from conveyor.verify.gather import lake_once
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

    clean = lake_once(lake_spark, case.topic, {e["event_id"] for e in events})
    assert clean.verdict is Verdict.PASS, clean.problems
    assert (clean.rows, clean.distinct, clean.accepted, clean.missing, clean.unexpected) == (6, 6, 6, 0, 0)

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
    assert (figures["missing"], figures["unexpected"]) == (0, 0)
    assert copied in check["problems"][0]
