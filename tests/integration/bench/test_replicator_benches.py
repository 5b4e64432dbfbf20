"""The replicator's benches at their smallest sizes (tests/benchkit.py)."""

from __future__ import annotations

import pytest

from tests.benchkit import refusal, run_bench

pytestmark = pytest.mark.integration


def test_replicator_bench_measures_mirrormaker_2_beside_the_replicator(tmp_path):
    result = run_bench("replicate_vs_mm2", tmp_path, "--records", "2000", "--rate", "200", "--seconds", "5")
    for tool in ("ours", "mm2"):
        assert result[f"throughput_{tool}"]["records"] == 2000, result
        assert result["latency"][tool]["records"] == result["latency"][tool]["sent"] > 0, result


def test_failover_bench_times_every_bucket_before_and_after_a_workers_kill(tmp_path):
    (run,) = run_bench("replicate_failover", tmp_path, "--runs", "1", "--seconds", "10", "--rate", "50")["runs"]
    for window in ("before_kill", "after_kill_survivor_buckets", "after_kill_moved_buckets"):
        assert run[window]["records"] > 0, (window, run)
    assert run["copied"] >= run["sent"] > 0, run  # the moved buckets' records too, once taken over


def test_a_failover_window_shorter_than_a_takeover_is_refused_in_one_line():
    done = refusal("replicate_failover", "--seconds", "3")
    assert done.returncode == 2 and "--seconds must be at least 10" in done.stderr.splitlines()[-1], done.stderr
