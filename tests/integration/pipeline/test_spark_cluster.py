"""The lake and the real-time views on a Spark standalone cluster (tests/sparkkit.py): each job runs
as a `conveyor pipeline` process in client mode against spark://, its Python code (the lake's
parser, the views' projection and event id claims) in the worker's executor, whose interpreter has
no conveyor of its own: the session ships it. The real-time job keeps its views in a Redis Cluster
and its checkpoint under a file:// URI."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conveyor.pipeline.realtime.job import checkpoint_location
from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.realtime.store import ViewStore, connect
from tests.conftest import demo_event
from tests.lakekit import lake_case, lake_folder, lake_spark, produce, quarantine_of, rows_of  # noqa: F401
from tests.realtimekit import counters_in_redis, event_at, expected_counters, realtime_case, redis_cluster  # noqa: F401
from tests.sparkkit import on_cluster, spark_cluster  # noqa: F401

pytestmark = pytest.mark.integration


def _conveyor(path: Path, cwd: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "conveyor", *args, "--platform", str(path)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_a_lake_run_on_a_standalone_cluster_lands_every_record_once(lake_spark, lake_case, spark_cluster, tmp_path):
    case = lake_case(partitions=2)
    on_cluster(case.path, spark_cluster)
    events = [demo_event(user_id=f"user-{i}", **({"price_micros": i} if i % 2 else {})) for i in range(40)]
    acked = produce(case.platform, case.topic, [*events, b"{not json"])
    before = spark_cluster.applications()

    _conveyor(case.path, tmp_path, "pipeline", "lake", "--once")

    assert len(spark_cluster.applications()) == len(before) + 1  # its executor ran on the worker
    rows = rows_of(lake_spark, case.topic)
    assert sorted(r.event_id for r in rows) == sorted(e["event_id"] for e in events)
    assert {r.event_id: r.price_micros for r in rows} == {e["event_id"]: e.get("price_micros") for e in events}
    [bad] = quarantine_of(lake_spark, case.topic)
    assert bytes(bad.raw_value) == b"{not json" and (bad.kafka_partition, bad.kafka_offset) in acked


def test_the_realtime_job_on_a_standalone_cluster_counts_exactly_into_a_redis_cluster(
        realtime_case, spark_cluster, redis_cluster, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    case = realtime_case(partitions=2, checkpoint=checkpoints.as_uri(), redis=redis_cluster)
    platform = on_cluster(case.path, spark_cluster)
    base = (time.time() // 60) * 60 - 600 + 5
    kinds = ("impression", "impression", "click", "page_view")
    events = [event_at(base + i, kinds[i % 4], f"user-{i % 5}", None if i % 4 == 3 else f"b{i % 7}",
                       None if i % 4 == 3 else 10 + i) for i in range(60)]
    produce(platform, case.topic, [*events, *events[::3]])  # a third of them twice: claimed in the executor

    _conveyor(case.path, tmp_path, "pipeline", "realtime", "--available-now")

    expected_ctr, expected_interests = expected_counters(events, case.ctr, case.interests)
    assert counters_in_redis(platform, case.ctr) == expected_ctr
    assert counters_in_redis(platform, case.interests) == expected_interests
    state = ViewStore(connect(platform), job_id(job_views(platform))).state()
    assert (state.counters["applied"], state.counters["duplicates"]) == (60, 20)
    location = checkpoint_location(platform, job_views(platform))
    assert location.startswith("file:///") and any((checkpoints / job_id(job_views(platform)) / "commits").iterdir())
