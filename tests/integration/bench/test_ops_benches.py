"""The platform's and operations' benches at their smallest sizes (tests/benchkit.py)."""

from __future__ import annotations

import pytest

from tests.benchkit import refusal, run_bench

pytestmark = pytest.mark.integration


def test_startup_bench_times_a_warm_start_and_a_restart(tmp_path):
    result = run_bench("runtime_startup", tmp_path, "--skip-cold", "--warm-runs", "1")
    assert len(result["warm_seconds"]) == len(result["restart_seconds"]) == 1, result
    assert result["broker_rss_mib_mean"] > 0, result


def test_recovery_bench_times_a_killed_brokers_alarm_and_the_writes_resuming(tmp_path):
    (run,) = run_bench("broker_recovery", tmp_path, "--runs", "1", "--rate", "200")["runs"]
    assert run["alarm"] is not None and run["writes_resumed"] is not None, run


def test_balance_bench_scores_its_plan_beside_kafkas_generator_and_moves_a_broker_in(tmp_path):
    result = run_bench("balance_vs_kafka", tmp_path, "--seconds", "2", "--scale", "0.05", "--throttle", str(8 << 20),
                       "--batch-partitions", "200")
    assert {"conveyor", "kafka_generate"} <= set(result["comparison"]), result["comparison"]
    # Both plans scored on loads read from the bench's Prometheus, not on counts alone.
    assert not result["comparison"]["notes"] and result["comparison"]["bytes_total"] > 0, result["comparison"]
    assert {"throttled", "unthrottled"} <= set(result["add_broker"]), result["add_broker"]


def test_sampling_bench_counts_the_brokers_requests_for_ours_and_the_per_partition_peer(tmp_path):
    result = run_bench("ops_sampling", tmp_path, "--topics", "60")
    assert [r["method"] for r in result["rounds"]] == ["ours", "ours", "peer"], result
    assert all(r["total_requests"] > 0 for r in result["rounds"]), result


def test_balance_planner_bench_scores_kafkas_generator_beside_the_planner(tmp_path):
    (cluster,) = run_bench("balance_plan", tmp_path, "--quick", ports=False)["results"]
    assert cluster["partitions"] == 20_000 and cluster["plan_seconds"] > 0, cluster
    assert cluster["kafka_generate"]["bytes_moved"] > 0, cluster


def test_lag_bench_times_the_window_beside_a_single_value_check(tmp_path):
    (scale,) = run_bench("lag_eval", tmp_path, "--quick", ports=False)["results"]
    assert scale["partitions"] == 20_000 and scale["evaluate_seconds"] > 0 and scale["single_value_seconds"] > 0


@pytest.mark.parametrize(("bench", "args", "line"), [
    ("ops_sampling", ["--topics", "20"], "--topics must be more than 50"),
    ("balance_vs_kafka", ["--scale", "0"], "--scale must be above 0"),
    ("balance_vs_kafka", ["--batch-partitions", "0"], "--batch-partitions must be at least 1"),
])
def test_a_size_a_bench_cannot_measure_is_refused_in_one_line(bench, args, line):
    done = refusal(bench, *args)
    assert done.returncode == 2 and line in done.stderr.splitlines()[-1], done.stderr
