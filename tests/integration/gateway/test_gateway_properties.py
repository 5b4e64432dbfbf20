"""Properties of the gateway against real brokers and the real lake.

- Fuzzed requests (random bytes, JSON of any shape, media types, topics) never get a 500.
- For events generated from each contract, valid and broken ones: an event the gateway accepts is
  landed by the lake as a row, never quarantined (parsed in the JVM with the gateway's verdict
  kept, each field as the full check would place it), and applied by the real-time views (ad-events:
  every counter equals a recount over the accepted events, and the only rejects are events without
  a view's group-by field); an event it refuses gets a 4xx naming the field and the rule.

Hypothesis draws from a seed printed with every failure (CONVEYOR_TEST_SEED reproduces a run);
CONVEYOR_PROPERTY_EVENTS sets the events per contract (default 300; 2,000 for the full count).
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from conveyor.config import Platform
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.records import RecordParser
from conveyor.pipeline.schema import contract_columns
from conveyor.pipeline.realtime.job import run
from conveyor.pipeline.realtime.metrics import RealtimeMetrics
from conveyor.pipeline.realtime.plan import job_views
from conveyor.pipeline.realtime.rejects import reject_fields
from conveyor.topics.contracts import INT64_MAX
from tests.conftest import read_topic
from tests.contractkit import broken_events, json_values, valid_events
from tests.lakekit import drop_topics, gateway_lake_case, lake_folder, lake_spark, quarantine_of, rows_of  # noqa: F401
from tests.realtimekit import counters_in_redis, minute_label, views_of

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
EVENTS = int(os.environ.get("CONVEYOR_PROPERTY_EVENTS", "300"))
SEED = int(os.environ.get("CONVEYOR_TEST_SEED", random.randrange(1 << 32)))
TOKENS = {"ad-events": "demo-adserver-token", "notifications": "demo-notifier-token"}
OK_STATUSES = {200, 400, 401, 403, 404, 413, 415, 422}


def _schema(contract: str) -> dict[str, Any]:
    return json.loads((ROOT / "contracts" / f"{contract}.schema.json").read_text())


@pytest.fixture(scope="module")
def prop_platform(provisioned: Platform, platform_data: dict[str, Any], lake_folder: Path,  # noqa: F811
                  lake_spark: Any) -> Iterator[tuple[Platform, dict[str, str]]]:  # noqa: F811
    """Two new topics on dc1, one per contract, landed by the lake and read by the views straight from dc1."""
    def realtime(topics: dict[str, str]) -> dict[str, Any]:
        topic = topics["ad-events"]
        return {"checkpoint": str(lake_folder / f"checkpoints-{topic}"), "trigger": "500ms",
                "rejects_topic": f"{topic}-rejects", "views": views_of(topic, "10m", "10m")}

    case = gateway_lake_case(platform_data, lake_folder, TOKENS, realtime)
    yield case.platform, case.topics
    drop_topics(case)


def _post(client: httpx.Client, topic: str, body: bytes, token: str | None, content_type: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    return client.post(f"/v1/topics/{topic}/events", content=body, headers=headers)


def _in_seed(check: Callable[[], None]) -> None:
    try:
        check()
    except BaseException as failure:
        failure.add_note(f"seed {SEED}: rerun with CONVEYOR_TEST_SEED={SEED}")
        raise


@st.composite
def _requests(draw: st.DrawFn, schema: dict[str, Any]) -> tuple[bytes, str | None, str]:
    """A body, a media type and a topic, from plausible to hostile."""
    valid = valid_events(schema)
    event = draw(st.one_of(valid, broken_events(schema).map(lambda b: b[0]), json_values))
    deep = draw(st.integers(1, 400))
    shapes = [
        json.dumps(event).encode(),
        json.dumps([event, draw(valid)]).encode(),
        b"\n".join(json.dumps(e).encode() for e in (draw(valid), event)),
        draw(st.binary(max_size=200)),
        orjson.dumps(draw(valid))[:-1] + b',"x":' + b'{"a":' * deep + b"0" + b"}" * deep + b"}",
        b"[" * deep + b"]" * deep,
        json.dumps({**draw(valid), "n": draw(st.integers(-(2**70), 2**70))}).encode(),
    ]
    body = draw(st.sampled_from(shapes))
    content_type = draw(st.sampled_from([None, "application/json", "application/x-ndjson", "application/json; charset=utf-8",
                                         "text/plain", "", "application/json;;", "*/*"]))
    topic = draw(st.sampled_from(["ad-events", "ad-events", "no-such-topic", "%2e%2e", "ad-events%00"]))
    return body, content_type, topic


def test_no_request_a_client_can_send_gets_a_500(prop_platform, serve_gateway):
    platform, _ = prop_platform
    url = serve_gateway(platform, "dc1")
    schema = _schema("ad-events")

    @seed(SEED)
    @settings(max_examples=max(EVENTS // 10, 100), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(_requests(schema), st.sampled_from([TOKENS["ad-events"], None, "wrong"]))
    def fuzz(request: tuple[bytes, str | None, str], token: str | None) -> None:
        body, content_type, topic = request
        answer = _post(client, topic, body, token, content_type)
        assert answer.status_code in OK_STATUSES, (answer.status_code, answer.text[:300])
        if answer.status_code != 200:
            assert answer.json()["error"] and answer.json()["message"]

    with httpx.Client(base_url=url, timeout=60) as client:
        _in_seed(fuzz)


def test_what_the_gateway_accepts_the_lake_and_the_views_apply_and_what_it_refuses_names_the_rule(
        prop_platform, serve_gateway, lake_spark):  # noqa: F811
    platform, topics = prop_platform
    url = serve_gateway(platform, "dc1")
    accepted: dict[str, dict[str, dict[str, Any]]] = {topic: {} for topic in topics.values()}

    def send_all(contract: str) -> None:
        schema, topic, token = _schema(contract), topics[contract], TOKENS[contract]
        # Recent times for the views' topic, so its windows take every accepted event as on time.
        valid = valid_events(schema, recent=contract == "ad-events")

        @seed(SEED)
        @settings(max_examples=EVENTS, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(st.one_of(valid.map(lambda e: (e, None, None)), broken_events(schema)))
        def send(case: tuple[dict[str, Any], str | None, str | None]) -> None:
            event, field, how = case
            answer = _post(client, topic, json.dumps(event).encode(), token, "application/json")
            if field is None:
                assert answer.status_code == 200, (event, answer.text)
                accepted[topic][event["event_id"]] = event
                return
            assert answer.status_code == 422, (event, answer.text)
            body = answer.json()
            expected = {how, "enum"} if "enum" in schema["properties"][field] else {how}
            assert body["field"] == field and body["rule"] in expected, (event, body)

        send()

    with httpx.Client(base_url=url, timeout=60) as client:
        for contract in topics:
            _in_seed(lambda: send_all(contract))

    runs = run_once(lake_spark, platform, list(topics.values())).topics
    # Only the bus writes these topics: every record kept the gateway's verdict, parsed in the JVM.
    assert [(r.trust.trusted, r.checked) for r in runs] == [(True, 0)] * len(runs), runs
    for contract, topic in topics.items():
        rows = rows_of(lake_spark, topic)
        quarantined = quarantine_of(lake_spark, topic)
        _in_seed(lambda: _same(topic, set(accepted[topic]), [row["event_id"] for row in rows], quarantined))
        _in_seed(lambda: _as_the_full_check_lands(topic, _schema(contract), rows, accepted[topic]))

    topic = topics["ad-events"]
    run(lake_spark, platform, job_views(platform), RealtimeMetrics(), threading.Event(), available_now=True)
    rejects = [reject_fields(m.headers()) for m in read_topic(platform, "dc1", f"{topic}-rejects")]
    _in_seed(lambda: _applied(platform, topic, list(accepted[topic].values()), rejects))


def _recount(topic: str, events: list[dict[str, Any]]) -> tuple[dict, dict, int]:
    """The views of tests.realtimekit.views_of over ``events``, and how many lack a group-by field.
    Sums saturate at 2^63-1 (prices are never negative), as docs/realtime.md states."""
    ctr: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    interests: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    incomplete = 0
    for e in events:
        at = datetime.fromisoformat(e["event_time"].upper().replace("Z", "+00:00")).timestamp()
        if e["type"] in ("impression", "click"):
            if "banner_id" not in e:
                incomplete += 1
            else:
                fields = ctr[f"t:ctr-{topic}:{e['banner_id']}:{minute_label(at)}"]
                fields["impressions" if e["type"] == "impression" else "clicks"] += 1
                fields["spend"] = min(fields["spend"] + e.get("price_micros", 0), INT64_MAX)
        if "category" not in e:
            incomplete += 1
        else:
            interests[f"t:interests-{topic}:{e['user_id']}:{minute_label(at, 3600)}"][f"events:{e['category']}"] += 1
    return {k: dict(v) for k, v in ctr.items()}, {k: dict(v) for k, v in interests.items()}, incomplete


def _applied(platform: Platform, topic: str, events: list[dict[str, Any]], rejects: list[dict[str, str]]) -> None:
    ctr, interests, incomplete = _recount(topic, events)
    kinds = {r["kind"] for r in rejects}
    assert kinds <= {"incomplete"}, [r for r in rejects if r["kind"] != "incomplete"][:3]
    assert len(rejects) == incomplete, (len(rejects), incomplete)
    assert counters_in_redis(platform, f"ctr-{topic}") == ctr
    assert counters_in_redis(platform, f"interests-{topic}") == interests


def _as_the_full_check_lands(topic: str, schema: dict[str, Any], rows: list[Any],
                             sent: dict[str, dict[str, Any]]) -> None:
    """Each row the JVM placed holds, field by field, what the full check makes of the event as sent,
    and keeps the record's bytes exactly when the event has fields outside the columns."""
    columns = contract_columns(topic, schema)
    parser = RecordParser(topic, json.dumps(schema), columns)
    named = {c.name for c in columns}

    def comparable(value: Any) -> Any:  # Spark hands back naive times, the parser aware ones
        return value.timestamp() if isinstance(value, datetime) else value

    for row in rows:
        event = sent[row["event_id"]]
        reason, *values = parser.parse(json.dumps(event).encode())
        assert reason is None, (row, reason)
        assert [comparable(row[c.name]) for c in columns] == [comparable(v) for v in values], row
        assert (row["raw_value"] is not None) == (not named.issuperset(event)), row
        if row["raw_value"] is not None:
            assert json.loads(row["raw_value"]) == event, row


def _same(topic: str, accepted: set[str], landed: list[str], quarantined: list[Any]) -> None:
    assert not quarantined, f"{topic}: the lake quarantined {len(quarantined)} accepted events: {quarantined[:3]}"
    assert len(landed) == len(set(landed)) == len(accepted), (topic, len(landed), len(accepted))
    assert set(landed) == accepted, topic
