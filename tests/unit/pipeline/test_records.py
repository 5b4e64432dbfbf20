"""Record parsing for the lake: a row, or the reason it goes to quarantine; and the contract's columns."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest

from conveyor.pipeline.errors import LakeConfigError
from conveyor.pipeline.records import parse_value
from conveyor.pipeline.schema import Column, Kind, contract_columns, table_columns_ddl

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "contracts" / "ad-events.schema.json").read_text())
COLUMNS = contract_columns("ad-events", SCHEMA)
EVENT = {
    "event_id": "0b6f1c1e-8d2a-4c53-9a77-2f8f0c3b9e10",
    "event_time": "2025-03-01T10:15:00Z",
    "type": "click",
    "site_id": "site-1",
    "user_id": "user-7",
    "price_micros": 1500,
}


def parse(value: bytes | None) -> tuple:
    return parse_value(value, topic="ad-events", schema_text=json.dumps(SCHEMA), columns=COLUMNS)


def test_the_contract_decides_the_columns_and_their_types():
    kinds = {c.name: c.kind for c in COLUMNS}
    assert kinds["event_time"] is Kind.timestamp
    assert kinds["type"] is Kind.string  # an enum of strings
    assert kinds["price_micros"] is Kind.long
    assert [c.name for c in COLUMNS][:2] == ["event_id", "event_time"]
    ddl = table_columns_ddl(COLUMNS)
    assert ddl.startswith("`event_id` string, `event_time` timestamp")
    assert ddl.endswith("kafka_partition int, kafka_offset bigint, kafka_timestamp timestamp, raw_value binary, "
                        "landed_at timestamp")


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ({"type": "number"}, Kind.double),
        ({"type": "boolean"}, Kind.boolean),
        ({"type": ["string", "null"]}, Kind.string),
        ({"type": ["string", "integer"]}, Kind.json),
        ({"type": "object"}, Kind.json),
        ({"type": "array", "items": {"type": "string"}}, Kind.json),
        ({"type": "string", "format": "date-time"}, Kind.timestamp),
        ({}, Kind.json),
    ],
)
def test_json_schema_types_map_to_spark_types(spec, kind):
    schema = {"properties": {"field": spec}}
    assert contract_columns("t", schema) == (Column("field", kind),)


def test_a_contract_may_not_use_the_lake_s_own_column_names():
    with pytest.raises(LakeConfigError, match="kafka_offset"):
        contract_columns("t", {"properties": {"kafka_offset": {"type": "integer"}}})


def test_a_good_record_becomes_a_typed_row():
    reason, *values = parse(orjson.dumps(EVENT))
    row = dict(zip([c.name for c in COLUMNS], values, strict=True))
    assert reason is None
    assert row["event_time"] == datetime(2025, 3, 1, 10, 15, tzinfo=timezone.utc)
    assert (row["user_id"], row["price_micros"], row["banner_id"]) == ("user-7", 1500, None)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "no value (null record)"),
        (b"\xff\xfe not json", "not JSON"),
        (b"[1, 2]", "not a JSON object but a list"),
        (orjson.dumps({k: v for k, v in EVENT.items() if k != "site_id"}), "site_id is required"),
        (orjson.dumps({**EVENT, "type": "purchase"}), "rule enum"),
        (orjson.dumps({**EVENT, "price_micros": -1}), "rule minimum"),
        (orjson.dumps({**EVENT, "event_id": "42"}), "rule format"),
    ],
)
def test_a_bad_record_gets_a_reason_and_no_values(value, reason):
    verdict, *values = parse(value)
    assert reason in verdict
    assert values == [None] * len(COLUMNS)


def test_times_are_read_as_rfc_3339_in_any_case_and_offset():
    for text, expected in [
        ("2025-03-01t10:15:00z", datetime(2025, 3, 1, 10, 15, tzinfo=timezone.utc)),
        ("2025-03-01T12:15:00+02:00", datetime(2025, 3, 1, 10, 15, tzinfo=timezone.utc)),
    ]:
        reason, _, event_time, *_ = parse(orjson.dumps({**EVENT, "event_time": text}))
        assert reason is None and event_time == expected


@pytest.mark.parametrize("text", ["0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00"])
def test_an_event_time_whose_utc_is_outside_years_1_to_9999_is_quarantined(text):
    verdict, *values = parse(orjson.dumps({**EVENT, "event_time": text}))
    assert verdict is not None and "event_time" in verdict
    assert values == [None] * len(COLUMNS)


@pytest.mark.parametrize(("price", "reason"), [
    (2**63, "is greater than the maximum of 9223372036854775807 (rule maximum)"),
    (2**64, "is greater than the maximum of 9223372036854775807 (rule maximum)"),  # orjson reads it as a float
])
def test_an_integer_beyond_64_bits_is_quarantined(price, reason):
    verdict, *_ = parse(json.dumps({**EVENT, "price_micros": price}).encode())
    assert reason in verdict


def test_the_values_parser_gives_one_row_per_value_with_nulls_kept_as_nulls():
    import pyarrow as pa

    from conveyor.pipeline.records import arrow_schema, values_parser

    without_price = {k: v for k, v in EVENT.items() if k != "price_micros"}
    values = pa.array([orjson.dumps(EVENT), b"nope", None, orjson.dumps(without_price)], pa.binary())
    out = values_parser("ad-events", json.dumps(SCHEMA), COLUMNS)(values, pa.nulls(4, pa.binary()))
    assert out.type == pa.struct(list(arrow_schema(COLUMNS))) and len(out) == 4
    reasons = out.field("quarantine_reason").to_pylist()
    assert [r is None for r in reasons] == [True, False, False, True]
    assert "not JSON" in reasons[1] and "null record" in reasons[2]
    assert out.field("user_id").to_pylist() == ["user-7", None, None, "user-7"]
    # A missing integer stays a null of an integer column.
    assert out.field("price_micros").type == pa.int64()
    assert out.field("price_micros").to_pylist() == [1500, None, None, None]
    assert out.field("event_time").to_pylist()[0] == datetime(2025, 3, 1, 10, 15, tzinfo=timezone.utc)


def test_the_values_parser_of_no_values_gives_the_columns_and_no_rows():
    import pyarrow as pa

    from conveyor.pipeline.records import arrow_schema, values_parser

    parse = values_parser("ad-events", json.dumps(SCHEMA), COLUMNS)
    out = parse(pa.array([], pa.binary()), pa.array([], pa.binary()))
    assert out.type == pa.struct(list(arrow_schema(COLUMNS))) and len(out) == 0


def test_each_record_is_checked_against_the_version_its_header_names():
    from conveyor.pipeline.records import RecordParser

    closed = {**SCHEMA, "additionalProperties": False}
    wider = {**closed, "properties": {**closed["properties"], "country": {"type": "string"}}}
    versions = ((1, 10, json.dumps(closed)), (2, 11, json.dumps(wider)))
    parser = RecordParser("ad-events", json.dumps(wider), COLUMNS, versions)
    with_country = orjson.dumps({**EVENT, "country": "NL"})
    reasons = parser.columns([with_country, with_country, with_country, with_country, with_country],
                             [b"11:2", b"10:1", None, b"12:3", b"garbage"])[0]
    assert reasons[0] is None and reasons[2] is None  # version 2; no header: the latest
    assert "breaks the contract" in reasons[1]  # version 1 is closed to country
    assert reasons[3] == ("checked at the gateway against contract version 3 (id 12), which the registry does "
                          "not hold")
    assert "names no contract version" in reasons[4]
    # An id that is not the version's: not what the gateway checked.
    assert "does not hold" in parser.columns([with_country], [b"10:2"])[0][0]


def test_a_value_in_confluent_s_framing_is_checked_against_the_version_of_its_schema_id():
    from conveyor.pipeline.records import RecordParser

    closed = {**SCHEMA, "additionalProperties": False}
    wider = {**closed, "properties": {**closed["properties"], "country": {"type": "string"}}}
    parser = RecordParser("ad-events", json.dumps(wider), COLUMNS,
                          ((1, 10, json.dumps(closed)), (2, 11, json.dumps(wider))))
    body = orjson.dumps({**EVENT, "country": "NL"})

    def framed(schema_id: int) -> bytes:
        return b"\x00" + schema_id.to_bytes(4, "big") + body

    reasons, *columns = parser.columns([framed(11), framed(10), framed(99), b"\x00\x00"])
    assert reasons[0] is None and columns[[c.name for c in COLUMNS].index("user_id")][0] == EVENT["user_id"]
    assert "breaks the contract" in reasons[1]  # id 10 is version 1, closed to country
    assert reasons[2] == ("written with schema id 99 (Confluent's framing), which the registry holds for no version "
                          "of ad-events")
    assert "2 bytes long" in reasons[3]


def test_an_event_with_fields_outside_the_columns_is_marked_so_its_row_keeps_the_record_s_bytes():
    from conveyor.pipeline.records import RecordParser

    parser = RecordParser("ad-events", json.dumps(SCHEMA), COLUMNS)
    values = [orjson.dumps(EVENT), orjson.dumps({**EVENT, "note": "x"}), b"nope"]
    *_, outside = parser.columns(values)
    assert outside == [False, True, False]  # a rejected record keeps its bytes in quarantine anyway
