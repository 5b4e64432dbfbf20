"""The real-time views on a Spark standalone cluster (tests/sparkkit.py): the job runs as a
`conveyor pipeline` process in client mode against spark://, its Python code (the views' projection
and event id claims) in the worker's executor, whose interpreter has no conveyor of its own: the
session ships it. It keeps its views in a Redis Cluster and its checkpoint under a file:// URI.
The lake on the same cluster is tests/chaos/pipeline/test_lake_cluster_kill.py."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conveyor.pipeline.realtime.job import checkpoint_location
from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.realtime.store import ViewStore, connect
from tests.lakekit import produce
from tests.realtimekit import counters_in_redis, event_at, expected_counters, realtime_case, redis_cluster  # noqa: F401
from tests.sparkkit import on_cluster, spark_cluster  # noqa: F401

pytestmark = pytest.mark.integration


def _conveyor(path: Path, cwd: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "conveyor", *args, "--platform", str(path)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


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

    _conveyor(case.path, tmp_path, "views", "run", "--available-now")

    expected_ctr, expected_interests = expected_counters(events, case.ctr, case.interests)
    assert counters_in_redis(platform, case.ctr) == expected_ctr
    assert counters_in_redis(platform, case.interests) == expected_interests
    state = ViewStore(connect(platform), job_id(job_views(platform))).state()
    assert (state.counters["applied"], state.counters["duplicates"]) == (60, 20)
    location = checkpoint_location(platform, job_views(platform))
    assert location.startswith("file:///") and any((checkpoints / job_id(job_views(platform)) / "commits").iterdir())
