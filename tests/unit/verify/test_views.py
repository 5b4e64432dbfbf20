"""verify's own recount of a view from its topic's records, and its judgement of the job's rejects."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest

from conveyor.config import RealtimeView
from conveyor.topics.contracts import compile_contract
from conveyor.verify.checks import SAMPLE, Verdict
from conveyor.verify.views import Recount, SourceRecord, compare_view, key_pattern, read_topic, recount

ROOT = Path(__file__).resolve().parents[3]
CONTRACT = compile_contract("ad-events", json.loads((ROOT / "contracts/ad-events.schema.json").read_text()))
HOUR = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)
START = int(HOUR.timestamp() * 1000)
MINUTE_MS = 60_000
TOLERANCE_MS = 300_000

CTR = RealtimeView.model_validate({
    "topic": "ad-events", "filter": {"type": ["impression", "click"]}, "group_by": ["banner_id"], "window": 60,
    "allowed_lateness": 60, "key": "view:{view}:{banner_id}:{window_start}",
    "metrics": {"impressions": {"where": {"type": "impression"}}, "clicks": {"where": {"type": "click"}},
                "spend_micros": {"sum": "price_micros"}}})
#: A group-by field outside the key: its values name the hash fields.
INTERESTS = RealtimeView.model_validate({
    "topic": "ad-events", "group_by": ["user_id", "category"], "window": 3600,
    "metrics": {"events": {}, "clicks": {"where": {"type": "click"}}}, "key": "view:{view}:{user_id}:{window_start}"})


def _event(n: int, at_ms: int = START, **fields: object) -> dict:
    moment = datetime.fromtimestamp(at_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    return {"event_id": f"00000000-0000-4000-8000-{n:012d}", "event_time": moment.replace("+00:00", "Z"),
            "type": "impression", "site_id": "s", "user_id": "u1", "banner_id": "b1", **fields}


def _without(event: dict, name: str) -> dict:
    return {k: v for k, v in event.items() if k != name}


def _records(*events: dict | bytes, partition: int = 0) -> list[SourceRecord]:
    """One record per event at its own offset, written at its event time."""
    records = []
    for offset, event in enumerate(events):
        value = event if isinstance(event, bytes) else orjson.dumps(event)
        written = START if isinstance(event, bytes) else int(datetime.fromisoformat(event["event_time"]).timestamp() * 1000)
        records.append(SourceRecord(partition, offset, written, value))
    return records


def _key(banner: str, window: int = 0) -> str:
    label = datetime.fromtimestamp((START + window * MINUTE_MS) / 1000, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"view:banner_ctr:{banner}:{label}"


def _count(view: RealtimeView, records: list[SourceRecord], rejects: dict | None = None, name: str = "banner_ctr"):
    return recount(name, view, read_topic(records, CONTRACT, TOLERANCE_MS), rejects or {}, START)


@pytest.mark.parametrize(("events", "expected"), [
    ([_event(1, price_micros=10), _event(2, price_micros=20), _event(3, type="click", price_micros=5)],
     {_key("b1"): {"impressions": 2, "clicks": 1, "spend_micros": 35}}),
    ([_event(1, type="conversion")], {}),
    ([_without(_event(1), "banner_id")], {}),
    ([_event(1), _event(2, START + MINUTE_MS)],
     {_key("b1"): {"impressions": 1, "spend_micros": 0}, _key("b1", 1): {"impressions": 1, "spend_micros": 0}}),
    ([_event(1, type="click", price_micros=2**63 - 1), _event(2, type="click", price_micros=9)],
     {_key("b1"): {"clicks": 2, "spend_micros": 2**63 - 1}}),
    ([_event(1), _event(1)], {_key("b1"): {"impressions": 1, "spend_micros": 0}}),
    ([_event(1, START - MINUTE_MS)], {}),
], ids=["metrics-where-and-sum", "outside-the-filter", "group-by-field-absent", "per-window", "saturates-as-redis",
        "a-copy-counts-once", "window-before-since"])
def test_recount_follows_the_views_declaration(events, expected):
    assert _count(CTR, _records(*events)).counters == expected


def test_recount_names_fields_after_group_by_values_outside_the_key():
    events = [_event(1, type="click", category="cars"), _event(2, type="click", category="cars"),
              _event(3, category="news")]
    counted = recount("user_interests", INTERESTS, read_topic(_records(*events), CONTRACT, TOLERANCE_MS), {}, START)
    label = HOUR.strftime("%Y%m%dT%H%M%SZ")
    assert counted.counters == {f"view:user_interests:u1:{label}": {"events:cars": 2, "clicks:cars": 2,
                                                                     "events:news": 1}}


def test_records_that_are_no_event_are_told_apart():
    future = _event(4, START + 2 * TOLERANCE_MS)
    records = _records(_event(1), b"not json", orjson.dumps({"type": "impression"}))
    records.append(SourceRecord(0, 3, START, orjson.dumps(future)))
    read = read_topic(records, CONTRACT, TOLERANCE_MS)
    assert ([e.offset for e in read.events], sorted(read.malformed), sorted(read.future)) == ([0], [(0, 1), (0, 2)],
                                                                                              [(0, 3)])
    assert read.newest_ms == START


LATE = _event(9, START)
NEWEST = _event(10, START + 3 * MINUTE_MS)


@pytest.mark.parametrize(("records", "rejects", "rejected", "unjustified"), [
    # Late: three minutes behind the newest event, the view allows one.
    (_records(LATE, NEWEST), {(0, 0): "late"}, 1, []),
    # On time: the newest event itself cannot be behind the watermark.
    (_records(LATE, NEWEST), {(0, 1): "late"}, 0, ["ad-events[0]@1: late"]),
    (_records(_without(_event(1), "banner_id")), {(0, 0): "incomplete"}, 1, []),
    (_records(_event(1)), {(0, 0): "incomplete"}, 0, ["ad-events[0]@0: incomplete"]),
    (_records(_event(1), b"{"), {(0, 1): "malformed"}, 0, []),
    (_records(_event(1)), {(0, 0): "malformed"}, 0, ["ad-events[0]@0: malformed"]),
    (_records(b"{"), {(0, 0): "late"}, 0, ["ad-events[0]@0: late"]),
], ids=["late-and-it-is", "on-time-rejected-as-late", "incomplete-and-it-is", "complete-rejected-as-incomplete",
        "malformed-and-it-is", "valid-rejected-as-malformed", "malformed-rejected-as-late"])
def test_a_reject_holds_only_for_a_reason_its_record_shows(records, rejects, rejected, unjustified):
    counted = _count(CTR, records, rejects)
    assert counted.rejected == rejected
    assert [u.split(" (")[0] for u in counted.unjustified] == unjustified


def test_an_unjustified_reject_is_counted_and_fails_the_view():
    records = _records(LATE, NEWEST)
    counted = _count(CTR, records, {(0, 1): "late"})
    label = datetime.fromtimestamp((START + 3 * MINUTE_MS) / 1000, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    # The job counted the late event and rejected the newest: Redis lacks the newest.
    held = {_key("b1"): {"impressions": 1, "spend_micros": 0}}
    check = compare_view("banner_ctr", CTR.key_layout, START, held, counted)
    assert check.verdict is Verdict.FAIL
    assert [(m.key, m.field, m.redis, m.recount) for m in check.mismatches] == [
        (f"view:banner_ctr:b1:{label}", "impressions", 0, 1)]
    assert check.problems[-1].startswith("rejected without cause: ad-events[0]@1: late (event_time ")


@pytest.mark.parametrize(("held", "counters", "verdict", "windows", "compared", "mismatches"), [
    ({_key("b1"): {"impressions": 3, "clicks": 1}}, {_key("b1"): {"impressions": 3, "clicks": 1}},
     Verdict.PASS, 1, 2, []),
    ({_key("b1"): {"impressions": 3}}, {_key("b1"): {"impressions": 4}}, Verdict.FAIL, 1, 1,
     [(_key("b1"), "impressions", 3, 4)]),
    ({}, {_key("b1", 1): {"clicks": 1}}, Verdict.FAIL, 1, 1, [(_key("b1", 1), "clicks", 0, 1)]),
    ({_key("b2"): {"clicks": 2}}, {}, Verdict.FAIL, 1, 1, [(_key("b2"), "clicks", 2, 0)]),
    ({_key("b1"): {"spend_micros": 0}}, {_key("b1"): {}}, Verdict.PASS, 1, 1, []),
    ({_key("b1", -5): {"clicks": 9}}, {}, Verdict.PASS, 0, 0, []),
    ({"view:banner_ctr:b1:junk": {"clicks": 1}}, {}, Verdict.PASS, 0, 0, []),
], ids=["equal", "one-counter-differs", "key-missing-in-redis", "key-nothing-landed-for", "absent-counts-as-zero",
        "window-before-the-ttl-bound", "not-a-window-key"])
def test_view_differs_wherever_a_counter_differs_in_a_window_within_ttl(held, counters, verdict, windows, compared,
                                                                       mismatches):
    check = compare_view("banner_ctr", CTR.key_layout, START, held, Recount(counters, 0, 0))
    assert (check.verdict, check.windows, check.counters) == (verdict, windows, compared)
    assert [(m.key, m.field, m.redis, m.recount) for m in check.mismatches] == mismatches
    assert check.since == HOUR


def test_view_names_ten_mismatches_and_counts_them_all():
    held = {_key(f"b{i:02}"): {"clicks": 1} for i in range(12)}
    check = compare_view("banner_ctr", CTR.key_layout, START, held, Recount({}, 0, 0))
    assert (check.mismatched, len(check.mismatches), len(check.problems)) == (12, SAMPLE, SAMPLE)


def test_the_scan_pattern_escapes_the_layouts_glob_characters():
    assert key_pattern("v", "x[{view}]*{user_id}:{window_start}") == "x\\[v\\]\\**:*"


def test_a_late_reject_holds_against_a_newer_event_of_another_views_topic():
    # The job's watermark follows every topic of its views: here the only newer event is elsewhere.
    alone = read_topic(_records(LATE), CONTRACT, TOLERANCE_MS)
    assert recount("banner_ctr", CTR, alone, {(0, 0): "late"}, START).unjustified
    counted = recount("banner_ctr", CTR, alone, {(0, 0): "late"}, START, newest_ms=START + 3 * MINUTE_MS)
    assert (counted.rejected, counted.unjustified) == (1, ())
