"""The gateway's, the dispatcher's and security's benches at their smallest sizes (tests/benchkit.py)."""

from __future__ import annotations

import sys

import pytest

from tests.benchkit import bench_port, refusal, run_bench

pytestmark = pytest.mark.integration


def test_gateway_bench_measures_the_direct_producer_beside_the_gateway(tmp_path):
    result = run_bench("gateway_throughput", tmp_path, "--seconds", "2", "--runs", "1", "--warmup", "1")
    assert result["direct_ceiling"]["events_per_s"] > 0, result
    assert result["gateway"]["500"]["events_per_s"] > 0 and result["batch500_share_of_ceiling"] > 0, result
    assert result["single_events_paced"]["p99_ms"] > 0, result


def test_gateway_bench_without_wrk_says_in_one_line_how_to_get_it(tmp_path):
    # A PATH holding this Python alone: no wrk on it.
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    done = refusal("gateway_throughput", env={"PATH": str(bare), "CONVEYOR_BENCH_RESULTS": str(tmp_path)})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "wrk is not installed: `apt-get install -y wrk` (Debian's package; `make bench` installs it)"]
    assert not (tmp_path / "gateway_throughput.json").exists()


def test_security_bench_measures_plaintext_beside_secured(tmp_path):
    result = run_bench("security_cost", tmp_path, "--seconds", "2", "--runs", "1", "--warmup", "1",
                       "--records", "2000")
    assert set(result["gateway"]["events_per_s_median"]) == {"plaintext", "sasl_ssl"}, result
    assert result["gateway"]["secured_share"] > 0, result
    for security in ("plaintext", "sasl_ssl"):
        assert result["replicator"][security]["records"] == 2000, result
    assert result["replicator"]["secured_share_per_cpu_s"] > 0, result


def test_dispatcher_bench_measures_the_plain_group_and_share_group_beside_the_dispatcher(tmp_path):
    result = run_bench("dispatch_throughput", tmp_path, "--quick", "--node-port", str(bench_port(400)))
    assert result["plain_group_3_consumers"]["messages_per_s"] > 0, result
    assert result["dispatcher_vs_plain"] > 0 and result["share_vs_plain"] > 0, result
    assert result["share_backend"]["dispatcher_30_clients"]["messages_per_s"] > 0, result
