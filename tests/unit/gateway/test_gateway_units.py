"""The gateway's pure parts: body parsing, contracts, auth, bulkheads and audit records."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson
import pytest

from conveyor.config import load_platform
from conveyor.auth import Authorizer, Forbidden, Unauthenticated
from conveyor.gateway.bulkhead import Bulkheads
from conveyor.gateway.errors import ContractViolation, MalformedBody, Overloaded, TooLarge
from conveyor.gateway.parsing import prepare
from conveyor.topics.contracts import ContractError, compile_contract, load_contracts

ROOT = Path(__file__).resolve().parents[3]
PLATFORM = load_platform(ROOT / "platform.yaml")
CONTRACT = load_contracts(PLATFORM)["ad-events"]
MAX_EVENT_BYTES, MAX_EVENTS = 300, 1000


def event(**overrides):
    base = {"event_id": "123e4567-e89b-12d3-a456-426614174000", "event_time": "2026-11-21T05:30:00Z",
            "type": "click", "site_id": "s1", "user_id": "u1"}
    return {**base, **overrides}


def test_single_event_array_and_ndjson_all_parse_to_keyed_records():
    one = prepare(orjson.dumps(event()), "application/json", CONTRACT, MAX_EVENT_BYTES, MAX_EVENTS)
    many = prepare(orjson.dumps([event(user_id="a"), event(user_id="b")]), "application/json", CONTRACT, MAX_EVENT_BYTES, MAX_EVENTS)
    ndjson = b"\n".join(orjson.dumps(event(user_id=u)) for u in "abc") + b"\n"
    lines = prepare(ndjson, "application/x-ndjson", CONTRACT, MAX_EVENT_BYTES, MAX_EVENTS)
    assert [r.key for r in one.records] == [b"u1"]
    assert [r.key for r in many.records] == [b"a", b"b"]
    assert [r.key for r in lines.records] == [b"a", b"b", b"c"]
    assert orjson.loads(one.records[0].value) == event()


def test_an_event_with_a_field_its_contract_does_not_declare_is_marked_for_the_header():
    body = orjson.dumps([event(), event(note="more"), event(price_micros=5)])
    marked = [r.extra_fields for r in prepare(body, "application/json", CONTRACT, MAX_EVENT_BYTES, MAX_EVENTS).records]
    assert marked == [False, True, False]


@pytest.mark.parametrize("body, content_type, error, details", [
    (b"{not json", "application/json", MalformedBody, {}),
    (b"", "application/json", MalformedBody, {}),
    (b"[]", "application/json", MalformedBody, {}),
    (b"[1]", "application/json", MalformedBody, {"index": 0}),
    (b'{"a":1}\n{oops', "application/x-ndjson", MalformedBody, {"line": 2}),
    (orjson.dumps([event(), event(type="clack")]), "application/json", ContractViolation,
     {"index": 1, "field": "type", "rule": "enum"}),
    (orjson.dumps([event(), event(), {k: v for k, v in event().items() if k != "user_id"}]), "application/json",
     ContractViolation, {"index": 2, "field": "user_id", "rule": "required"}),
    (orjson.dumps(event(event_id="not-a-uuid")), "application/json", ContractViolation,
     {"index": 0, "field": "event_id", "rule": "format"}),
    (orjson.dumps(event(event_time="yesterday")), "application/json", ContractViolation,
     {"index": 0, "field": "event_time", "rule": "format"}),
    (orjson.dumps([event(), event(event_time="0001-01-01T00:30:00+01:00")]), "application/json", ContractViolation,
     {"index": 1, "field": "event_time", "rule": "format"}),
    (orjson.dumps(event(event_time="9999-12-31T23:30:00-01:00")), "application/json", ContractViolation,
     {"index": 0, "field": "event_time", "rule": "format"}),
    (orjson.dumps([event(), event(category="x" * 60, banner_id="y" * 60, site_id="z" * 60)]), "application/json",
     TooLarge, {"index": 1, "limit": 300}),
], ids=["bad-json", "empty", "empty-array", "not-object", "bad-ndjson-line", "enum", "required", "uuid",
        "date-time", "utc-before-year-1", "utc-after-year-9999", "event-too-large"])
def test_every_bad_body_names_the_event_field_and_rule(body, content_type, error, details):
    with pytest.raises(error) as caught:
        prepare(body, content_type, CONTRACT, MAX_EVENT_BYTES, MAX_EVENTS)
    assert details.items() <= caught.value.body().items()
    assert caught.value.body()["error"] == error.reason


def test_contract_must_require_event_id_time_and_a_key():
    schema = json.loads((ROOT / "contracts/ad-events.schema.json").read_text())
    with pytest.raises(ContractError, match="must require event_id"):
        compile_contract("t", {**schema, "required": ["event_time", "user_id"]})
    with pytest.raises(ContractError, match="x-key"):
        compile_contract("t", {k: v for k, v in schema.items() if k != "x-key"})


def test_auth_by_token_digest_and_producer_acl():
    auth = Authorizer(PLATFORM)
    assert auth.service_of("Bearer demo-adserver-token") == "adserver"
    for header in (None, "", "Basic abc", "Bearer ", "Bearer wrong-token"):
        with pytest.raises(Unauthenticated):
            auth.service_of(header)
    auth.check_producer("adserver", "ad-events")
    with pytest.raises(Forbidden, match="notifier is not among the producers of topic ad-events"):
        auth.check_producer("notifier", "ad-events")


def test_full_lane_refuses_at_once_while_other_lanes_flow():
    async def scenario():
        bulkheads = Bulkheads(lanes=8, workers_per_lane=1, queue_per_lane=1, retry_after=2)
        slow = "slow-topic"
        fast = next(t for t in (f"fast-{i}" for i in range(100))
                    if bulkheads.lane_of(t).index != bulkheads.lane_of(slow).index)
        release = asyncio.Event()

        async def hold():
            async with bulkheads.enter(slow):
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(2)]  # one writing, one queued
        await asyncio.sleep(0)
        with pytest.raises(Overloaded) as caught:
            async with bulkheads.enter(slow):
                pass
        assert caught.value.retry_after == 2
        async with bulkheads.enter(fast):
            pass  # another topic's lane is unaffected
        release.set()
        await asyncio.gather(*holders)
        assert set(bulkheads.occupancy().values()) == {0}

    asyncio.run(scenario())


@pytest.mark.parametrize(("content_type", "accepted"), [
    (None, True), ("application/json", True), ("Application/JSON; charset=utf-8", True),
    ("application/x-ndjson", True), ("text/plain", False), ("multipart/form-data; boundary=x", False),
])
def test_only_json_and_ndjson_bodies_are_taken(content_type, accepted):
    from conveyor.gateway.errors import UnsupportedMediaType
    from conveyor.gateway.parsing import media_type

    if accepted:
        assert media_type(content_type) in ("application/json", "application/x-ndjson")
    else:
        with pytest.raises(UnsupportedMediaType) as caught:
            media_type(content_type)
        assert caught.value.status == 415 and "application/x-ndjson" in caught.value.body()["accepted"]


def test_the_event_limit_counts_the_key_and_the_request_limit_counts_events():
    value = orjson.dumps(event(user_id="k" * 10))
    exact = len(value) + 10
    assert prepare(value, "application/json", CONTRACT, exact, 1).records[0].key == b"k" * 10
    with pytest.raises(TooLarge) as caught:
        prepare(value, "application/json", CONTRACT, exact - 1, 1)
    assert caught.value.body()["limit"] == exact - 1
    with pytest.raises(TooLarge, match="2 events, above the limit of 1"):
        prepare(orjson.dumps([event(), event()]), "application/json", CONTRACT, 1000, 1)


def test_ndjson_lines_are_counted_before_any_is_parsed_and_blank_lines_are_not_events():
    with pytest.raises(TooLarge, match="3 events, above the limit of 2"):
        prepare(b"not json\n{}\n{}\n", "application/x-ndjson", CONTRACT, 1000, 2)
    lines = b"\n \n".join(orjson.dumps(event(user_id=u)) for u in "ab") + b"\n\r\n\n"
    assert [r.key for r in prepare(lines, "application/x-ndjson", CONTRACT, 1000, 2).records] == [b"a", b"b"]
