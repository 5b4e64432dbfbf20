"""The lake's and the views' benches at their smallest sizes (tests/benchkit.py)."""

from __future__ import annotations

import pytest

from tests.benchkit import run_bench

pytestmark = pytest.mark.integration


def test_lake_bench_lands_the_users_job_icebergs_sink_and_the_lake_and_writes_their_figures(tmp_path):
    # Its platform, Spark and the Connect worker start one after another: 2-4 minutes alone, 8
    # beside a suite's promise and host-loss tests, and once over 10 in a suite.
    result = run_bench("lake_ingest", tmp_path, "--events", "2000", "--rounds", "1",
                       "--paths", "user_job,iceberg_sink,lake", timeout=1500)
    (size,) = result["sizes"]
    assert size["events"] == 2000
    assert set(size["events_per_cpu_second"]) == {"user_job", "iceberg_sink", "lake"}, size
    assert size["rounds"]["iceberg_sink"][0]["commits"] >= 1
    assert size["lake_per_cpu_second_to_sink"]["lake"] > 0
    assert "lake: " in result["stdout"] and "x Iceberg's sink's events per CPU-second" in result["stdout"]


def test_views_bench_measures_both_modes_beside_the_naive_consumer(tmp_path):
    result = run_bench("realtime_views", tmp_path, "--rate", "500", "--duration", "10", "--warmup", "5",
                       "--paths", "realtime,rtm,naive", "--rtm-rows", "20")
    for path in ("realtime", "naive"):
        assert result[path]["events"] > 0 and result[path]["latency_p99_seconds"] is not None, (path, result[path])
    # The real-time-mode path is also checked over its whole run. In suites on two loaded cores
    # (the other worker running every service of a platform, load average 17-20) its measured window
    # was empty three times: the warm-up took a path that had applied nothing yet for one caught up,
    # which it no longer does. A window a stall leaves empty is reported as it is: no events, no latency.
    rtm = result["rtm"]
    assert rtm["applied_records"] > 0 and (rtm["events"] > 0) == (rtm["latency_p99_seconds"] is not None), rtm


def test_spark_cluster_bench_measures_local_beside_the_standalone_cluster(tmp_path):
    # Six JVMs start one after another (a master, a worker, a driver per job and master): 3 minutes
    # alone, and over 10 in a suite whose other worker ran a platform's every service (load 15-40).
    result = run_bench("spark_cluster", tmp_path, "--events", "2000", "--rounds", "1", "--rate", "500",
                       "--duration", "5", "--warmup", "5", timeout=1500)
    assert set(result["lake"]) == set(result["realtime"]) == {"local", "standalone"}, result
    assert result["lake_standalone_to_local"] > 0, result
    assert all(r["events"] > 0 for r in result["realtime"].values()), result
