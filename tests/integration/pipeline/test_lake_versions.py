"""The lake and the contract registry, against real brokers and Spark: each record is checked
against the version its gateway header names, old and new versions land in one table that gains
the new version's column (its schema history shows it), and a record naming a version the registry
does not hold goes to quarantine with that reason. A record written by confluent-kafka's own
JSONSerializer (a direct producer, no gateway) is checked against the version its schema id names."""

from __future__ import annotations

import json

import orjson
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from conveyor import kafka
from conveyor.bus.registry import Registry
from conveyor_sdk.contract import CONTRACT_HEADER
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.tables import data_table
from tests.conftest import base_port, demo_event
from tests.lakekit import CONTRACT, lake_case, lake_folder, lake_spark, quarantine_of, rows_of  # noqa: F401

pytestmark = pytest.mark.integration


def test_old_and_new_versions_land_in_one_evolved_table_and_an_unknown_version_in_quarantine(provisioned, lake_spark,
                                                                                             lake_case):
    # A service writes it directly: records are checked in full, whatever their headers say.
    case = lake_case(partitions=1, direct_producers=("adserver",))
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
    assert (run.records_read, run.landed, run.quarantined, run.checked) == (5, 3, 2, 5)
    assert not run.trust.trusted and "User:adserver may write it" in run.trust.why
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


def test_a_record_framed_by_confluent_s_json_serializer_is_checked_against_its_schema_id(provisioned, lake_spark,
                                                                                      lake_case, serve_gateway):
    case = lake_case(partitions=1, direct_producers=("adserver",))
    subject = f"{case.topic}-value"
    closed = {**json.loads(CONTRACT.read_text()), "additionalProperties": False}
    wider = {**closed, "properties": {**closed["properties"], "country": {"type": "string", "maxLength": 2}}}
    registry = Registry(case.platform, "test-lake-framing")
    registry.start()
    try:
        v1 = registry.register(subject, closed, "test").version
        v2 = registry.register(subject, wider, "test").version
    finally:
        registry.stop()

    # The registry as a gateway serves it, to the serializers of a service that writes directly.
    url = serve_gateway(case.platform, "dc1", port=base_port() + 672)
    client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "adserver:demo-adserver-token"})
    latest = JSONSerializer(None, client, conf={"auto.register.schemas": False, "use.latest.version": True})
    first = JSONSerializer(Schema(json.dumps(closed), "JSON"), client, conf={"auto.register.schemas": False})
    context = SerializationContext(case.topic, MessageField.VALUE)
    new, old = demo_event(user_id="u-v2", country="NL"), demo_event(user_id="u-v1")
    values = [latest(new, context), first(old, context)]
    assert [int.from_bytes(v[1:5], "big") for v in values] == [v2.id, v1.id]
    # The same event under version 1's id, framed by hand: version 1 is closed to country.
    values.append(values[1][:5] + orjson.dumps(demo_event(user_id="u-framed-v1", country="DE")))
    values.append(b"\x00" + (999).to_bytes(4, "big") + orjson.dumps(demo_event(user_id="u-unknown")))
    producer = kafka.producer(case.platform, "central", "test-lake-framing")
    for value in values:
        producer.produce(case.topic, value, partition=0)
    assert producer.flush(60) == 0

    (run,) = run_once(lake_spark, case.platform).topics
    assert (run.records_read, run.landed, run.quarantined) == (4, 2, 2)
    assert {r.user_id: r.country for r in rows_of(lake_spark, case.topic)} == {"u-v2": "NL", "u-v1": None}
    reasons = {bytes(r.raw_value[5:]): r.reason for r in quarantine_of(lake_spark, case.topic)}
    assert "breaks the contract" in reasons[values[2][5:]] and "country" in reasons[values[2][5:]]
    assert reasons[values[3][5:]] == (f"written with schema id 999 (Confluent's framing), which the registry holds for "
                                      f"no version of {case.topic}")
