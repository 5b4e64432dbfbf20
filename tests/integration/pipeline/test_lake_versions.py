"""The lake and the contract registry, against real brokers and Spark: each record is checked
against the version its gateway header names, old and new versions land in one table that gains
the new version's column (its schema history shows it), and a record naming a version the registry
does not hold goes to quarantine with that reason."""

from __future__ import annotations

import json

import orjson
import pytest

from conveyor import kafka
from conveyor.bus.registry import Registry
from conveyor.bus.registry_state import CONTRACT_HEADER
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.tables import data_table
from tests.conftest import demo_event
from tests.lakekit import CONTRACT, lake_case, lake_folder, lake_spark, quarantine_of, rows_of  # noqa: F401

pytestmark = pytest.mark.integration


def test_old_and_new_versions_land_in_one_evolved_table_and_an_unknown_version_in_quarantine(provisioned, lake_spark,
                                                                                             lake_case):
    case = lake_case(partitions=1)
    closed = {**json.loads(CONTRACT.read_text()), "additionalProperties": False}
    wider = {**closed, "properties": {**closed["properties"], "country": {"type": "string", "maxLength": 2}}}
    registry = Registry(case.platform, "test-lake-versions")
    registry.start()
    try:
        v1 = registry.register(f"{case.topic}-value", closed, "test").version
        v2 = registry.register(f"{case.topic}-value", wider, "test").version
    finally:
        registry.stop()

    plain, with_country = demo_event(user_id="u-old"), demo_event(user_id="u-new", country="NL")
    unheaded, refused_by_v1, unknown = (demo_event(user_id=u, country="DE") for u in ("u-none", "u-v1", "u-v9"))
    sent = [(plain, f"{v1.id}:1"), (with_country, f"{v2.id}:2"), (unheaded, None), (refused_by_v1, f"{v1.id}:1"),
            (unknown, "999:9")]
    producer = kafka.producer(case.platform, "central", "test-lake-versions")
    for event, header in sent:
        producer.produce(case.topic, orjson.dumps(event), event["user_id"].encode(), partition=0,
                         headers=[(CONTRACT_HEADER, header.encode())] if header else None)
    assert producer.flush(60) == 0

    (run,) = run_once(lake_spark, case.platform).topics
    assert (run.records_read, run.landed, run.quarantined) == (5, 3, 2)
    landed = {r.user_id: r.country for r in rows_of(lake_spark, case.topic)}
    assert landed == {"u-old": None, "u-new": "NL", "u-none": "DE"}  # no header: the latest version's check
    reasons = {orjson.loads(r.raw_value)["user_id"]: r.reason for r in quarantine_of(lake_spark, case.topic)}
    assert "breaks the contract" in reasons["u-v1"] and "country" in reasons["u-v1"]
    assert reasons["u-v9"] == ("checked at the gateway against contract version 9 (id 999), which the registry does "
                               "not hold")
    # The table's schema history: created with the contract file's columns, then country added.
    schemas = lake_spark.sql(f"SELECT latest_schema_id FROM {data_table(case.topic)}.metadata_log_entries").collect()
    assert len({row.latest_schema_id for row in schemas}) >= 2
    assert "country" in lake_spark.table(data_table(case.topic)).columns
