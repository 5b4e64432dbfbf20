"""The lake's SQL check against the exact Python parser, on real Spark: whatever record SQL vouches
for, Python accepts too, with the same column values; and SQL vouches for the ordinary record.

Records come from hypothesis: events that keep the contract or break it in one field, extra fields
of any JSON, serialised compactly (as the gateway does) or not, then sometimes damaged as text.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor.pipeline.records import parse_value
from conveyor.pipeline.schema import Kind, contract_columns, quote
from conveyor.pipeline.sql_contract import translate
from tests.lakekit import CONTRACT, lake_folder, lake_spark  # noqa: F401

pytestmark = pytest.mark.integration
SCHEMA = json.loads(CONTRACT.read_text())
COLUMNS = contract_columns("ad-events", SCHEMA)
SQL = translate(SCHEMA, COLUMNS)
EVENT = {
    "event_id": "0b6f1c1e-8d2a-4c53-9a77-2f8f0c3b9e10",
    "event_time": "2025-03-01T10:15:00Z",
    "type": "click",
    "site_id": "site-1",
    "user_id": "user-7",
    "price_micros": 1500,
}

_text = st.text(st.characters(codec="utf-8"), max_size=70)
_json = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | _text,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                     max_leaves=6)
_times = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)).map(lambda d: d.isoformat() + "Z"),
    st.sampled_from(["2025-02-30T10:00:00Z", "2025-03-01T24:00:00Z", "2025-03-01T10:00:60Z", "2025-03-01t10:00:00z",
                     "2025-03-01T10:00:00+19:00", "2025-03-01T10:00:00+05:30", "2025-03-01T10:00:00",
                     "2025-03-01T10:00:00.1234567Z", "0000-03-01T10:00:00Z", "2025-03-01T10:00:00.5-00:00",
                     "2025-03-01 10:00:00Z", "2025-03-01T10:00:00Z\n", "\u0662025-03-01T10:00:00Z"]),
)
_values = {
    "event_id": st.one_of(st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()),
                          st.uuids().map(lambda u: str(u) + "\n"), _json),
    "event_time": st.one_of(_times, _json),
    "type": st.one_of(st.sampled_from(["page_view", "impression", "click", "Click", "click "]), _json),
    "site_id": st.one_of(_text, _json),
    "user_id": st.one_of(_text, st.text(min_size=60, max_size=70), _json),
    "banner_id": st.one_of(_text, _json),
    "category": st.one_of(_text, _json),
    "price_micros": st.one_of(st.integers(-5, 5), st.integers(2**63 - 3, 2**63 + 3), st.just(1.0),
                              st.just(1e5), st.booleans(), _json),
    "page_url": st.one_of(st.text(max_size=2100), _json),
}


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    event = dict(EVENT)
    for name in draw(st.lists(st.sampled_from(sorted(_values)), max_size=3, unique=True)):
        event[name] = draw(_values[name])
    for name in draw(st.lists(st.sampled_from(sorted(EVENT)), max_size=1)):
        del event[name]
    event.update(draw(st.dictionaries(st.sampled_from(["payload", "n", "x"]), _json, max_size=2)))
    return event


def _damage(text: bytes, draw: st.DrawFn) -> bytes:
    how = draw(st.sampled_from(["none", "none", "none", "trailing", "space", "duplicate", "escape", "bytes"]))
    if how == "trailing":
        return text + draw(st.sampled_from([b" ", b"x", b" {}", b"}", b',{"a":1}', b"\n"]))
    if how == "space":
        return text.replace(b":", b": ", 1)
    if how == "duplicate":
        return text[:-1] + b',"type":"click"}'
    if how == "escape":
        escaped = draw(st.sampled_from([b"\\ud800", b"\\u00e9", b"\\/", b"\\ud83d\\ude00", b"\\b"]))
        return text.replace(b'"site_id":"', b'"site_id":"' + escaped, 1)
    if how == "bytes":
        return draw(st.sampled_from([b"\xef\xbb\xbf", b""])) + text + draw(st.sampled_from([b"\xff", b""]))
    return text


@st.composite
def records(draw: st.DrawFn) -> bytes:
    event = draw(events())
    compact = draw(st.booleans()) or draw(st.booleans())
    if compact:  # as the gateway writes; orjson refuses integers beyond 64 bits
        try:
            text = orjson.dumps(event)
        except TypeError:
            text = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
    else:
        text = json.dumps(event, ensure_ascii=draw(st.booleans())).encode()
    return _damage(text, draw)


def _micros(value: Any) -> Any:
    return int((value - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds() * 1_000_000) \
        if isinstance(value, datetime) else value


def _sql_verdicts(spark: Any, values: list[bytes]) -> list[tuple[bool, tuple]]:
    frame = spark.createDataFrame([(v,) for v in values], "raw_value binary").selectExpr("*", SQL.doc)
    outputs = [f"unix_micros({v})" if c.kind is Kind.timestamp else v for v, c in zip(SQL.values, COLUMNS)]
    rows = frame.selectExpr(f"coalesce({SQL.keeps}, false) AS keeps",
                            *[f"{e} AS {quote(c.name)}" for e, c in zip(outputs, COLUMNS)]).collect()
    return [(row[0], tuple(row[1:])) for row in rows]


def _python(value: bytes) -> tuple[str | None, tuple]:
    reason, *columns = parse_value(value, topic="ad-events", schema_text=json.dumps(SCHEMA), columns=COLUMNS)
    return reason, tuple(_micros(c) for c in columns)


def _check(spark: Any, values: list[bytes]) -> list[bool]:
    verdicts = _sql_verdicts(spark, values)
    for value, (keeps, columns) in zip(values, verdicts):
        if keeps:
            reason, expected = _python(value)
            assert reason is None, f"SQL vouched for {value!r}, which Python refuses: {reason}"
            assert columns == expected, f"{value!r}: SQL extracted {columns}, Python {expected}"
    return [keeps for keeps, _ in verdicts]


def test_the_demo_contract_translates():
    assert SQL is not None


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(records(), min_size=250, max_size=250))
def test_sql_never_vouches_for_a_record_python_refuses(lake_spark, values):
    _check(lake_spark, values)


def test_sql_vouches_for_compact_valid_events_and_nothing_malformed(lake_spark):
    good = [orjson.dumps(EVENT), orjson.dumps({**EVENT, "payload": "x" * 900, "n": [1, {"a": None}]}),
            orjson.dumps({**EVENT, "site_id": "é\u2028😀\x01\"\\", "event_time": "2025-03-01T10:15:00.123456+05:30"})]
    bad = [orjson.dumps(EVENT) + b" x", orjson.dumps({**EVENT, "n": 1e5}) + b"abcd", json.dumps(EVENT).encode(),
           orjson.dumps({**EVENT, "price_micros": 1.0}), orjson.dumps({**EVENT, "event_time": "2025-02-30T10:00:00Z"}),
           b"[1]", b"nope", orjson.dumps(EVENT)[:-1] + b',"type":"view"}']
    assert _check(lake_spark, good + bad) == [True] * len(good) + [False] * len(bad)
