"""A micro-batch to deltas, rejects and event times, as Spark's workers compute it: sums exact beyond
64 bits until the store saturates them, each event_id counted at the one record that claims it. Pure."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from conveyor.config import load_platform
from conveyor.pipeline.realtime.deltas import BatchPlan, ContractBehindError, TopicPlan, latencies, merge, project, quantiles
from conveyor.pipeline.realtime.plan import INT64_MAX, INT64_MIN, ViewPlan, epoch_ms, saturate
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


def kafka_batch(values: list[bytes | None], kafka_second: float = 0, partition: int = 0,
                first_offset: int = 0) -> pa.RecordBatch:
    stamp = int((T0.timestamp() + kafka_second) * 1_000_000)
    return pa.RecordBatch.from_pydict({
        "topic": ["ad-events"] * len(values), "partition": [partition] * len(values),
        "offset": list(range(first_offset, first_offset + len(values))),
        "timestamp": pa.array([stamp] * len(values), pa.timestamp("us", tz="UTC")),
        "key": pa.array([b"k%d" % n for n in range(len(values))], pa.binary()), "value": values,
    })


class DictClaims:
    """The Redis claims' rule in a dict: an id belongs to the first record that claims it."""

    def __init__(self) -> None:
        self.holders: dict[tuple[str, str], str] = {}
        self.calls = 0

    def __call__(self, topic, event_ids, owners, times_ms):
        self.calls += 1
        return [self.holders.setdefault((topic, i), o) == o for i, o in zip(event_ids, owners, strict=True)]


def run(values: list[bytes | None], watermarks=(None, None), tasks: int = 2, claims=None, first_offset: int = 0):
    plan = BatchPlan((TOPIC,), VIEWS, watermarks, 300_000)
    # Split over several "tasks" as Spark would, one partition each; merge must add their partial sums.
    parts = [values[i::tasks] for i in range(tasks)]
    out = [b for i, part in enumerate(parts)
           for b in project(iter([kafka_batch(part, partition=i, first_offset=first_offset)]), plan, claims)]
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
    assert {(r.key, r.raw) for r in result.rejects if r.kind == "malformed"} == {(b"k0", b"not json"),
                                                                                 (b"k0", b'{"event_id":"x"}')}
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


def test_sums_beyond_64_bits_stay_exact_until_the_store_saturates_them():
    near = [event(1, "impression", banner_id="b1", price_micros=INT64_MAX - 10),
            event(2, "impression", banner_id="b1", price_micros=INT64_MAX - 20),
            event(3, "impression", banner_id="b1", price_micros=INT64_MAX - 30),
            event(4, "click", banner_id="b2", price_micros=5)]
    for tasks in (1, 2, 4):  # beyond 64 bits inside a task, or only once the tasks' sums are added
        result = run(near, tasks=tasks)
        assert result.deltas["view:banner_ctr:b1:20250301T120000Z"] == (
            "banner_ctr", {"impressions": 3, "spend_micros": 3 * INT64_MAX - 60})
        assert result.deltas["view:banner_ctr:b2:20250301T120000Z"] == ("banner_ctr", {"clicks": 1, "spend_micros": 5})
    assert saturate(3 * INT64_MAX - 60) == INT64_MAX and saturate(-(2**70)) == INT64_MIN and saturate(-5) == -5


def test_each_event_id_counts_once_at_the_record_that_claims_it():
    one, two, three = (event(n, "click", banner_id="b1", price_micros=10 * n) for n in (1, 2, 3))
    claims = DictClaims()
    result = run([one, two, one, three, two, one], tasks=2, claims=claims)  # copies in one task and across
    distinct = run([one, two, three])
    assert (result.deltas, result.times, result.max_ms) == (distinct.deltas, distinct.times, distinct.max_ms)
    assert result.records == 6 and result.applied == 3 and result.duplicates == 3
    assert claims.calls == 2  # one call per task, whatever its number of events

    # The batch again (a replay after a kill) finds its own claims and counts the same records.
    assert run([one, two, one, three, two, one], tasks=2, claims=claims) == result
    # A later batch with copies of counted events counts nothing of them.
    later = run([two, event(4, "impression", banner_id="b1"), three], tasks=2, claims=claims, first_offset=100)
    assert later.duplicates == 2 and later.applied == 1
    assert later.deltas == {"view:banner_ctr:b1:20250301T120000Z": ("banner_ctr", {"impressions": 1,
                                                                                   "spend_micros": 0}),
                            "view:user_interests:user-0:20250301T120000Z": ("user_interests", {"events:travel": 1})}
    # Without claims (dedup_window 0) every record counts.
    assert run([one, one], claims=None).applied == 2


def test_a_copy_is_not_rejected_twice_and_a_bad_copy_claims_nothing():
    watermark = epoch_ms(T0) - 30_000
    late = event(1, "impression", second=-45, banner_id="b1")
    future = event(2, "click", second=3600, banner_id="b2")
    claims = DictClaims()
    result = run([late, late, future], watermarks=(watermark, watermark - 600_000), claims=claims)
    assert result.reject_counts() == {"late:banner_ctr": 1, "future": 1} and result.duplicates == 1
    assert set(claims.holders) == {("ad-events", orjson.loads(late)["event_id"])}


#: Version 1 of the contract closed (no field beyond its own), version 2 adding ``country``.
CLOSED = {**SCHEMA, "additionalProperties": False}
WITH_COUNTRY = {**CLOSED, "properties": {**CLOSED["properties"], "country": {"type": "string", "maxLength": 2}}}
VERSIONS = ((1, 101, json.dumps(CLOSED)), (2, 102, json.dumps(WITH_COUNTRY)))


def versioned_batch(rows: list[tuple[bytes, bytes | None]], kafka_second: float = 0) -> pa.RecordBatch:
    batch = kafka_batch([value for value, _ in rows], kafka_second)
    return batch.append_column("contract", pa.array([header for _, header in rows], pa.binary()))


def test_each_record_is_parsed_by_the_version_its_header_names():
    topic = TopicPlan("ad-events", VERSIONS[-1][2], contract_columns("ad-events", WITH_COUNTRY), VERSIONS)
    plan = BatchPlan((topic,), VIEWS, (None, None), 300_000)
    batch = versioned_batch([
        (event(1, "impression", banner_id="b1", country="NL"), b"102:2"),  # version 2 has the field
        (event(2, "impression", banner_id="b1", country="NL"), b"101:1"),  # version 1 is closed to it
        (event(3, "impression", banner_id="b1"), b"101:1"),
        (event(4, "impression", banner_id="b1"), b"103:3"),  # a version the registry never held
        (event(5, "impression", banner_id="b1"), None),  # written around the gateway: the latest
    ])
    result = merge(pa.Table.from_batches(list(project(iter([batch]), plan))))
    assert result.records == 5 and result.applied == 3
    reasons = {r.offset: r.reason for r in result.rejects}
    assert set(reasons) == {1, 3}
    assert "breaks the contract" in reasons[1] and "country" in reasons[1]
    assert "version 3 (id 103), which the registry does not hold" in reasons[3]


def test_a_real_time_task_stops_on_a_version_newer_than_its_plan_and_rejects_an_older_unknown_one():
    topic = TopicPlan("ad-events", VERSIONS[0][2], contract_columns("ad-events", CLOSED), VERSIONS[:1])
    read_ms = epoch_ms(T0)
    plan = BatchPlan((topic,), VIEWS, (None, None), 300_000, versions_read_ms=read_ms)
    newer = versioned_batch([(event(1, "impression", banner_id="b1", country="NL"), b"102:2")], kafka_second=0)
    with pytest.raises(ContractBehindError, match="registered after the plan was read"):
        list(project(iter([newer]), plan))
    # Stamped well before the registry was read: a version the registry did not hold then never existed.
    older = versioned_batch([(event(1, "impression", banner_id="b1", country="NL"), b"102:2")], kafka_second=-60)
    result = merge(pa.Table.from_batches(list(project(iter([older]), plan))))
    assert [r.kind for r in result.rejects] == ["malformed"] and result.applied == 0
