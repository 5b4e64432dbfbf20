"""A micro-batch to deltas, rejects and event times, as Spark's workers compute it. Pure."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pyarrow as pa

from conveyor.config import load_platform
from conveyor.pipeline.realtime.deltas import BatchPlan, TopicPlan, latencies, merge, project, quantiles
from conveyor.pipeline.realtime.plan import ViewPlan, epoch_ms
from conveyor.pipeline.schema import contract_columns

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "contracts" / "ad-events.schema.json").read_text())
PLATFORM = load_platform(ROOT / "platform.yaml")
VIEWS = tuple(ViewPlan.of(n, v) for n, v in sorted(PLATFORM.pipeline.realtime.views.items()))
TOPIC = TopicPlan("ad-events", json.dumps(SCHEMA), contract_columns("ad-events", SCHEMA))
T0 = datetime(2025, 3, 1, 12, 0, 10, 123000, tzinfo=timezone.utc)


def event(n: int, kind: str, second: float = 0, **extra) -> bytes:
    moment = datetime.fromtimestamp(T0.timestamp() + second, timezone.utc)
    body = {"event_id": f"00000000-0000-4000-8000-{n:012d}", "event_time": moment.isoformat().replace("+00:00", "Z"),
            "type": kind, "site_id": "s", "user_id": f"user-{n % 2}", "category": "travel", **extra}
    return orjson.dumps(body)


def kafka_batch(values: list[bytes | None], kafka_second: float = 0) -> pa.RecordBatch:
    stamp = int((T0.timestamp() + kafka_second) * 1_000_000)
    return pa.RecordBatch.from_pydict({
        "topic": ["ad-events"] * len(values), "partition": [0] * len(values), "offset": list(range(len(values))),
        "timestamp": pa.array([stamp] * len(values), pa.timestamp("us", tz="UTC")), "value": values,
    })


def run(values: list[bytes | None], watermarks=(None, None), tasks: int = 2):
    plan = BatchPlan((TOPIC,), VIEWS, watermarks, 300_000)
    # Split over several "tasks" as Spark would; merge must add their partial sums.
    parts = [values[i::tasks] for i in range(tasks)]
    out = [b for part in parts for b in project(iter([kafka_batch(part)]), plan)]
    return merge(pa.Table.from_batches(out))


def test_counts_and_sums_per_key_and_window_across_tasks():
    result = run([
        event(1, "impression", banner_id="b1", price_micros=100),
        event(2, "impression", banner_id="b1", price_micros=50),
        event(3, "click", banner_id="b1", price_micros=7),
        event(4, "impression", second=60, banner_id="b1"),  # the next minute
        event(5, "page_view"),  # not for banner_ctr's filter; counts in the interests
    ])
    assert result.records == 5 and result.applied == 5 and not result.rejects
    assert result.deltas["view:banner_ctr:b1:20250301T120000Z"] == (
        "banner_ctr", {"impressions": 2, "clicks": 1, "spend_micros": 157})
    assert result.deltas["view:banner_ctr:b1:20250301T120100Z"] == ("banner_ctr", {"impressions": 1, "spend_micros": 0})
    # user-1: events 1, 3, 5; user-0: events 2, 4 (hourly window, one field per category)
    assert result.deltas["view:user_interests:user-1:20250301T120000Z"] == (
        "user_interests", {"events:travel": 3, "clicks:travel": 1})
    assert result.deltas["view:user_interests:user-0:20250301T120000Z"][1] == {"events:travel": 2}
    assert result.max_ms == epoch_ms(T0) + 60_000


def test_rejects_carry_their_reason_and_are_counted_per_view():
    watermark = epoch_ms(T0) - 30_000
    result = run([
        b"not json",
        orjson.dumps({"event_id": "x"}),
        event(1, "impression", second=-45, banner_id="b1"),  # late for banner_ctr (watermark) only
        event(2, "click"),  # a click without banner_id: unusable for banner_ctr
        event(3, "impression", second=3600, banner_id="b1"),  # an hour ahead of its Kafka timestamp
    ], watermarks=(watermark, watermark - 600_000))
    kinds = result.reject_counts()
    assert kinds == {"malformed": 2, "late:banner_ctr": 1, "incomplete:banner_ctr": 1, "future": 1}
    reasons = {(r.kind, r.view): r.reason for r in result.rejects}
    assert reasons[("malformed", None)].startswith(("not JSON", "breaks the contract"))
    assert "before the view's watermark" in reasons[("late", "banner_ctr")]
    assert reasons[("incomplete", "banner_ctr")] == "group-by field banner_id is missing"
    assert {r.raw for r in result.rejects if r.kind == "malformed"} == {b"not json", b'{"event_id":"x"}'}
    # The late event still counts for the interests view, whose lateness is longer; so does the click.
    assert result.applied == 2
    assert "view:banner_ctr:b1:20250301T115900Z" not in result.deltas


def test_the_same_records_and_watermarks_give_the_same_result():
    values = [event(i, "impression" if i % 3 else "click", second=i, banner_id=f"b{i % 4}") for i in range(200)]
    assert run(values, tasks=3) == run(values, tasks=5)


def test_latency_quantiles_are_nearest_rank_over_events():
    times = {1_000: 98, 500: 1, 0: 1}  # event time ms -> events
    lat = latencies(times, written_ms=3_000)
    assert lat == {2_000: 98, 2_500: 1, 3_000: 1}
    assert quantiles(lat, (0.5, 0.99, 1.0)) == {0.5: 2_000, 0.99: 2_500, 1.0: 3_000}
    assert quantiles({}, (0.5,)) == {}
