"""The real-time mode's per-partition fence against a real Redis (one server and a Redis Cluster) and
the real side output, without Spark: the task function fed Arrow batches as Spark feeds it, stopped
at a chosen point inside a span's writes, then fed again from an earlier offset with other batch
boundaries, as a replayed real-time batch is. Every counter must be exact, each event once. And
Redis losing the job's positions stops the job, in a task and at the job's start."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
import redis

from conveyor.pipeline.realtime import live, live_query
from conveyor.pipeline.realtime.contracts import ViewContracts
from conveyor.pipeline.realtime.job import checkpoint_location
from conveyor.pipeline.realtime.live import Position, diagnostics_key, fence_field, live_state, write_live
from conveyor.pipeline.realtime.live_query import live_work
from conveyor.pipeline.realtime.metrics import RealtimeMetrics
from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.realtime.store import RedisBehindError, ViewStore, connect
from tests.lakekit import lake_folder, lake_spark  # noqa: F401
from tests.realtimekit import counters_in_redis, event_at, expected_counters, realtime_case, redis_cluster  # noqa: F401

pytestmark = pytest.mark.integration


def _work(platform, views) -> live.LiveWork:
    """What the job's tasks get, with the contracts as the registry holds them now."""
    contracts = ViewContracts(platform, views)
    try:
        return live_work(platform, views, contracts.caught_up(live=True))
    finally:
        contracts.close()


class Stopped(Exception):
    """Where the first attempt's task dies."""


def _rows(topic: str, values: list[bytes], first: int) -> pa.RecordBatch:
    now = int(time.time() * 1_000_000)
    return pa.RecordBatch.from_pydict({
        "topic": [topic] * len(values), "partition": [0] * len(values),
        "offset": list(range(first, first + len(values))),
        "timestamp": pa.array([now] * len(values), pa.timestamp("us", tz="UTC")),
        "key": pa.array([b"k"] * len(values), pa.binary()), "value": values})


def _feed(work, topic: str, values: list[bytes], bounds: list[tuple[int, int]]) -> None:
    """One task: the records in ``bounds`` ([start, end) offsets), one Arrow batch each."""
    for _ in write_live(iter(_rows(topic, values[a:b], a) for a, b in bounds), work):
        pass


def _case(realtime_case, request, where: str, count: int):
    """A one-partition case on one server or a Redis Cluster, its views, its tasks' work and
    ``count`` ad events of the last 30 s."""
    settings = {"redis": request.getfixturevalue("redis_cluster")} if where == "cluster" else {}
    case = realtime_case(partitions=1, ctr_lateness="10m", interest_lateness="10m", **settings)
    views = job_views(case.platform)
    now = time.time()
    events = [event_at(now - 30 + i / 100, "click" if i % 7 == 0 else "impression", f"user-{i % 5}", f"b{i % 9}", i)
              for i in range(count)]
    return case, views, _work(case.platform, views), events


@pytest.mark.parametrize("stop_at", ["after-pending", "half-the-keys", "before-done"])
@pytest.mark.parametrize("where", ["server", "cluster"])
def test_a_task_stopped_inside_its_writes_and_replayed_from_earlier_counts_each_event_once(
        realtime_case, request, monkeypatch, where, stop_at):
    case, views, work, events = _case(realtime_case, request, where, 350)
    for i in range(260, 270):  # copies of earlier events (same event_id), as a failover's second write
        events[i] = events[i - 250]
    values = [orjson.dumps(e) for e in events]
    values[120] = b"{broken"

    _feed(work, case.topic, values, [(0, 100), (100, 200)])
    real_write = ViewStore.write

    def write(self, fence, entries):
        if stop_at == "after-pending":
            raise Stopped
        if stop_at == "half-the-keys":
            real_write(self, fence, entries[:len(entries) // 2])
            raise Stopped
        return real_write(self, fence, entries)

    def queue_commit(*_, **__):
        raise Stopped

    monkeypatch.setattr(ViewStore, "write", write)
    monkeypatch.setattr(ViewStore, "queue_commit", queue_commit)
    with pytest.raises(Stopped):
        _feed(work, case.topic, values, [(200, 300)])
    monkeypatch.undo()
    client = connect(case.platform)
    position = live_state(client, job_id(views), [(case.topic, 0)])[0][(case.topic, 0)]
    assert (position.done, position.pending) == (199, 299)  # the stop landed inside the span
    fenced = [k for k in client.scan_iter(match="t:*", count=1000) if client.hget(k, fence_field(case.topic, 0)) == "299"]
    assert bool(fenced) == (stop_at != "after-pending")

    live._store.cache_clear()  # a new Python worker
    _feed(work, case.topic, values, [(150, 250), (250, 320), (320, 350)])  # the second straddles the stop

    distinct = list({e["event_id"]: e for i, e in enumerate(events) if i != 120}.values())
    expected_ctr, expected_interests = expected_counters(distinct, case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests
    positions, counters = live_state(client, job_id(views), [(case.topic, 0)])
    assert positions[(case.topic, 0)] == Position(349, 349, positions[(case.topic, 0)].pending_max,
                                                  positions[(case.topic, 0)].max_ms)
    assert dict(counters) == {"records": 350, "malformed": 1, "applied": len(distinct), "duplicates": 10}
    notes = client.hgetall(diagnostics_key(job_id(views)))
    assert (notes["reread"], notes["recovered"]) == ("50", "100")


@pytest.mark.parametrize("where", ["server", "cluster"])
def test_a_task_whose_partition_another_task_wrote_meanwhile_stops_before_counting_it_twice(
        realtime_case, request, where):
    # Two writers of one partition: a zombie of a lost executor goes on writing while Spark's new
    # attempt reads from the same offsets. The stale one must stop before it writes a key.
    case, views, work, events = _case(realtime_case, request, where, 200)
    values = [orjson.dumps(e) for e in events]
    _feed(work, case.topic, values, [(0, 100)])

    def stale():
        yield _rows(case.topic, values[100:110], 100)  # this task now holds its position: done 109
        _feed(work, case.topic, values, [(110, 150)])  # the other task writes past it
        yield _rows(case.topic, values[110:200], 110)

    with pytest.raises(redis.ResponseError, match="another task wrote this partition meanwhile"):
        for _ in write_live(stale(), work):
            pass
    live._store.cache_clear()  # Spark's next attempt, from the checkpoint's offsets
    _feed(work, case.topic, values, [(100, 200)])

    expected_ctr, expected_interests = expected_counters(events, case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr
    assert counters_in_redis(case.platform, case.interests) == expected_interests
    positions, counters = live_state(connect(case.platform), job_id(views), [(case.topic, 0)])
    assert (positions[(case.topic, 0)].done, positions[(case.topic, 0)].pending) == (199, 199)
    assert dict(counters) == {"records": 200, "applied": 200}


def test_a_task_that_finds_its_partition_s_position_gone_fails_instead_of_counting_on(realtime_case):
    case = realtime_case(partitions=1)
    views = job_views(case.platform)
    work = _work(case.platform, views)
    client = connect(case.platform)
    values = [orjson.dumps(event_at(time.time() - 5, "impression", "user-1", "b1", 1)) for _ in range(20)]

    def batches():
        yield _rows(case.topic, values[:10], 0)
        client.delete(live.position_key(job_id(views), case.topic, 0))  # as a FLUSHALL would
        yield _rows(case.topic, values[10:], 10)

    with pytest.raises(redis.ResponseError, match="Redis lost data"):
        for _ in write_live(batches(), work):
            pass


def test_a_checkpoint_with_logged_batches_and_no_real_time_state_in_redis_stops_the_job(lake_spark, realtime_case):
    case = realtime_case(partitions=1, mode="real-time")
    views = job_views(case.platform)
    logged = Path(checkpoint_location(case.platform, views)) / "offsets"
    logged.mkdir(parents=True)
    (logged / "0").write_text("v1\n{}\n{}\n")  # what Spark leaves once it has logged a batch
    metrics = RealtimeMetrics()
    with pytest.raises(RedisBehindError, match="Redis lost the views' data.*--rebuild"):
        live_query.run(lake_spark, case.platform, views, metrics, threading.Event())
    assert metrics.registry.get_sample_value("conveyor_realtime_redis_lost_total") == 1


def test_a_sum_beyond_64_bits_saturates_its_counter_and_is_noted_for_the_view(realtime_case):
    case = realtime_case(partitions=1)
    views = job_views(case.platform)
    work = _work(case.platform, views)
    at = time.time() - 5
    values = [orjson.dumps(event_at(at, "impression", "user-1", "b1", 2**62)) for _ in range(3)]
    for _ in write_live(iter([_rows(case.topic, values, 0)]), work):
        pass
    client = connect(case.platform)
    [key] = counters_in_redis(case.platform, case.ctr)
    assert counters_in_redis(case.platform, case.ctr)[key] == {"impressions": 3, "spend": 2**63 - 1}
    assert client.hget(diagnostics_key(job_id(views)), f"saturated:{case.ctr}") == "1"
