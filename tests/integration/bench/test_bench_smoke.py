"""The benches a new user runs first, at their smallest size, from this checkout: each starts its
own platform, measures Conveyor's path and its peer's, and writes its figures (to a folder of the
test's, through CONVEYOR_BENCH_RESULTS, so bench/results keeps the real runs). A bench whose tool
is missing says in one line how to get it.

Ports: each bench's platform starts 1,000 above the session's first port, in the gap the sessions
of the two pytest workers leave (tests/conftest.base_port).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, base_port

pytestmark = pytest.mark.integration


def _bench(name: str, results: Path, *args: str, env: dict[str, str] | None = None,
           timeout: float = 600) -> subprocess.CompletedProcess:
    environment = {**os.environ, "CONVEYOR_BENCH_RESULTS": str(results), **(env or {})}
    return subprocess.run([sys.executable, "-m", f"bench.{name}", *args], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def test_lake_bench_lands_the_users_job_icebergs_sink_and_the_lake_and_writes_their_figures(tmp_path):
    done = _bench("lake_ingest", tmp_path, "--events", "2000", "--rounds", "1",
                  "--paths", "user_job,iceberg_sink,lake", "--base-port", str(base_port() + 1000))
    assert done.returncode == 0, done.stderr[-3000:]
    (size,) = json.loads((tmp_path / "lake_ingest.json").read_text())["sizes"]
    assert size["events"] == 2000
    assert set(size["events_per_cpu_second"]) == {"user_job", "iceberg_sink", "lake"}, size
    assert size["rounds"]["iceberg_sink"][0]["commits"] >= 1
    assert size["lake_per_cpu_second_to_sink"]["lake"] > 0
    assert "lake: " in done.stdout and "x Iceberg's sink's events per CPU-second" in done.stdout


def test_replicator_bench_measures_mirrormaker_2_beside_the_replicator(tmp_path):
    done = _bench("replicate_vs_mm2", tmp_path, "--records", "2000", "--rate", "200", "--seconds", "5",
                  "--base-port", str(base_port() + 1000))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "replicate_vs_mm2.json").read_text())
    for tool in ("ours", "mm2"):
        assert result[f"throughput_{tool}"]["records"] == 2000, result
        assert result["latency"][tool]["records"] == result["latency"][tool]["sent"] > 0, result


def test_gateway_bench_without_wrk_says_in_one_line_how_to_get_it(tmp_path):
    # A PATH holding this Python alone: no wrk on it.
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    done = _bench("gateway_throughput", tmp_path, env={"PATH": str(bare)}, timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "wrk is not installed: `apt-get install -y wrk` (Debian's package; `make bench` installs it)"]
    assert not (tmp_path / "gateway_throughput.json").exists()
