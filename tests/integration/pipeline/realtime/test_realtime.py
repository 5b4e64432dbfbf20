"""Real-time views against real Kafka, Spark and Redis: exact counters for a known event set, late
events counted as late and not applied, malformed ones in the side output with the reason, a
replayed batch that changes nothing, reading the views back (API and CLI), sums beyond 64 bits
saturating (never wedging the job, never half-applying a Lua call), and each event counted once
however many records carry it."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest
import redis
from confluent_kafka import Producer
from typer.testing import CliRunner

from conveyor.cli import app
from conveyor.limits import BROKER_DEFAULT_MAX, PRODUCER_MESSAGE_MAX, event_limit
from conveyor.pipeline.realtime.deltas import Reject
from conveyor.pipeline.realtime.job import checkpoint_location, rebuild, run
from conveyor.pipeline.realtime.metrics import RealtimeMetrics
from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.realtime.rejects import RejectsOutput, reject_fields
from conveyor.pipeline.realtime.store import (CLAIM_BUCKETS, Applied, CheckpointBehindError, EventClaims,
                                              RedisBehindError, RedisTarget, ViewStore, connect, connect_to,
                                              redis_target)
from conveyor.pipeline.realtime.views import read_view
from conveyor.positions import group_name
from tests.conftest import read_topic
from tests.lakekit import lake_folder, lake_spark, produce  # noqa: F401
from tests.positionkit import end_offsets, monitored
from tests.realtimekit import (cluster_target, counters_in_redis, event_at, expected_counters, iso, minute_label,  # noqa: F401
                               lone_redis, realtime_case, redis_cluster)

pytestmark = pytest.mark.integration


def _run(spark, case) -> RealtimeMetrics:
    metrics = RealtimeMetrics()
    run(spark, case.platform, job_views(case.platform), metrics, threading.Event(), available_now=True)
    return metrics


def _without_marks(events: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if not k.startswith("_")} for e in events]


def test_counters_are_exact_and_late_and_malformed_events_go_to_the_side_output(lake_spark, realtime_case):
    case = realtime_case(partitions=3, ctr_lateness="1m", interest_lateness="10m")
    base = (time.time() // 60) * 60 - 1800 + 5  # half an hour ago, 5 s into a minute
    first = [event_at(base + i, "impression", f"user-{i % 3}", f"b{i % 2}", price=100 + i) for i in range(20)]
    first += [event_at(base + 20, "click", "user-1", "b1", price=9), event_at(base + 21, "page_view", "user-2")]
    first += [event_at(base + 22, "impression", "user-0")]  # no banner_id: unusable for the CTR view
    produce(case.platform, case.topic, [*_without_marks(first), b"{not json", {"event_id": "x", "type": "click"}])
    _run(lake_spark, case)

    # The newest event time is now base + 22: the CTR view's watermark is base - 38, the interests' base - 578.
    second = [event_at(base + 30, "click", "user-0", "b0", price=5), event_at(base + 61, "impression", "user-1", "b1")]
    late_for_ctr = {**event_at(base - 300, "impression", "user-2", "b1"), "_late_ctr": True}
    late_for_both = {**event_at(base - 1200, "click", "user-2", "b0"), "_late_ctr": True, "_late_interests": True}
    produce(case.platform, case.topic, _without_marks([*second, late_for_ctr, late_for_both]))
    metrics = _run(lake_spark, case)
    assert all(r.first_attempt for r in metrics.reports)

    counted = [e for e in first if "banner_id" in e or e["type"] == "page_view"] + second + [late_for_ctr, late_for_both]
    counted += [first[-1]]  # the banner-less impression still counts for the interests
    expected_ctr, expected_interests = expected_counters(counted, case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests

    state = ViewStore(connect(case.platform), job_id(job_views(case.platform))).state()
    assert state.counters["records"] == len(first) + 2 + 4
    assert {k: v for k, v in state.counters.items() if k not in ("records", "applied")} == {
        "malformed": 2, f"late:{case.ctr}": 2, f"late:{case.interests}": 1, f"incomplete:{case.ctr}": 1}

    written = read_topic(case.platform, "central", case.rejects)
    rejects = [(reject_fields(m.headers()), m.value()) for m in written]
    by_kind = defaultdict(list)
    for fields, value in rejects:
        by_kind[(fields["kind"], fields.get("view"))].append((fields, value))
    assert {k: len(v) for k, v in by_kind.items()} == {
        ("malformed", None): 2, ("late", case.ctr): 2, ("late", case.interests): 1, ("incomplete", case.ctr): 1}
    assert {value for _, value in by_kind[("malformed", None)]} == {b"{not json", b'{"event_id":"x","type":"click"}'}
    assert all("before the view's watermark" in f["reason"] for f, _ in by_kind[("late", case.ctr)])
    assert all(f["topic"] == case.topic and int(f["offset"]) >= 0 for f, _ in rejects)

    # The position feed: the checkpoint's position after the last batch, on conveyor.realtime.<job>.
    group = group_name("realtime", job_id(job_views(case.platform)))
    assert monitored(case.platform, "central", group) == (end_offsets(case.platform, "central", case.topic),
                                                          {"spark checkpoint"})

    # Reading back: the Python API with CTR on read, and the CLI.
    [window] = read_view(case.platform, case.ctr, ["b1"], [datetime.fromtimestamp(base, timezone.utc)])
    assert window.counters == expected_ctr[f"t:{case.ctr}:b1:{minute_label(base)}"]
    assert window.ratios["ctr"] == pytest.approx(window.counters["clicks"] / window.counters["impressions"])
    result = CliRunner().invoke(app, ["views", "get", case.ctr, "b1", "--window", iso(base), "--platform",
                                      str(case.path)])
    assert result.exit_code == 0, result.output
    assert "impressions" in result.output and f"{window.ratios['ctr']:.2%}" in result.output


def test_a_replayed_batch_changes_nothing(lake_spark, realtime_case):
    case = realtime_case(partitions=2)
    base = time.time() - 120
    produce(case.platform, case.topic, [event_at(base + i / 10, "impression", f"user-{i % 5}", f"b{i % 3}")
                                        for i in range(50)])
    _run(lake_spark, case)
    before = counters_in_redis(case.platform, case.ctr), counters_in_redis(case.platform, case.interests)
    store = ViewStore(connect(case.platform), job_id(job_views(case.platform)))
    state = store.state()

    # Forget that the last batch finished, as a crash after its writes would: Spark runs it again.
    commits = Path(checkpoint_location(case.platform, job_views(case.platform))) / "commits"
    last = max(commits.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
    metrics = _run(lake_spark, case)
    replays = [r for r in metrics.reports if not r.first_attempt]
    assert [r.batch_id for r in replays] == [int(last.name)]
    assert replays[0].applied == 50 and replays[0].keys_written == 0
    assert (counters_in_redis(case.platform, case.ctr), counters_in_redis(case.platform, case.interests)) == before
    assert store.state() == state


@pytest.fixture(params=["server", "cluster"])
def views_redis(request, platform) -> RedisTarget:
    """The session's one Redis server, or a Redis Cluster of three masters."""
    if request.param == "cluster":
        return cluster_target(platform, request.getfixturevalue("redis_cluster"))
    request.getfixturevalue("local_platform")
    return redis_target(platform)


def test_the_lua_scripts_apply_a_key_once_per_batch(views_redis):
    store = ViewStore(connect_to(views_redis), f"lua-{time.time_ns()}")
    key = f"t:lua-test:{time.time_ns()}"
    assert store.apply(5, {key: (3600, {"clicks": 2, "impressions": 10})}).written == 1
    assert store.apply(5, {key: (3600, {"clicks": 2, "impressions": 10})}).written == 0  # the replay
    assert store.apply(4, {key: (3600, {"clicks": 100})}).written == 0  # an older batch
    assert store.apply(6, {key: (3600, {"clicks": 1})}) == Applied(1, ())
    assert store.client.hgetall(key) == {"clicks": "3", "impressions": "10", "_batch": "6"}
    assert 3500 < store.client.ttl(key) <= 3600

    assert store.commit(1, 1_000, {"applied": 3}) and store.commit(2, 5_000, {"applied": 4})
    assert not store.commit(2, 9_000, {"applied": 4})  # a replay commits nothing
    state = store.state()
    assert (state.batch, state.max_ms, state.prev_max_ms, state.counters) == (2, 5_000, 1_000, {"applied": 7})
    assert state.newest_before(3) == 5_000 and state.newest_before(2) == 1_000  # next batch; replay of 2
    with pytest.raises(CheckpointBehindError):
        state.newest_before(1)


def test_an_event_id_is_claimed_by_one_record_for_the_window(views_redis):
    claims = EventClaims(views_redis, f"t:claims-{time.time_ns()}:", ttl_seconds=1)
    at = int(time.time() * 1000)

    def claim(topic: str, ids: list[str], owners: list[str]) -> list[bool]:
        return claims(topic, ids, owners, [at] * len(ids))  # a copy carries its original's event time

    assert claim("t", ["a", "b", "a"], ["0:1", "0:2", "1:5"]) == [True, True, False]
    assert claim("t", ["a", "b", "a"], ["0:1", "0:2", "1:5"]) == [True, True, False]  # a replay
    assert claim("t", ["a"], ["2:9"]) == [False] and claim("u", ["a"], ["2:9"]) == [True]  # per topic
    ids = [f"id-{n}" for n in range(2500)]  # more than one script call
    assert claim("t", ids + ids[:10], [f"0:{n}" for n in range(2510)]) == [True] * 2500 + [False] * 10
    # The claims are fields of a hash per bucket and minute of event time, which expires whole.
    client = connect_to(views_redis)
    keys = list(client.scan_iter(match=f"{claims.prefix}*", count=1000))
    # Topic t's 2,502 ids in at most a hash per bucket (one minute), u's one id in one more.
    assert 1 < len(keys) <= CLAIM_BUCKETS + 1 and sum(client.hlen(k) for k in keys) == 2503, keys
    time.sleep(1.2)  # past the window: the id may count again
    assert claim("t", ["a"], ["2:9"]) == [True]


INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def test_sums_beyond_int64_saturate_and_never_wedge_the_job(lake_spark, realtime_case):
    case = realtime_case(partitions=2)
    base = (time.time() // 60) * 60 - 600 + 5
    minute = minute_label(base)
    # Two near-limit prices in one banner-minute and one task (same key, same partition): their sum
    # is beyond 64 bits before it leaves the task; b1 holds a value one below the limit.
    first = [event_at(base, "impression", "user-0", "b0", price=INT64_MAX - 10),
             event_at(base + 1, "impression", "user-0", "b0", price=INT64_MAX - 20),
             event_at(base + 2, "impression", "user-1", "b1", price=INT64_MAX - 1),
             event_at(base + 3, "click", "user-1", "b2", price=40)]
    produce(case.platform, case.topic, first)
    _run(lake_spark, case)
    ctr = counters_in_redis(case.platform, case.ctr)
    assert ctr[f"t:{case.ctr}:b0:{minute}"] == {"impressions": 2, "spend": INT64_MAX}
    assert ctr[f"t:{case.ctr}:b1:{minute}"] == {"impressions": 1, "spend": INT64_MAX - 1}
    assert ctr[f"t:{case.ctr}:b2:{minute}"] == {"clicks": 1, "spend": 40}

    # The stored values plus the next batch's deltas: beyond the limit in Redis, saturated there.
    produce(case.platform, case.topic, [event_at(base + 4, "click", "user-1", "b1", price=5),
                                        event_at(base + 5, "impression", "user-0", "b0", price=7),
                                        event_at(base + 6, "click", "user-1", "b2", price=2)])
    metrics = _run(lake_spark, case)
    ctr = counters_in_redis(case.platform, case.ctr)
    assert ctr[f"t:{case.ctr}:b0:{minute}"] == {"impressions": 3, "spend": INT64_MAX}
    assert ctr[f"t:{case.ctr}:b1:{minute}"] == {"impressions": 1, "clicks": 1, "spend": INT64_MAX}
    assert ctr[f"t:{case.ctr}:b2:{minute}"] == {"clicks": 2, "spend": 42}
    assert sum(r.saturated.get(case.ctr, 0) for r in metrics.reports) == 2  # b0 and b1
    state = ViewStore(connect(case.platform), job_id(job_views(case.platform))).state()
    assert state.counters["applied"] == 7 and state.batch is not None


def test_an_increment_beyond_int64_never_half_applies_a_batch(views_redis):
    store = ViewStore(connect_to(views_redis), f"lua-{time.time_ns()}")
    k1, k2, k3, k4 = (f"t:lua-int64:{time.time_ns()}:{n}" for n in range(4))
    store.apply(1, {k2: (3600, {"spend": INT64_MAX - 3}), k4: (3600, {"spend": INT64_MIN + 1})})
    deltas = {k1: (3600, {"clicks": 1, "spend": 10}), k2: (3600, {"clicks": 1, "spend": 5}),
              k3: (3600, {"clicks": 1, "spend": 2**64}), k4: (3600, {"clicks": 1, "spend": -5})}
    applied = store.apply(2, deltas)
    assert store.client.hgetall(k1) == {"clicks": "1", "spend": "10", "_batch": "2"}
    assert store.client.hgetall(k2) == {"clicks": "1", "spend": str(INT64_MAX), "_batch": "2"}
    assert store.client.hgetall(k3) == {"clicks": "1", "spend": str(INT64_MAX), "_batch": "2"}
    assert store.client.hgetall(k4) == {"clicks": "1", "spend": str(INT64_MIN), "_batch": "2"}
    assert applied.written == 4 and set(applied.saturated) == {k2, k3, k4}
    before = {k: store.client.hgetall(k) for k in (k1, k2, k3, k4)}
    store.apply(2, deltas)  # the replay
    assert {k: store.client.hgetall(k) for k in (k1, k2, k3, k4)} == before

    # A counter Redis cannot add to (not an integer: written by something else) fails the call
    # before any key of it is written, so on one server the batch fails whole and its replay finds
    # it untouched. A cluster has a call per slot: the other slots' keys are written, and the
    # replay, once the counter is fixed, skips them.
    store.client.hset(k3, "clicks", "many")
    third = {k1: (3600, {"clicks": 1}), k3: (3600, {"clicks": 1}), k2: (3600, {"clicks": 1})}
    with pytest.raises(redis.ResponseError, match="not a 64-bit integer"):
        store.apply(3, third)
    if not views_redis.cluster:
        assert store.client.hgetall(k1) == before[k1] and store.client.hgetall(k2) == before[k2]
    store.client.hset(k3, "clicks", "1")
    store.apply(3, third)
    assert [store.client.hget(k, "clicks") for k in (k1, k2, k3)] == ["2", "2", "2"]


def test_deltas_beyond_what_lua_s_numbers_hold_and_a_key_twice_in_one_call_stay_exact(views_redis):
    # A chunk travels as one JSON text; Lua's numbers are doubles, exact only below 2**53. A key may
    # come twice in one call (the real-time mode's per-offset writes).
    store = ViewStore(connect_to(views_redis), f"lua-{time.time_ns()}")
    key = f"t:lua-exact:{time.time_ns()}"
    start = {"a": 2**52 - 1, "b": 2**53 - 1, "c": -(2**52) + 1, "d": 7, "e": 2**62}
    store.write("_at", [(key, 1, 3600, start)])
    store.write("_at", [(key, 2, 3600, {"a": 1, "b": 2, "c": -2, "d": 2**52, "e": 1}),
                        (key, 3, 3600, {"a": 1, "b": 1, "d": -(2**52) - 9, "f": 5})])
    assert store.client.hgetall(key) == {"a": str(2**52 + 1), "b": str(2**53 + 2), "c": str(-(2**52) - 1),
                                         "d": "-2", "e": str(2**62 + 1), "f": "5", "_at": "3"}


def _distinct(events: list[dict]) -> list[dict]:
    return list({e["event_id"]: e for e in events}.values())


def test_each_event_counts_once_however_often_it_arrives(lake_spark, realtime_case):
    case = realtime_case(partitions=3)
    base = (time.time() // 60) * 60 - 600 + 5
    kinds = ("impression", "impression", "click", "page_view")
    events = [event_at(base + i, kinds[i % 4], f"user-{i % 4}", None if i % 4 == 3 else f"b{i % 3}",
                       None if i % 4 == 3 else 1000 + i) for i in range(24)]
    # Each event once by its key, then again on each partition in turn (a failover's second copy):
    # within one batch, mostly across partitions, some within the same one.
    sent = produce(case.platform, case.topic, events[:18])
    for p in range(3):
        produce(case.platform, case.topic, events[p:18:3], partition=p)
    first_run = _run(lake_spark, case)
    assert len({p for p, _ in sent}) > 1

    # Later batches: copies of events counted before, and new events sent twice in their batch.
    again = events[:6] + events[18:] + events[18:]
    produce(case.platform, case.topic, again, partition=1)
    _run(lake_spark, case)

    expected_ctr, expected_interests = expected_counters(_distinct(events), case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests
    state = ViewStore(connect(case.platform), job_id(job_views(case.platform))).state()
    assert state.counters["applied"] == len(events)
    assert state.counters["records"] == 18 + 18 + len(again)
    assert state.counters["duplicates"] == 18 + len(again) - 6
    assert sum(r.duplicates for r in first_run.reports) == 18


def _without_category(event: dict, value_bytes: int, filler: str) -> tuple[dict, bytes]:
    """``event`` without the interests' group-by field, padded with ``filler`` in a string field until
    its key (user_id) and JSON value take ``value_bytes`` together; the event and its value."""
    event = {k: v for k, v in event.items() if k != "category"}
    bare = len(orjson.dumps({**event, "note": ""})) + len(event["user_id"])
    unit = len(orjson.dumps(filler)) - 2  # the bytes one filler character takes in JSON
    event["note"] = filler * ((value_bytes - bare) // unit) + "x" * ((value_bytes - bare) % unit)
    value = orjson.dumps(event)
    assert len(value) + len(event["user_id"]) == value_bytes
    return event, value


@pytest.mark.parametrize("filler, size", [("x", event_limit(2**20, BROKER_DEFAULT_MAX)), ("\\", 600_000)],
                         ids=["largest-accepted", "escaped-backslashes"])
def test_an_accepted_event_rejected_as_incomplete_lands_intact_in_the_side_output_and_the_job_goes_on(
        lake_spark, realtime_case, filler, size):
    case = realtime_case(partitions=2)
    base = time.time() - 60
    big, value = _without_category(event_at(base, "impression", "user-1", "b1"), size, filler)
    produce(case.platform, case.topic, [big])
    _run(lake_spark, case)

    later = [event_at(base + 1 + i, "impression", f"user-{i}", "b2") for i in range(3)]
    produce(case.platform, case.topic, later)
    _run(lake_spark, case)
    expected_ctr, expected_interests = expected_counters([{**big, "_late_interests": True}, *later], case.ctr,
                                                         case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests

    [reject] = read_topic(case.platform, "central", case.rejects)
    assert reject.value() == value and reject.key() == big["user_id"].encode()
    fields = reject_fields(reject.headers())
    assert (fields["kind"], fields["view"], fields["topic"]) == ("incomplete", case.interests, case.topic)
    assert "category" in fields["reason"]


def test_an_event_from_the_near_future_is_counted_and_never_makes_on_time_events_late(lake_spark, realtime_case):
    case = realtime_case(partitions=2, ctr_lateness="2m")
    # 4 minutes ahead: within the 5 minutes of future_tolerance, beyond the 2 minutes of lateness.
    ahead = event_at(time.time() + 240, "impression", "user-9", "b9")
    produce(case.platform, case.topic, [ahead])
    _run(lake_spark, case)

    now = time.time()
    on_time = [event_at(now + i / 10, "impression", f"user-{i % 3}", f"b{i % 2}") for i in range(20)]
    produce(case.platform, case.topic, on_time)
    _run(lake_spark, case)
    expected_ctr, expected_interests = expected_counters([ahead, *on_time], case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests
    state = ViewStore(connect(case.platform), job_id(job_views(case.platform))).state()
    assert state.counters == {"records": 21, "applied": 21}


def test_more_rejects_than_the_producer_queue_holds_are_all_written(realtime_case):
    case = realtime_case(partitions=1)
    output = RejectsOutput(case.platform, "central", case.rejects)
    # The same producer with a local queue of 1,000 records (librdkafka's default: 100,000), so the
    # rejects outnumber it however fast this broker acknowledges.
    output.producer = Producer({**output.config, "queue.buffering.max.messages": 1000})
    count = 20_000
    output.send(3, tuple(Reject("malformed", None, "not JSON", case.topic, 0, n, None, b"%d" % n)
                         for n in range(count)))
    written = read_topic(case.platform, "central", case.rejects)
    assert sorted(int(m.value()) for m in written) == list(range(count))


def test_a_redis_that_lost_the_views_is_noticed_and_the_views_are_rebuilt_from_kafka(lake_spark, realtime_case,
                                                                                      lone_redis):
    case = realtime_case(partitions=2, redis=lone_redis)
    base = time.time() - 120
    first = [event_at(base + i, "impression", f"user-{i % 3}", f"b{i % 2}") for i in range(10)]
    produce(case.platform, case.topic, first)
    _run(lake_spark, case)
    connect(case.platform).flushall()  # a Redis that lost its data between two batches

    second = [event_at(base + 20 + i, "click", f"user-{i % 3}", f"b{i % 2}") for i in range(5)]
    produce(case.platform, case.topic, second)
    metrics = RealtimeMetrics()
    with pytest.raises(RedisBehindError, match=r"--rebuild") as failure:
        run(lake_spark, case.platform, job_views(case.platform), metrics, threading.Event(), available_now=True)
    assert "batch 0" in str(failure.value), failure.value
    assert metrics.registry.get_sample_value("conveyor_realtime_redis_lost_total") == 1
    assert not counters_in_redis(case.platform, case.ctr)  # nothing written over the loss

    rebuild(lake_spark, case.platform, job_views(case.platform))
    _run(lake_spark, case)
    expected_ctr, expected_interests = expected_counters(first + second, case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests


def test_a_record_too_large_to_copy_is_written_without_its_value_and_its_size_named(realtime_case):
    case = realtime_case(partitions=1)
    output = RejectsOutput(case.platform, "central", case.rejects)
    output.send(4, (Reject("malformed", None, "not JSON", case.topic, 0, 7, b"k", b"x" * PRODUCER_MESSAGE_MAX),))
    [written] = read_topic(case.platform, "central", case.rejects)
    fields = reject_fields(written.headers())
    assert written.value() is None and written.key() == b"k"
    assert (fields["kind"], fields["offset"], fields["value-omitted"]) == ("malformed", "7", str(PRODUCER_MESSAGE_MAX))
